"""`ledger checks`: what a plan can ask for, without reading runners/."""

from __future__ import annotations

import click

from ledger.cli._common import emit_json, json_option
from ledger.errors import UsageError


@click.command()
@json_option
def checks(as_json: bool) -> None:
    """Every check a plan can name, with its parameters: type, default and meaning."""
    try:
        from runners.api import describe
    except ImportError as e:
        raise UsageError(f"listing checks needs the runners extra (torch): {e}") from None
    from ledger.render import render_checks

    catalog = describe()
    if as_json:
        emit_json(catalog)
    else:
        click.echo(render_checks(catalog), nl=False)
