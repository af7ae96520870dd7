"""The command line is a contract: a changed command or flag must be a decision.

Regenerate the snapshot with `python -m tests.ledger.cli.test_cli_surface` and
review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ledger.cli import cli

SNAPSHOT = Path(__file__).with_name("cli_surface.json")


def surface(cmd: click.Command = cli, prefix: str = "ledger") -> dict[str, Any]:
    out: dict[str, Any] = {}
    params = sorted(
        "/".join(p.opts) if isinstance(p, click.Option) else f"<{p.name}>" for p in cmd.params
    )
    out[prefix] = params
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            out.update(surface(sub, f"{prefix} {name}"))
    return out


def test_cli_surface_is_frozen() -> None:
    assert surface() == json.loads(SNAPSHOT.read_text())


def test_every_command_has_help() -> None:
    for name in surface():
        parts = name.split()[1:]
        cmd: click.Command = cli
        for p in parts:
            assert isinstance(cmd, click.Group)
            cmd = cmd.commands[p]
        assert (cmd.help or "").strip(), f"{name} has no help"


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(surface(), indent=2) + "\n")
