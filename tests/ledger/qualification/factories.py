"""Evidence built straight from the models (unsigned: the engine trusts the store's checks)."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ledger.evidence.models import (
    Check,
    Cleanup,
    PackageIdentity,
    QualificationPredicate,
    Resource,
    Runner,
    Source,
    Supersedes,
)
from ledger.qualification import ReceiptEvidence, ReviewEvidence, Revision

CLAIM = "admission.no-oom-after-admit"
CHECK = "admission"
REPO = "github.com/example/art"
H200 = {"device_kind": "cuda", "gpu_model": "NVIDIA H200"}
PACKAGE_PATHS = ["src/art/megatron/**/*.py"]

_counter = itertools.count(1)


def hex40(label: str) -> str:
    """A git object id: `label` itself if it is one, else a stable fake one."""
    if re.fullmatch(r"[0-9a-f]{40}", label):
        return label
    return hashlib.sha1(label.encode()).hexdigest()


def hex64(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def rid(label: str) -> str:
    return "sha256:" + hex64(label)


def revision(
    commit: str = "head", tree: str | None = None, package: str | None = None, pr: int | None = None
) -> Revision:
    """The revision asked about; tree defaults to the commit's own tree label."""
    return Revision(
        repo=REPO,
        commit=hex40(commit),
        tree=hex40(tree or f"tree-of-{commit}"),
        package_digest=hex64(package) if package else None,
        pr=pr,
    )


def cleanup(complete: bool = True) -> Cleanup:
    return Cleanup(
        complete=complete,
        resources=[
            Resource(kind="process", id="4242", released=True, proof="os.kill raised"),
            Resource(kind="gpu-memory", id="GPU-0", released=complete, proof="nvml baseline"),
        ],
    )


def receipt(
    *,
    seq: int | None = None,
    claim: str = CLAIM,
    check: str = CHECK,
    params: Mapping[str, Any] | None = None,
    scope: Mapping[str, str | int] | None = None,
    outcome: str = "passed",
    reason: str | None = None,
    commit: str = "head",
    tree: str | None = None,
    package: str | None = None,
    pr: int | None = None,
    dirty: bool = False,
    observer: str = "off",
    clean: bool | None = True,
    measurements: Mapping[str, Any] | None = None,
    supersedes: Sequence[tuple[str, str]] = (),
    signer: str = "runner-key",
    role: str = "runner",
    revoked_seq: int | None = None,
    problem: str | None = None,
    label: str | None = None,
) -> ReceiptEvidence:
    """A receipt with sensible defaults: a clean, passing admission run at the H200 scope."""
    n = seq if seq is not None else next(_counter)
    predicate = QualificationPredicate(
        claim=claim,
        check=Check(name=check, version="1", parameters=dict(params or {})),
        scope=dict(H200 if scope is None else scope),
        source=Source(
            repo=REPO,
            commit=hex40(commit),
            tree=hex40(tree or f"tree-of-{commit}"),
            pr=pr,
            dirty=dirty,
            package=(
                PackageIdentity(paths=PACKAGE_PATHS, digest=hex64(package)) if package else None
            ),
        ),
        outcome=outcome,
        reason=reason if reason is not None or outcome == "passed" else f"{outcome} happened",
        measurements=dict(measurements or {}),
        observer=observer,
        cleanup=None if clean is None else cleanup(clean),
        runner=Runner(
            host="h200-01",
            gpu_uuids=["GPU-0"],
            started="2026-09-25T10:00:00Z",
            finished="2026-09-25T10:05:00Z",
            ledger_version="0.1.0",
        ),
        supersedes=[Supersedes(id=i, reason=why) for i, why in supersedes],
    )
    return ReceiptEvidence(
        id=rid(label or f"receipt-{n}-{claim}-{commit}-{outcome}-{observer}"),
        seq=n,
        statement=predicate,
        signer=signer,
        signer_role=role,
        signer_revoked_seq=revoked_seq,
        problem=problem,
    )


def review(
    target: ReceiptEvidence | str,
    *,
    seq: int,
    verdict: Literal["concur", "dispute"] = "concur",
    signer: str = "reviewer-1",
    role: str = "reviewer",
    note: str = "",
    revoked_seq: int | None = None,
    problem: str | None = None,
) -> ReviewEvidence:
    receipt_id = target if isinstance(target, str) else target.id
    return ReviewEvidence(
        id=rid(f"review-{seq}-{receipt_id}-{signer}-{verdict}"),
        seq=seq,
        receipt=receipt_id,
        verdict=verdict,
        note=note,
        signer=signer,
        signer_role=role,
        signer_revoked_seq=revoked_seq,
        problem=problem,
    )
