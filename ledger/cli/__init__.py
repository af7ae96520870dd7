"""The `ledger` command line: options, one library call, render.

One error boundary: `main`. Commands import their machinery lazily, so
`ledger --help` starts fast; `ledger verify FILE` loads neither click nor
database code nor the pydantic models (`ledger.cli.fast`). A file a person
names for output is written through `files`, never through a link.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ledger.cli import fast
from ledger.cli._io import echo
from ledger.evidence.errors import EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, Error
from ledger.read.inert import inert

if TYPE_CHECKING:
    import click

__all__ = ["cli", "entry", "exit_now", "main"]


def __getattr__(name: str) -> Any:
    # `ledger.cli.cli`, the click group, is built on first use.
    if name == "cli":
        from ledger.cli.app import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


cli: click.Group


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: runs the CLI and maps every error to a one-line reason and an exit code."""
    try:
        request = fast.verify_request(list(sys.argv[1:] if argv is None else argv))
        if request is not None:
            from ledger.cli.verify import run_verify

            try:
                run_verify(request)
            except (EOFError, KeyboardInterrupt):
                # As click answers them in its commands (ledger.cli.app.run_click).
                echo(err=True)
                echo("ledger: aborted", err=True)
                return 130
        else:
            from ledger.cli.app import run_click

            return run_click(list(argv) if argv is not None else None)
    except Error as e:
        echo(f"ledger: {inert(e.reason())}", err=True)
        return e.exit_code
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        echo("ledger: interrupted; nothing half-written was recorded", err=True)
        return 130
    except RecursionError:
        # Inputs are depth-bounded where they enter (ledger.evidence.limits); this is the
        # backstop for any parser the bounds do not reach.
        echo("ledger: input refused: nested too deeply", err=True)
        return EXIT_NEGATIVE
    except OverflowError as e:
        echo(f"ledger: input refused: number out of range ({_first_line(e)})", err=True)
        return EXIT_NEGATIVE
    except OSError as e:
        # A file the environment will not give or take (too long a name, a
        # missing folder, a dangling link): the environment's problem, exit 2.
        where = f"{e.filename}: " if e.filename else ""
        echo(f"ledger: {where}{e.strerror or _first_line(e)}", err=True)
        return EXIT_USAGE
    except Exception as e:
        # Database failures are environment errors: one line, not a traceback.
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(e, SQLAlchemyError):
            raise
        orig = getattr(e, "orig", None) or e
        echo(f"ledger: database error: {str(orig).strip().splitlines()[0]}", err=True)
        return EXIT_USAGE
    return EXIT_OK


def exit_now(code: int) -> NoReturn:
    """End the process with ``code``. Where torch was loaded (`ledger qualify`), the
    interpreter's own teardown of its modules takes most of a second and frees nothing
    the operating system does not: the exit handlers run and the output is flushed,
    then the process ends without it. Every write the ledger makes is committed and
    every folder it made removed by then (context managers, not finalizers)."""
    if "torch" not in sys.modules:
        sys.exit(code)
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the reader left
            stream.flush()
    os._exit(code)


def entry() -> NoReturn:
    """The `ledger` command."""
    exit_now(main())


if __name__ == "__main__":
    entry()
