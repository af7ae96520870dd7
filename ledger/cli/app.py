"""The click group of every `ledger` command, and how one command line runs in it."""

from __future__ import annotations

from collections.abc import Sequence

import click

from ledger import __version__
from ledger.cli import checks as _checks
from ledger.cli import doctor as _doctor
from ledger.cli import estimate as _estimate
from ledger.cli import fleet as _fleet
from ledger.cli import importers as _importers
from ledger.cli import keys as _keys
from ledger.cli import log as _log
from ledger.cli import monitor as _monitor
from ledger.cli import plans as _plans
from ledger.cli import qualify as _qualify
from ledger.cli import read as _read
from ledger.cli import repos as _repos
from ledger.cli import run as _run
from ledger.cli import service as _service
from ledger.cli import summary as _summary
from ledger.cli import trend as _trend
from ledger.cli import witness as _witness
from ledger.cli import write as _write
from ledger.cli._io import echo
from ledger.evidence.errors import EXIT_OK, EXIT_USAGE

__all__ = ["cli", "run_click"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ledger")
def cli() -> None:
    """Signed, append-only qualification receipts for GPU training code.

    Runners and harnesses write signed receipts about a source revision;
    `status` answers which claims are qualified for it, at which scope, on
    what evidence; `verify` checks any receipt offline.

    Exit codes, every command: 0 success/qualified/verified; 1 a definite negative
    (not qualified because of the code or its evidence, verification failed, input
    refused); 2 usage or environment error (bad options, no plan, no database, a port
    taken); 3 not qualified (or not passed) only because of infrastructure: every
    blocker an infra-error, the sandbox's self-test did not pass, or receipts kept in
    the outbox or a server not reached at all. Retry on 3 alone.
    """


for _command in (
    _keys.init,
    _keys.keys,
    _write.attest,
    _write.record,
    _write.review,
    _qualify.qualify,
    _doctor.doctor,
    _write.supersede,
    _write.revoke,
    _read.status,
    _read.history,
    _read.show,
    _read.verify,
    _read.export,
    _summary.summary,
    _trend.trend,
    _plans.plan,
    _repos.repo,
    _read.audit,
    _log.serve,
    _log.log,
    _checks.checks,
    _fleet.fleet,
    _run.run,
    _importers.import_,
    _estimate.profile,
    _estimate.calibrate,
    _service.push,
    _service.artifact,
    _service.token,
    _witness.witness,
    _monitor.monitor,
):
    cli.add_command(_command)


def run_click(args: Sequence[str] | None) -> int:
    """Run one command line through click. The ledger's own errors propagate to
    the boundary in `ledger.cli.main`; click's are answered here."""
    try:
        cli.main(args=args, prog_name="ledger", standalone_mode=False)
    except click.exceptions.Abort:
        echo("ledger: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return EXIT_USAGE
    return EXIT_OK
