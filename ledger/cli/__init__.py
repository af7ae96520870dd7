"""The `ledger` command line: options, one library call, render.

One error boundary: `main`. Commands import their machinery lazily, so
`ledger --help` starts fast and `ledger verify FILE` loads no database code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ledger import __version__
from ledger.cli import checks as _checks
from ledger.cli import estimate as _estimate
from ledger.cli import importers as _importers
from ledger.cli import keys as _keys
from ledger.cli import log as _log
from ledger.cli import read as _read
from ledger.cli import run as _run
from ledger.cli import service as _service
from ledger.cli import summary as _summary
from ledger.cli import write as _write
from ledger.errors import EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, Error
from ledger.inert import inert

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ledger")
def cli() -> None:
    """Signed, append-only qualification receipts for GPU training code.

    Runners and harnesses write signed receipts about a source revision;
    `status` answers which claims are qualified for it, at which scope, on
    what evidence; `verify` checks any receipt offline.

    Exit codes: 0 success/qualified/verified, 1 a definite negative (not
    qualified, verification failed, input refused), 2 usage or environment error.
    """


for _command in (
    _keys.init,
    _keys.keys,
    _write.attest,
    _write.record,
    _write.review,
    _write.qualify,
    _write.supersede,
    _read.status,
    _read.history,
    _read.show,
    _read.verify,
    _read.export,
    _summary.summary,
    _read.audit,
    _log.serve,
    _log.log,
    _checks.checks,
    _run.run,
    _importers.import_,
    _estimate.profile,
    _estimate.calibrate,
    _service.push,
    _service.artifact,
    _service.token,
):
    cli.add_command(_command)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: runs the CLI and maps every error to a one-line reason and an exit code."""
    try:
        cli.main(
            args=list(argv) if argv is not None else None, prog_name="ledger", standalone_mode=False
        )
    except Error as e:
        click.echo(f"ledger: {inert(e.reason())}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("ledger: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return EXIT_USAGE
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("ledger: interrupted; nothing half-written was recorded", err=True)
        return 130
    except RecursionError:
        # Inputs are depth-bounded where they enter (ledger.limits); this is the
        # backstop for any parser the bounds do not reach.
        click.echo("ledger: input refused: nested too deeply", err=True)
        return EXIT_NEGATIVE
    except OverflowError as e:
        click.echo(f"ledger: input refused: number out of range ({_first_line(e)})", err=True)
        return EXIT_NEGATIVE
    except OSError as e:
        # A file the environment will not give or take (too long a name, a
        # missing folder, a dangling link): the environment's problem, exit 2.
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"ledger: {where}{e.strerror or _first_line(e)}", err=True)
        return EXIT_USAGE
    except Exception as e:
        # Database failures are environment errors: one line, not a traceback.
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(e, SQLAlchemyError):
            raise
        orig = getattr(e, "orig", None) or e
        click.echo(f"ledger: database error: {str(orig).strip().splitlines()[0]}", err=True)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
