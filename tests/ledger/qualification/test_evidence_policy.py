"""Evidence ages by policy: a plan's evidence_max_age makes older receipts stale (with
their age and the rule), and base_counterexample_heads makes a counterexample from
other code block a pull request only once confirmed on that many commits. A plan
without either keeps every verdict it had."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from ledger.evidence.errors import InputError
from ledger.qualification import ReceiptEvidence, evaluate
from ledger.qualification.meanings import verdict_of
from ledger.qualification.plan import ClaimSpec, PackageSpec, Plan, parse_plan
from ledger.read.render import render_table

from .factories import CHECK, CLAIM, H200, PACKAGE_PATHS, receipt, revision

FINISHED = dt.datetime(2026, 9, 25, 10, 5, tzinfo=dt.UTC)  # the factories' receipts
LATER = FINISHED + dt.timedelta(days=400)


def _plan(**top: Any) -> Plan:
    spec = ClaimSpec(name=CLAIM, check=CHECK, scope=dict(H200), carry_over="package")
    return Plan(claims=(spec,), package=PackageSpec(paths=tuple(PACKAGE_PATHS)), **top)


def _finished(r: ReceiptEvidence, when: str) -> ReceiptEvidence:
    runner = r.predicate.runner.model_copy(update={"finished": when})
    return dataclasses.replace(r, statement=r.predicate.model_copy(update={"runner": runner}))


EARLIER_PLAN = """
workload = "art.dev.trainer_rank:make_workload"

[package]
paths = ["src/art/megatron/**/*.py"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
scope = { device_kind = "cuda", gpu_model = "NVIDIA H200" }
carry_over = "package"
"""


def test_a_plan_without_the_settings_keeps_every_verdict_however_old_the_evidence() -> None:
    plan = parse_plan(EARLIER_PLAN)
    rev = revision("pr-head", package="pkg", pr=7)
    cases = [
        [receipt(commit="pr-head", pr=7)],
        [receipt(commit="pr-head", pr=7), receipt(commit="base", package="pkg", outcome="failed")],
        [receipt(commit="base", package="pkg", outcome="failed")],
    ]
    for rs in cases:
        then = evaluate(plan=plan, revision=rev, receipts=rs, reviews=[], now=FINISHED)
        now = evaluate(plan=plan, revision=rev, receipts=rs, reviews=[], now=LATER)
        assert [c.to_json() for c in now.claims] == [c.to_json() for c in then.claims]
    # The base branch's counterexample blocks at once, as before.
    assert then.claims[0].state == "failed"


def test_evidence_older_than_the_plans_max_age_is_stale_with_its_age_and_the_rule() -> None:
    plan = _plan(evidence_max_age="72h")
    rev = revision("head")
    old = receipt(commit="head")
    at_limit = evaluate(
        plan=plan, revision=rev, receipts=[old], reviews=[], now=FINISHED + dt.timedelta(hours=72)
    )
    assert at_limit.claims[0].state == "qualified"
    report = evaluate(
        plan=plan, revision=rev, receipts=[old], reviews=[], now=FINISHED + dt.timedelta(days=4)
    )
    row = report.claims[0]
    assert row.state == "stale" and row.receipts == (old.id,)
    [why] = [str(x) for x in row.reasons if x.rule == "evidence-age"]
    assert why.endswith(
        "passed 4.0d ago (finished 2026-09-25T10:05:00Z); the plan's evidence_max_age is 72h"
    )
    table = render_table(report)
    assert "stale" in table and "evidence-age" in table and "4.0d ago" in table
    # An aged counterexample no longer outweighs a fresh pass.
    fresh_now = FINISHED + dt.timedelta(days=4)
    failed = receipt(commit="head", outcome="failed")
    fresh = _finished(receipt(commit="head"), "2026-09-29T09:00:00Z")
    both = evaluate(plan=plan, revision=rev, receipts=[failed, fresh], reviews=[], now=fresh_now)
    assert both.claims[0].state == "qualified" and both.claims[0].receipts == (fresh.id,)
    # What each receipt means here: the fresh pass counts, the old failure is stale.
    [claim_verdict] = verdict_of(both).claims
    meant = {m.id: m.meaning for m in claim_verdict.receipts}
    assert meant == {fresh.id: "counts", failed.id: "stale"}


def test_a_base_branch_counterexample_blocks_other_prs_only_once_confirmed_on_n_heads() -> None:
    plan = _plan(base_counterexample_heads=2)
    rev = revision("pr-head", package="pkg", pr=7)
    first = receipt(commit="base-1", package="pkg", outcome="failed")
    one = evaluate(plan=plan, revision=rev, receipts=[first], reviews=[], now=FINISHED)
    row = one.claims[0]
    assert row.state == "inconclusive"
    [why] = [str(x) for x in row.reasons if x.rule == "base-confirmation"]
    assert "failures of the claim stand on 1 distinct commit(s)" in why
    assert "base_counterexample_heads is 2" in why
    # The same commit again is no confirmation; a second commit is.
    again = receipt(commit="base-1", package="pkg", outcome="failed")
    assert (
        evaluate(plan=plan, revision=rev, receipts=[first, again], reviews=[], now=FINISHED)
        .claims[0]
        .state
        == "inconclusive"
    )
    second = receipt(commit="base-2", package="pkg", outcome="failed")
    two = evaluate(plan=plan, revision=rev, receipts=[first, second], reviews=[], now=FINISHED)
    assert two.claims[0].state == "failed"
    # A failure of the pull request's own code blocks it at once.
    own = receipt(commit="pr-head", package="pkg", pr=7, outcome="failed")
    assert evaluate(plan=plan, revision=rev, receipts=[own], reviews=[], now=FINISHED).claims[
        0
    ].state == ("failed")


@pytest.mark.parametrize("bad", ['"72"', '"0h"', '"3w"', "72", '"-1d"'])
def test_a_bad_max_age_is_refused_with_one_line(bad: str) -> None:
    with pytest.raises(InputError, match="evidence_max_age"):
        parse_plan(f"evidence_max_age = {bad}\n" + EARLIER_PLAN)


def _health(r: ReceiptEvidence, line: str) -> ReceiptEvidence:
    runner = r.predicate.runner.model_copy(update={"environment": {"gpu_health": line}})
    return dataclasses.replace(r, statement=r.predicate.model_copy(update={"runner": runner}))


def test_a_receipt_from_a_quarantined_gpu_counts_only_with_a_clean_snapshot() -> None:
    plan = _plan()
    rev = revision("head")
    sick = frozenset({"GPU-0"})  # the factories' receipts ran on GPU-0
    passed = receipt(commit="head")
    row = evaluate(
        plan=plan, revision=rev, receipts=[passed], reviews=[], now=FINISHED, quarantined=sick
    ).claims[0]
    assert row.state == "unverified"
    [why] = [str(x) for x in row.reasons if x.rule == "quarantine"]
    assert "ran on quarantined GPU GPU-0" in why and "none recorded" in why
    clean = _health(passed, "clean (1 device(s))")
    for got, state in ((clean, "qualified"), (passed, "qualified")):
        # Clean on the quarantined GPU, or anything on a GPU not quarantined, counts.
        q = sick if got is clean else frozenset({"GPU-9"})
        assert (
            evaluate(
                plan=plan, revision=rev, receipts=[got], reviews=[], now=FINISHED, quarantined=q
            )
            .claims[0]
            .state
            == state
        )
    # A failure there, its snapshot naming a fault, blocks nothing.
    failed = _health(receipt(commit="head", outcome="failed"), "fault: XID 13 on GPU-0")
    both = evaluate(
        plan=plan, revision=rev, receipts=[failed, clean], reviews=[], now=FINISHED,
        quarantined=sick,
    )  # fmt: skip
    assert both.claims[0].state == "qualified"
