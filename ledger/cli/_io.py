"""What the command line reads and writes, without click: the offline
`ledger verify FILE` starts without importing click (see `ledger.cli.fast`),
and every command writes through these, so both paths print alike."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import IO, Any

from ledger.evidence.errors import UsageError

__all__ = ["echo", "emit_json", "read_file"]

# click.echo's rule, kept here: ANSI sequences are stripped when the stream is
# not a terminal. (Text from signed statements is made inert before it gets
# here; this covers what a person typed, such as a file name.)
_ANSI = re.compile(r"\033\[[0-?]*[ -/]*[@-~]")


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except Exception:
        return False


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Write one message to stdout (or stderr) and flush, as click.echo does."""
    file = sys.stderr if err else sys.stdout
    if file is None:  # no stream at all (pythonw): nothing to say it on
        return
    out = message + "\n" if nl else message
    if not out:
        file.flush()
        return
    if not _isatty(file):
        out = _ANSI.sub("", out)
    file.write(out)
    file.flush()


def emit_json(doc: Any) -> None:
    echo(json.dumps(doc, indent=2, sort_keys=False))


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
