"""Commands that read: `status`, `history`, `show`, `verify`, `export`, `audit`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ledger.cli._common import (
    ask_server,
    db_option,
    emit_json,
    json_option,
    open_reader,
    parse_scope,
    plan_option,
    rev_options,
    verdict_exit,
)
from ledger.evidence.errors import EXIT_NEGATIVE, EXIT_OK, UsageError


def _identity(  # type: ignore[no-untyped-def]
    repo: Path | None,
    rev: str | None,
    pr: int | None,
    plan: Path | None,
    offline: bool = False,
    base: str | None = None,
):
    from ledger.identity import source
    from ledger.plans import governing

    return governing.identify(
        source.open_repo(repo), rev=rev, pr=pr, plan_file=plan, offline=offline, base=base
    )


def _plan_file(repo: Path | None, ident: Any, override: Path | None) -> Any:
    """The plan as it stands in the checked revision (or --plan FILE), for the
    annotations' lines; line 1 of qualification.toml where it cannot be read."""
    from ledger.identity import source
    from ledger.qualification.plan import PLAN_FILE
    from ledger.read.formats import PlanFile, plan_lines

    try:
        r = source.open_repo(repo)
        if override is not None:
            root = Path(r.working_tree_dir or ".").resolve()
            where = override.resolve()
            path = str(where.relative_to(root)) if where.is_relative_to(root) else override.name
            return PlanFile(path, plan_lines(where.read_text(encoding="utf-8")))
        blob = r.commit(ident.revision.commit).tree / PLAN_FILE
        return PlanFile(PLAN_FILE, plan_lines(blob.data_stream.read().decode("utf-8")))
    except (KeyError, OSError, UnicodeDecodeError, ValueError, UsageError):
        return PlanFile()


@click.command()
@rev_options
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="NAME",
    help="Ask about these claims only (repeatable); also claims absent from the plan.",
)
@click.option(
    "--scope",
    "scope",
    multiple=True,
    metavar="K=V",
    help="Required scope facet (repeatable), added to each claim's plan scope.",
)
@plan_option
@ask_server
@click.option(
    "--trust",
    "trust",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --server: check its answer against its log, whose checkpoint this ledger "
    "key PEM (repeatable) must have signed; exit 1 where the answer is refused.",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --server: check its answer against its log, whose checkpoint must meet "
    "this C2SP tlog-policy (log key and witness quorum); exit 1 where it is refused.",
)
@db_option
@json_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown", "junit", "github-check"]),
    default="text",
    show_default=True,
    help="markdown: $GITHUB_STEP_SUMMARY or an MR comment; junit: a test report; "
    "github-check: a check-run payload (--json is --format json).",
)
@click.option(
    "--link",
    "link",
    metavar="URL",
    envvar="LEDGER_WEB_URL",
    help="The `ledger serve` whose pages markdown, junit and github-check link (each "
    "receipt's page and bundle, the PR page). Default: --server; $LEDGER_WEB_URL.",
)
def status(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    claims: Sequence[str],
    scope: Sequence[str],
    plan: Path | None,
    server: str | None,
    trust: Sequence[Path],
    policy: Path | None,
    db: str | None,
    as_json: bool,
    fmt: str,
    link: str | None,
) -> None:
    """Which claims are qualified for a revision, at which scope, on what evidence.

    For --pr N, the PR's current head is asked about; evidence on earlier heads
    counts only where the plan's carry-over (tree or package identity) allows,
    and shows as stale otherwise. Exit 0 only when every required claim is
    qualified at the requested scope; 3 when only infrastructure keeps it from
    qualifying (every blocker an infra-error: retry); else 1.

    With --server and --trust or --policy the server's answer is checked: this host
    keeps its log up to the newest checkpoint signed (and witnessed, with --policy),
    fetching only what was logged since the last one seen ($LEDGER_CACHE, else the
    user's cache folder), and the same judge decides on it. An answer that differs,
    leaves out a counterexample, or rests on a checkpoint that does not extend the
    last one seen is refused in one line, exit 1 (input refused: the server's).
    What the log does not decide (the fleet's quarantine) is labelled the server's word.
    """
    from ledger.read import formats
    from ledger.read.render import render_status, terminal_width

    ident = _identity(repo, rev, pr, plan, offline, base)
    if ident.plan is None and not claims:
        # Without a plan there is no required claim: "0 of 0 qualified" would answer
        # a question nobody asked.
        from ledger.qualification.plan import PLAN_FILE

        raise UsageError(
            f"no {PLAN_FILE} governs {ident.revision.commit[:12]}: "
            "pass --plan FILE (or --claim NAME to ask about claims by name)"
        )
    if (trust or policy is not None) and not server:
        raise UsageError("--trust and --policy go with --server (they check its answer)")
    asked = parse_scope(scope)
    reader = open_reader(db, server)
    if server and (trust or policy is not None):
        doc = _checked(
            server, ident, claims, asked, lambda: reader.status(ident, claims, asked), trust, policy
        )
    else:
        doc = reader.status(ident, claims, asked)
    if "plan_source" not in doc:  # a local answer, or a server of an earlier release
        from ledger.read.subject import local_plan_source, with_plan_source

        with_plan_source(doc, local_plan_source(ident.plan is not None, plan, server))
    fmt = "json" if as_json else fmt
    base_url = link or server
    links = formats.Links(base_url) if base_url else None
    if fmt == "json":
        emit_json(doc)
    elif fmt == "github-check":
        emit_json(formats.github_check(doc, links, _plan_file(repo, ident, plan)))
    elif fmt == "junit":
        click.echo(formats.junit(doc, links), nl=False)
    elif fmt == "markdown":
        click.echo(formats.markdown(doc, links), nl=False)
    else:
        click.echo(render_status(doc, width=terminal_width()), nl=False)
    code = verdict_exit(doc)
    if code != EXIT_OK:
        raise SystemExit(code)


def _checked(
    server: str,
    ident: Any,
    claims: Sequence[str],
    scope: dict[str, str | int],
    ask: Callable[[], dict[str, Any]],
    trust: Sequence[Path],
    policy: Path | None,
) -> dict[str, Any]:
    """The server's answer once its log decides the same (`ledger.read.checked`)."""
    from ledger.cli._io import read_file
    from ledger.evidence.keys import load_public_pem
    from ledger.read.checked import check_status

    rules = None
    if policy is not None:
        from ledger.transparency.policy import parse_policy

        rules = parse_policy(read_file(policy))
    pems = [load_public_pem(read_file(p), str(p)) for p in trust]
    return check_status(server, ident, claims, scope, ask, pems, rules)


@click.command()
@rev_options
@plan_option
@ask_server
@db_option
@json_option
def history(
    pr: int | None,
    rev: str | None,
    base: str | None,
    offline: bool,
    repo: Path | None,
    plan: Path | None,
    server: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Every statement and review about a revision, in log order; superseded ones marked."""
    from ledger.read.render import render_history, terminal_width

    doc = open_reader(db, server).history(_identity(repo, rev, pr, plan, offline, base))
    if as_json:
        emit_json(doc)
    else:
        click.echo(render_history(doc["subject"], doc["entries"], width=terminal_width()), nl=False)
        for problem in doc.get("problems", []):
            click.echo(f"problem: {problem}")


@click.command()
@click.argument("receipt")
@ask_server
@db_option
@json_option
def show(receipt: str, server: str | None, db: str | None, as_json: bool) -> None:
    """Show a receipt or review: its statement, signer and reviews."""
    from ledger.read.render import render_show, terminal_width

    doc = open_reader(db, server).show(receipt)
    if as_json:
        emit_json(doc)
    else:
        click.echo(render_show(doc, width=terminal_width()), nl=False)


@click.command()
@click.argument("target")
@click.option(
    "--trust",
    "trust",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trusted public key PEM (repeatable): the ledger key, or the signer's.",
)
@click.option("--repo", "want_repo", metavar="URL", help="Expect this repository (any URL form).")
@click.option("--commit", "want_commit", metavar="SHA", help="Expect this commit (7+ hex digits).")
@click.option("--claim", "want_claim", metavar="NAME", help="Expect this claim.")
@click.option("--signer", "want_signer", metavar="NAME|KEYID", help="Expect this signer.")
@click.option(
    "--checkpoint",
    "newer",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A newer checkpoint you trust (note, or /v1/log/consistency JSON): the bundle's "
    "must be a prefix of it (a forked log fails).",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A C2SP tlog-policy file: the checkpoint must be signed by one of its logs and "
    "cosigned by its witnesses' quorum (its log keys are trusted as --trust is).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Require the key's and the receipt's status as of the newest checkpoint held "
    "(a bundle's: a --checkpoint of its size); without it, unknown after the bundle's "
    "checkpoint is said, not required.",
)
@ask_server
@db_option
@json_option
def verify(
    target: str,
    trust: Sequence[Path],
    want_repo: str | None,
    want_commit: str | None,
    want_claim: str | None,
    want_signer: str | None,
    newer: Path | None,
    policy: Path | None,
    fresh: bool,
    server: str | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Verify a receipt: a bundle FILE offline (with --trust), or an ID against the ledger.

    It states each fact apart (signature and role at signing, inclusion up to a
    checkpoint, the witness quorum, the key's and the receipt's revocation status
    as of the key registry given, with its freshness) and passes only when every
    fact required is established: a --checkpoint newer than the bundle's leaves
    the status after the bundle's unknown, and fails.

    With --server and --trust, the receipt's bundle is fetched and verified
    here against --trust alone; with --server and no --trust the answer is
    the server's word, and says so.

    With --repo/--commit/--claim/--signer it also checks the receipt is the one
    expected, and fails (exit 1) when it is not. The output lists what was
    verified and each step performed; --json prints a document also on failure.
    """
    # `ledger verify FILE` usually starts without click (ledger.cli.fast); both run this.
    from ledger.cli.verify import VerifyRequest, run_verify

    run_verify(
        VerifyRequest(
            target=target,
            trust=tuple(Path(t) for t in trust),
            want_repo=want_repo,
            want_commit=want_commit,
            want_claim=want_claim,
            want_signer=want_signer,
            newer=newer,
            server=server,
            db=db,
            as_json=as_json,
            policy=policy,
            fresh=fresh,
        )
    )


@click.command()
@click.argument("receipt")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option(
    "--artifacts", "with_artifacts", is_flag=True, help="Put the receipt's artifacts inside."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["bundle", "test-result"]),
    default="bundle",
    show_default=True,
    help="test-result: the receipt as an in-toto test-result v0.1 Statement (unsigned).",
)
@click.option(
    "--proof",
    "with_proof",
    is_flag=True,
    help="Also write a C2SP .tlog-proof of the entry beside the bundle (its checkpoint "
    "with the witnesses' cosignatures).",
)
@ask_server
@db_option
def export(
    receipt: str,
    output: Path,
    with_artifacts: bool,
    fmt: str,
    with_proof: bool,
    server: str | None,
    db: str | None,
) -> None:
    """Write a self-contained bundle that `ledger verify FILE --trust PEM` checks offline,
    or (--format test-result) the receipt as a test-result Statement other tools read."""
    if fmt == "test-result":
        if with_proof:
            raise UsageError("--proof goes with a bundle, not --format test-result")
        _export_test_result(receipt, output, server, db)
        return
    # Before any work: a fresh checkpoint must not be signed for a file that cannot be written.
    if not output.absolute().parent.is_dir():
        raise UsageError(f"{output.parent}: no such directory")
    data = open_reader(db, server).bundle(receipt, artifacts=with_artifacts)
    from ledger.cli.files import write_atomically

    write_atomically(output, data)
    click.echo(f"wrote {output} ({len(data)} bytes)")
    if with_proof:
        from ledger.evidence.limits import load_json
        from ledger.transparency.proof import proof_of_bundle, proof_path

        proof = proof_of_bundle(load_json(data, "bundle"))
        write_atomically(proof_path(output), proof)
        click.echo(f"wrote {proof_path(output)} ({len(proof)} bytes)")


def _export_test_result(receipt: str, output: Path, server: str | None, db: str | None) -> None:
    from ledger.evidence.models import QualificationPredicate
    from ledger.read.standard import test_result

    if not output.absolute().parent.is_dir():
        raise UsageError(f"{output.parent}: no such directory")
    doc = open_reader(db, server).show(receipt)
    if doc["kind"] != "receipt":
        raise UsageError(f"{receipt} is a {doc['kind']}, not a receipt")
    pred = QualificationPredicate.model_validate(doc["statement"]["predicate"])
    data = json.dumps(test_result(doc["id"], pred), indent=2) + "\n"
    from ledger.cli.files import write_atomically

    write_atomically(output, data.encode())
    click.echo(f"wrote {output} ({len(data)} bytes)")


@click.command()
@ask_server
@click.option("--token", metavar="TOKEN", help="With --server: its token (default: $LEDGER_TOKEN).")
@db_option
@json_option
def audit(server: str | None, token: str | None, db: str | None, as_json: bool) -> None:
    """Recompute every entry hash, signature, sequence number and checkpoint root."""
    doc = open_reader(db, server, token).audit()
    if as_json:
        emit_json(doc)
    else:
        problems = doc.get("problems") or []
        for p in problems:
            click.echo(p)
        click.echo(
            f"{doc.get('entries')} entries, {doc.get('checkpoints')} checkpoints, "
            f"root {doc.get('root')}: " + ("ok" if doc.get("ok") else f"{len(problems)} problems")
        )
    if not doc.get("ok"):
        raise SystemExit(EXIT_NEGATIVE)
