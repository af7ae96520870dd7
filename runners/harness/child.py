"""The one way runners start a Python child: ``python -m MODULE REQUEST.json RESULT.json``.

The parent writes the request, the child writes its result atomically (a
missing result file means the child died before finishing) and reports
progress as prefixed lines on stderr. Children import this harness wherever
their working directory is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runners.contract.childenv import env as env  # re-exported: callers import it from here

PROGRESS = "\x1eprogress "
"""Prefix of a stderr line that is a progress message, not log output."""


def argv(module: str, request: Path, result: Path) -> list[str]:
    """The command line that runs ``module``'s `serve` entry on ``request``."""
    return [sys.executable, "-m", module, str(request), str(result)]


def write_request(path: Path, request: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(dict(request), default=str))


MAX_RESULT_BYTES = 64 * 1024 * 1024
"""A result document larger than this is not read (the child is not trusted)."""


def read_result(path: Path) -> Any | None:
    """The child's result, or None when it wrote none, or none readable: a regular
    file with one link, of at most `MAX_RESULT_BYTES`, holding JSON, opened beneath
    its folder without following a link (the child could have planted one)."""
    from ledger.outputs.beneath import Folder, Refused

    try:
        with Folder(path.parent) as folder:
            raw = folder.read(path.name, MAX_RESULT_BYTES)
        return json.loads(raw)
    except (OSError, ValueError, Refused):
        return None


def progress_line(line: str) -> str | None:
    """The message of a progress line, or None for any other line."""
    return line.removeprefix(PROGRESS) if line.startswith(PROGRESS) else None


def say(msg: str) -> None:
    """Report progress to the parent (one line)."""
    print(PROGRESS + msg.replace("\n", " "), file=sys.stderr, flush=True)


def serve(handle: Callable[[dict[str, Any]], Any], args: list[str] | None = None) -> int:
    """The child side: read the request, write ``handle(request)`` as the result."""
    args = sys.argv[1:] if args is None else args
    if len(args) != 2:
        print("usage: python -m MODULE REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = json.loads(Path(args[0]).read_text())
    result = handle(request)
    tmp = Path(args[1] + ".part")
    tmp.write_text(json.dumps(result))
    tmp.replace(args[1])
    return 0
