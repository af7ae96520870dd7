"""One judge: from what a question gathered to the verdict every surface renders, decided
once. Whether anything was judged, `qualified`, whose failure each blocker is, the
verdict and its exit code all come out of `judge`; nothing after it changes them, and
the verdict reads the answer by its type, never by a name it may lack."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.errors import EXIT_INFRA, EXIT_NEGATIVE, EXIT_OK
from ledger.qualification.evidence import ReceiptEvidence
from ledger.qualification.judge import Gathered, judge
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.qualification.report import StatusReport
from ledger.read.query import query_status
from tests.ledger.factories import statement

ROOT = Path(__file__).resolve().parents[3]
BASE = "b" * 40
HEAD = "c" * 40
CLAIM = "admission.no-oom-after-admit"
PLAN = Plan(claims=(ClaimSpec(name=CLAIM, check="admission", scope={"device_kind": "cpu"}),))


def _receipt(seq: int, commit: str, outcome: str, signer: str = "key-a") -> ReceiptEvidence:
    over: dict[str, Any] = {
        "source": {"repo": "example", "commit": commit, "tree": "2" * 40, "dirty": False}
        | ({"base": BASE, "pr": 7} if commit == HEAD else {}),
        "outcome": outcome,
        "runner": {
            "host": "gpu-host",
            "started": "2026-11-30T00:00:00Z",
            "finished": "2026-11-30T00:00:01Z",
            "ledger_version": "0.1.0",
        },
    }
    if outcome != "passed":
        over["reason"] = "peak 9 GiB > admitted 8 GiB" if outcome == "failed" else "no GPU"
    return ReceiptEvidence(
        id="sha256:" + f"{seq:02d}" * 32,
        seq=seq,
        statement=statement(**over),
        signer=signer,
        signer_role="runner",
    )


def _gathered(head: list[ReceiptEvidence], **over: Any) -> Gathered:
    from ledger.identity.revision import Revision

    fields: dict[str, Any] = {
        "plan": PLAN,
        "revision": Revision(repo="example", commit=HEAD, tree="2" * 40, pr=7),
        "receipts": head,
        "reviews": [],
    }
    return Gathered(**{**fields, **over})


def test_the_verdict_reads_the_answer_by_its_type() -> None:
    """`verdict_of` used to read `baselines` and `ungoverned` back by `getattr`: an
    answer without them read as one without a label or a conflict."""
    text = (ROOT / "ledger" / "qualification" / "verdict.py").read_text()
    assert not re.search(r"getattr\(\s*report\b", text)


@pytest.mark.parametrize(
    ("head", "over", "qualified", "code"),
    [
        ([_receipt(1, HEAD, "passed")], {}, True, EXIT_OK),
        ([_receipt(1, HEAD, "failed")], {}, False, EXIT_NEGATIVE),
        ([_receipt(1, HEAD, "infra-error")], {}, False, EXIT_INFRA),
        # An entry that does not read leaves the answer open, never infrastructure's.
        ([_receipt(1, HEAD, "infra-error")], {"unreadable": ("entry 9 ...",)}, False, 1),
        ([_receipt(1, HEAD, "passed")], {"unreadable": ("entry 9 ...",)}, False, 1),
        # Conflicting plan entries: named, not qualified.
        (
            [_receipt(1, HEAD, "passed")],
            {"problems": ("conflicting governing plans: a",)},
            False,
            1,
        ),
    ],
)
def test_the_judge_decides_qualified_and_the_exit_code_together(
    head: list[ReceiptEvidence], over: dict[str, Any], qualified: bool, code: int
) -> None:
    qualified = bool(qualified)
    got = judge(_gathered(head, **over))
    assert got.verdict is not None
    assert (got.qualified, got.verdict.qualified, got.verdict.exit_code) == (
        qualified,
        qualified,
        code,
    )
    doc = got.to_json()
    assert doc["verdict"]["exit_code"] == code and doc["qualified"] is qualified


def test_without_a_plan_or_a_named_claim_nothing_is_judged() -> None:
    got = judge(_gathered([_receipt(1, HEAD, "failed")], plan=None))
    assert got.claims == () and not got.governed and not got.qualified
    assert got.verdict is not None and got.verdict.headline == (
        "not qualified: no governing plan recorded"
    )
    conflict = judge(_gathered([], plan=None, problems=("conflicting governing plans: x",)))
    assert conflict.verdict is not None
    assert conflict.verdict.headline == "not qualified: conflicting governing plans recorded"


def test_the_judge_sets_a_blocker_beside_its_base_and_reads_the_base_only_then() -> None:
    asked: list[tuple[list[str], list[str]]] = []

    def base(commits: Sequence[str], claims: Sequence[str]) -> list[ReceiptEvidence]:
        asked.append((list(commits), list(claims)))
        return [_receipt(2, BASE, "failed")]

    got = judge(_gathered([_receipt(1, HEAD, "failed")], base=base))
    assert asked == [([BASE], [CLAIM])]
    assert [a.label for a in got.baselines] == ["base-too"]
    assert got.verdict is not None
    [blocker] = got.verdict.blockers
    assert blocker.attribution is not None and blocker.attribution.label == "base-too"
    assert got.to_json()["verdict"]["blockers"][0]["attribution"]["label"] == "base-too"
    # Nothing blocks: the base is never read.
    asked.clear()
    judge(_gathered([_receipt(1, HEAD, "passed")], base=base))
    assert asked == []


def test_what_the_read_side_answers_is_the_judges_answer(tmp_path: Path) -> None:
    """`query_status` gathers and judges, and changes nothing after: its answer is the
    judge's (the same verdict, exit code and labels)."""
    from ledger.identity.revision import Revision
    from ledger.plans.governing import Identity
    from ledger.read.query import gather
    from ledger.store.store import Store

    store = Store.create(f"sqlite:///{tmp_path / 'l.db'}")
    q = Identity(Revision(repo="example", commit=HEAD, tree="2" * 40, pr=7), PLAN, ("n",))
    answered = query_status(store, q, claims=None, scope={})
    judged = judge(gather(store, q, claims=None, scope={}))
    assert isinstance(answered, StatusReport)
    assert answered.to_json() == judged.to_json()
    assert answered.verdict is not None and answered.verdict.exit_code == EXIT_NEGATIVE
    store.dispose()
