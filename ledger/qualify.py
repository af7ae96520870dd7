"""`ledger qualify`: run a plan's checks on a revision and record one receipt each.

The revision is checked out into a temporary git worktree (removed
afterwards, also on Ctrl-C); the plan and the workload come from that
checkout. Each finished claim is signed and recorded at once, in its own
transaction, so an interruption leaves complete receipts or none. torch is
imported here lazily, through `runners`, and nowhere else in `ledger`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import git

from ledger import source as src
from ledger.attest import (
    Facts,
    artifact_of,
    build_statement,
    record_statement,
    sign_statement,
    timestamp,
)
from ledger.errors import InputError, UsageError
from ledger.keys import LocalKey
from ledger.models import QualificationStatement
from ledger.plan import Plan, load_plan
from ledger.qualification import Revision
from ledger.status import PLAN_FILE, Query
from ledger.store.store import Store

if TYPE_CHECKING:
    from runners.result import CheckResult

__all__ = ["QualifyRun", "qualify", "worktree"]

Device = Literal["auto", "cpu", "cuda"]


@contextlib.contextmanager
def worktree(repo: git.Repo, commit: str, label: str) -> Iterator[Path]:
    """A detached temporary worktree at `commit`, removed on the way out."""
    parent = Path(tempfile.mkdtemp(prefix=f"ledger-{label}-"))
    path = parent / "src"
    repo.git.worktree("add", "--detach", "--force", str(path), commit)
    try:
        yield path
    finally:
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("prune")


def _prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    def say(msg: str) -> None:
        progress(prefix + msg)

    return say


@contextlib.contextmanager
def _removed(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class QualifyRun:
    receipts: list[tuple[str, str, str]]
    """(receipt id, claim, outcome) in the order they were recorded."""
    revision: src.Revision
    plan: Plan

    def query(self) -> Query:
        """The status question about what was just qualified."""
        r = self.revision
        return Query(
            Revision(
                repo=r.repo_name,
                commit=r.commit,
                tree=r.tree,
                package_digest=r.package.digest if r.package else None,
                pr=r.pr,
            ),
            self.plan,
        )


def _facts(r: CheckResult, store: Store | None) -> Facts:
    cleanup = asdict(r.cleanup)
    return Facts(
        claim=r.claim,
        check=r.check,
        check_version=r.check_version,
        parameters=r.params,
        scope=r.scope,
        outcome=r.outcome,
        reason=r.reason,
        measurements=r.measurements,
        observer=r.observer,
        cleanup=cleanup,
        # Through a server the receipt names each artifact by digest; its contents
        # stay out of the ledger (the server accepts signed envelopes only).
        artifacts=[artifact_of(store, Path(a.path), a.name) for a in r.artifacts],
        supersedes=[],
        host=r.host,
        gpu_uuids=r.gpu_uuids,
        started=timestamp(r.started_ns) if r.started_ns else None,
        finished=timestamp(r.finished_ns) if r.finished_ns else None,
    )


def _record(
    store: Store | None, server: str | None, stmts: Sequence[QualificationStatement], key: LocalKey
) -> list[str]:
    """Sign and record one claim's statements, all or nothing: in the store or through a server."""
    if server is not None:
        from ledger.client import post_envelopes

        recs = post_envelopes(server, [sign_statement(s, key) for s in stmts])
        return [str(d["id"]) for d in recs]
    assert store is not None
    return [rec.id for rec in record_statement(store, stmts, key)]


def qualify(
    store: Store | None,
    key: LocalKey,
    *,
    repo_path: Path | None,
    rev: str | None,
    pr: int | None,
    plan_file: Path | None,
    claims: Sequence[str],
    device: Device,
    progress: Callable[[str], None],
    server: str | None = None,
) -> QualifyRun:
    try:
        from runners.api import check_names
        from runners.isolated import run_claim_isolated
    except ImportError as e:
        raise UsageError(f"qualify needs the runners extra (torch): {e}") from None

    repo = src.open_repo(repo_path)
    head = src.resolve(repo, rev=rev, pr=pr, identity_only=True)
    out: list[tuple[str, str, str]] = []
    with worktree(repo, head.commit, "rev") as root:
        path = plan_file or root / PLAN_FILE
        if not path.is_file():
            raise InputError(f"no {PLAN_FILE} at {head.commit[:12]}; pass --plan FILE")
        plan = load_plan(path)
        paths = list(plan.package.paths) if plan.package else []
        full = src.resolve(repo, rev=head.commit, package_paths=paths)
        # The checks run on a fresh worktree of the commit: clean by construction,
        # whatever state the caller's own work tree is in.
        revision = dataclasses.replace(full, pr=pr, dirty=False)
        asked = [c for c in plan.claims if not claims or c.name in claims]
        unknown = sorted(set(claims) - {c.name for c in plan.claims})
        if unknown:
            raise InputError(f"claims not in the plan: {', '.join(unknown)}")
        for c in asked:
            if c.check not in check_names():
                known = ", ".join(check_names())
                raise InputError(f"plan claim {c.name}: unknown check {c.check!r} ({known})")
        base_ctx: contextlib.AbstractContextManager[Path | None] = contextlib.nullcontext(None)
        if (
            revision.base
            and revision.base != revision.commit
            and any(c.check == "gradient-compare" for c in asked)
        ):
            base_ctx = worktree(repo, revision.base, "base")
        artifacts = Path(tempfile.mkdtemp(prefix="ledger-artifacts-"))
        with base_ctx as base_root, _removed(artifacts):
            for i, claim in enumerate(asked, 1):
                t0 = time.monotonic()
                tag = f"[{i}/{len(asked)}]"
                progress(f"{tag} {claim.name} ({claim.check}) ...")
                results = run_claim_isolated(
                    claim=claim.name,
                    check=claim.check,
                    params=dict(claim.params),
                    repo_root=root,
                    workload_ref=claim.workload or plan.workload or "",
                    workload_params=dict(plan.workload_params),
                    device=device,
                    observer_off_required=claim.observer_off,
                    base_root=base_root,
                    progress=_prefixed(progress, tag + "  "),
                    artifact_dir=artifacts,
                )
                stmts = [build_statement(revision.source(), _facts(r, store)) for r in results]
                for rid, r in zip(_record(store, server, stmts, key), results, strict=True):
                    out.append((rid, r.claim, r.outcome))
                    note = "" if r.outcome == "passed" else f": {r.reason}"
                    progress(
                        f"{tag} {r.claim} {r.outcome}{note} "
                        f"({time.monotonic() - t0:.1f} s) -> {rid[:19]}"
                    )
    return QualifyRun(out, revision, plan)
