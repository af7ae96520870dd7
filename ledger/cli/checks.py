"""`ledger checks`: what a plan can ask for, without reading runners/."""

from __future__ import annotations

from typing import Any

import click

from ledger.cli._common import emit_json, json_option


def external_checks() -> list[dict[str, Any]]:
    """The checks whose receipts come from outside `qualify`: `ledger import` and
    `ledger run`, in the catalog's shape."""
    from ledger.importers import CHECKS, VERSION
    from ledger.write.run import CHECK
    from ledger.write.run import VERSION as RUN_VERSION

    out: list[dict[str, Any]] = [
        {
            "name": name,
            "version": VERSION,
            "summary": summary,
            "params": [
                {"name": p, "type": t, "default": default, "doc": doc}
                for p, (t, default, _, doc) in params.items()
            ],
        }
        for name, (summary, params) in CHECKS.items()
    ]
    out.append(
        {
            "name": CHECK,
            "version": RUN_VERSION,
            "summary": "any command's exit status or result file, recorded by `ledger run`",
            "params": [],
        }
    )
    return out


@click.command()
@json_option
def checks(as_json: bool) -> None:
    """Every check a plan can name, with its parameters: type, default and meaning.

    The checks `ledger qualify` runs (they need the runners extra, torch) and
    those whose receipts `ledger import` and `ledger run` record.
    """
    from ledger.read.render import render_checks, terminal_width

    catalog = external_checks()
    try:
        from runners.api import describe
    except ImportError as e:
        click.echo(f"ledger: qualify's checks need the runners extra (torch): {e}", err=True)
    else:
        catalog += describe()
    catalog.sort(key=lambda c: str(c["name"]))
    if as_json:
        emit_json(catalog)
    else:
        click.echo(render_checks(catalog, width=terminal_width()), nl=False)
