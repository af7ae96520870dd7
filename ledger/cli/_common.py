"""What every command shares: options, input files, output."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ledger.cli._io import emit_json, read_file
from ledger.evidence.errors import (
    EXIT_INFRA,
    EXIT_NEGATIVE,
    EXIT_OK,
    Error,
    InputError,
    UsageError,
)

if TYPE_CHECKING:  # the CLI imports its machinery lazily, so `--help` starts fast
    from ledger.evidence.keys import KeyDir
    from ledger.read.reader import Reader
    from ledger.store.store import Store
    from ledger.write.record import Recorder

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "F",
    "db_option",
    "emit_json",
    "json_option",
    "keydir",
    "load_json_file",
    "open_reader",
    "open_store",
    "parse_scope",
    "plan_option",
    "read_file",
    "rev_options",
    "verdict_exit",
]


def db_option(f: F) -> F:
    return click.option(
        "--db",
        metavar="URL",
        help="SQLAlchemy URL or SQLite path "
        "(default: $LEDGER_DB, else $XDG_DATA_HOME/ledger/ledger.db).",
    )(f)


def plan_option(f: F) -> F:
    return click.option(
        "--plan",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Plan file (default: qualification.toml as committed at the revision).",
    )(f)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document on stdout."
    )(f)


def rev_options(f: F) -> F:
    f = click.option(
        "--repo",
        type=click.Path(file_okay=False, path_type=Path),
        help="Repository (default: the current one).",
    )(f)
    f = click.option(
        "--offline",
        is_flag=True,
        help="With --pr: judge the local refs as they are (no fetch), and say so.",
    )(f)
    f = click.option(
        "--base",
        metavar="BRANCH",
        help="With --pr: the base branch whose plan governs "
        "(default: the remote's default branch, else main).",
    )(f)
    f = click.option("--rev", metavar="REV", help="A commit, branch or tag.")(f)
    f = click.option(
        "--pr",
        type=click.IntRange(min=1),
        metavar="N",
        help="Pull request N: its current head (refs/pull/N/head, fetched from the remote).",
    )(f)
    return f


def open_store(db: str | None) -> Store:
    from ledger.store.store import Store, resolve_url

    return Store.open(resolve_url(db))


def open_reader(
    db: str | None, server: str | None, token: str | None = None, *, one: bool = False
) -> Reader:
    """What every command that reads asks: the ledger here, or the server at --server
    (`ledger.read.reader`); nothing is opened or asked before the first question."""
    from ledger.read.reader import open_reader as opened

    return opened(db, server, token, one=one)


def keydir() -> KeyDir:
    from ledger.evidence.keys import KeyDir

    return KeyDir.default()


def load_json_file(path: Path, what: str) -> Any:
    from ledger.evidence.limits import load_json

    return load_json(read_file(path), f"{what} file {path}")


def parse_scope(pairs: Sequence[str]) -> dict[str, str | int]:
    """`k=v` facets; integers stay integers so `gpu_count=2` matches exactly."""
    out: dict[str, str | int] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise UsageError(f"--scope {p!r}: expected key=value")
        if k in out:
            raise UsageError(f"--scope {k} given twice")
        if v.lstrip("-").isdigit():
            from ledger.evidence.limits import check_int, parse_int

            try:
                number = parse_int(v)
                check_int(number, f"--scope {k}")
            except Error as e:
                raise InputError(f"--scope {k}: {e.reason()}") from None
            out[k.strip()] = number
        else:
            out[k.strip()] = v
    return out


sandbox_option = click.option(
    "--sandbox",
    type=click.Choice(["auto", "bwrap", "none"]),
    default="auto",
    show_default=True,
    help="How the pull request's code runs: auto (bubblewrap, else refuse), bwrap, or none "
    "(unsandboxed; recorded as sandbox=none in every receipt). See docs/security.md.",
)


def recorder_paths(recorder: Recorder) -> list[str]:
    """Where a recorder keeps what the sandbox must not reach (`ledger.read.handle`)."""
    from ledger.read.handle import recorder_paths as paths

    return paths(recorder)


def server_option(help_text: str) -> Callable[[F], F]:
    """``--server URL``: through a `ledger serve` instead of the database."""
    return click.option("--server", metavar="URL", help=help_text)


ask_server = server_option("Ask a `ledger serve` at URL instead of --db.")
"""``--server`` of the commands that only read."""


def verdict_exit(doc: dict[str, Any]) -> int:
    """The exit status of a whole-plan answer (`status --json`, here or through a
    server): the one the judge decided with the verdict (`verdict.exit_code`: 0
    qualified; 3 not qualified only because of infrastructure; else 1). A server of
    an earlier release sends none: it is read from the same facts, as that release
    did."""
    verdict = doc.get("verdict") or {}
    code = verdict.get("exit_code")
    if code in (EXIT_OK, EXIT_NEGATIVE, EXIT_INFRA):
        return int(code)
    if doc.get("qualified"):
        return EXIT_OK
    if verdict.get("infra_only") and not doc.get("problems"):
        return EXIT_INFRA
    return EXIT_NEGATIVE


def kept(recorder: Recorder) -> bool:
    """Say so when receipts stayed in the outbox because the server could not take them
    (the caller exits 3: the revision was not judged, the server was not reached)."""
    from ledger.read.handle import kept_line

    line = kept_line(recorder)
    if line is not None:
        click.echo(f"ledger: {line}", err=True)
    return line is not None
