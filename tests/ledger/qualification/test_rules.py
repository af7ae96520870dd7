"""One test (or a few) per named rule."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.qualification import RULES, evaluate
from ledger.qualification import rules as R

from .factories import CHECK, CLAIM, H200, receipt, review, revision, rid
from .helpers import plan, report, rules_of, status, why


def test_every_rule_is_described() -> None:
    names = {getattr(R, n) for n in R.__all__ if n.isupper() and n != "RULES"}
    assert names == set(RULES)


# -- passing-evidence / no-evidence ------------------------------------------


def test_no_evidence_is_not_run() -> None:
    row = status([])
    assert (row.state, row.receipts, row.via) == ("not-run", (), None)
    assert rules_of(row) == {R.NO_EVIDENCE}


def test_a_clean_pass_at_the_commit_qualifies() -> None:
    r = receipt(seq=1)
    row = status([r])
    assert (row.state, row.receipts, row.via) == ("qualified", (r.id,), "commit")
    assert str(row.reasons[0]).startswith("passing-evidence: ")


# -- carry-over -----------------------------------------------------------------


def test_other_commit_same_tree_counts_only_with_tree_or_package_carry_over() -> None:
    rev = revision("merge", tree="T")
    r = receipt(seq=1, commit="pr-head", tree="T")
    assert status([r], rev=rev).state == "not-run"
    assert "carries over by commit only" in why(status([r], rev=rev))
    for carry in ("tree", "package"):
        row = status([r], rev=rev, carry_over=carry)
        assert (row.state, row.via) == ("qualified", "tree")
        assert "via tree" in why(row)


def test_same_package_digest_counts_only_with_package_carry_over() -> None:
    rev = revision("new", tree="T2", package="P")
    r = receipt(seq=1, commit="old", tree="T1", package="P")
    assert status([r], rev=rev, carry_over="tree").state == "not-run"
    row = status([r], rev=rev, carry_over="package")
    assert (row.state, row.via) == ("qualified", "package")


def test_different_package_does_not_carry() -> None:
    rev = revision("new", tree="T2", package="P2")
    r = receipt(seq=1, commit="old", tree="T1", package="P1")
    row = status([r], rev=rev, carry_over="package")
    assert row.state == "not-run"
    assert R.CARRY_OVER in rules_of(row)


def test_via_prefers_the_most_direct_link() -> None:
    rev = revision("merge", tree="T")
    a = receipt(seq=1, commit="pr-head", tree="T")
    b = receipt(seq=2, commit="merge", tree="T")
    row = status([a, b], rev=rev, carry_over="tree")
    assert (row.via, set(row.receipts)) == ("commit", {a.id, b.id})


# -- stale-head -----------------------------------------------------------------


def test_earlier_pr_head_with_other_tree_is_stale_and_says_which() -> None:
    rev = revision("head2", pr=898)
    old = receipt(seq=1, commit="head1", pr=898)
    row = status([old], rev=rev, carry_over="tree")
    assert (row.state, row.receipts, row.via) == ("stale", (old.id,), None)
    assert f"earlier head {old.predicate.source.commit[:12]} of PR #898" in why(row)


def test_current_evidence_beats_stale() -> None:
    rev = revision("head2", pr=898)
    old = receipt(seq=1, commit="head1", pr=898)
    new = receipt(seq=2, commit="head2", pr=898, outcome="inconclusive")
    assert status([old, new], rev=rev).state == "inconclusive"


def test_other_pr_is_not_stale_just_irrelevant() -> None:
    rev = revision("head2", pr=898)
    row = status([receipt(seq=1, commit="x", pr=931)], rev=rev)
    assert row.state == "not-run"


# -- counterexample / supersession ------------------------------------------------


def test_counterexample_outweighs_any_number_of_passes() -> None:
    passes = [receipt(seq=i) for i in range(1, 6)]
    fail = receipt(seq=6, outcome="failed", reason="CUDA OOM after admission")
    row = status([*passes, fail])
    assert (row.state, row.receipts) == ("failed", (fail.id,))
    assert "outweigh 5 pass(es)" in why(row)
    # An earlier failure outweighs later passes too: order does not excuse it.
    early_fail = receipt(seq=0, outcome="failed")
    assert status([early_fail, *passes]).state == "failed"


def test_later_receipt_that_explicitly_supersedes_retires_the_counterexample() -> None:
    fail = receipt(seq=1, outcome="failed")
    fix = receipt(seq=2, supersedes=[(fail.id, "OOM came from a leaked ballast")])
    row = status([fail, fix])
    assert (row.state, row.receipts) == ("qualified", (fix.id,))
    assert "superseded by" in why(row) and "leaked ballast" in why(row)


def test_plain_later_pass_does_not_retire_a_counterexample() -> None:
    fail = receipt(seq=1, outcome="failed")
    assert status([fail, receipt(seq=2)]).state == "failed"


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"seq": 0}, "not logged later"),
        ({"claim": "other.claim"}, "for claim 'other.claim'"),
        ({"scope": {"device_kind": "cuda"}}, "does not cover"),
        ({"problem": "bad signature"}, "does not hold"),
        ({"dirty": True}, "does not hold"),
        ({"outcome": "infra-error"}, "decides nothing"),
        ({"outcome": "inconclusive"}, "decides nothing"),
        ({"commit": "elsewhere"}, "does not count for this revision"),
    ],
)
def test_supersession_that_proves_nothing_here_is_ignored(
    kwargs: dict[str, Any], problem: str
) -> None:
    fail = receipt(seq=1, outcome="failed", label="the-failure")
    other = {"seq": 2, "supersedes": [(fail.id, "trust me")], **kwargs}
    row = status([fail, receipt(**other)])
    assert row.state == "failed"
    assert problem in why(row)


def test_superseded_pass_no_longer_counts() -> None:
    first = receipt(seq=1)
    correction = receipt(seq=2, clean=False, supersedes=[(first.id, "wrong workload")])
    row = status([first, correction])
    assert row.state == "unverified"
    assert R.SUPERSESSION in rules_of(row)


# -- infra-error / refusal / inconclusive -------------------------------------------


def test_infra_error_counts_neither_way() -> None:
    e = receipt(seq=1, outcome="infra-error", reason="HTTP 503 downloading the model")
    row = status([e])
    # Evidence of nothing about the code: its own state, which a retry (not a fix) clears.
    assert row.state == "infra-error"
    assert "infra-error: " in why(row) and "HTTP 503" in why(row)
    assert status([e, receipt(seq=2)]).state == "qualified"


def test_refusal_is_neither_failure_nor_evidence() -> None:
    refused = receipt(seq=1, outcome="refused", reason="predicted 37.2 GiB > usable 33.3 GiB")
    assert status([refused]).state == "not-run"
    assert "not proof of infeasibility" not in why(status([refused]))
    assert "proof of infeasibility" in why(status([refused]))
    assert status([refused, receipt(seq=2)]).state == "qualified"


def test_only_inconclusive_is_inconclusive() -> None:
    row = status([receipt(seq=1, outcome="inconclusive", reason="comparator inconclusive")])
    assert row.state == "inconclusive"
    assert R.INCONCLUSIVE in rules_of(row)


def test_pass_outweighs_inconclusive() -> None:
    assert status([receipt(seq=1, outcome="inconclusive"), receipt(seq=2)]).state == "qualified"


# -- comparison-arms ----------------------------------------------------------------


@pytest.mark.parametrize(
    "measurements",
    [
        {"arm_gpu_uuids": ["GPU-aaaa", "GPU-bbbb"]},
        {"arm_gpu_uuids": {"base": "GPU-aaaa", "candidate": "GPU-bbbb"}},
        {"arm_start_reserved_bytes": [1024, 2048]},
        {"arm_gpu_uuids": [["GPU-a", "GPU-b"], ["GPU-a", "GPU-c"]]},
        {"base_gpu_uuid": "GPU-a", "candidate_gpu_uuid": "GPU-b"},
        {"base_reserved_at_start_bytes": 0, "candidate_reserved_at_start_bytes": 2097152},
    ],
)
@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_comparison_across_different_arms_is_inconclusive(
    measurements: dict[str, Any], outcome: str
) -> None:
    r = receipt(seq=1, check="gradient-compare", outcome=outcome, measurements=measurements)
    row = status([r], check="gradient-compare")
    assert row.state == "inconclusive"
    assert R.COMPARISON_ARMS in rules_of(row)


def test_comparison_on_the_same_arms_counts() -> None:
    same = {"arm_gpu_uuids": ["GPU-a", "GPU-a"], "arm_start_reserved_bytes": [0, 0]}
    r = receipt(seq=1, check="gradient-compare", measurements=same)
    assert status([r], check="gradient-compare").state == "qualified"
    per_arm = {"base_gpu_uuid": "GPU-a", "candidate_gpu_uuid": "GPU-a", "base_gpu_uuid_x": 1}
    r = receipt(seq=1, check="gradient-compare", measurements=per_arm)
    assert status([r], check="gradient-compare").state == "qualified"


# -- observer-off-control ----------------------------------------------------------


def test_observer_on_pass_needs_a_control_when_required() -> None:
    on = receipt(seq=1, observer="on")
    assert status([on]).state == "qualified"  # not required by default
    row = status([on], observer_off=True)
    assert row.state == "unverified"
    assert R.OBSERVER_OFF_CONTROL in rules_of(row)


@pytest.mark.parametrize(
    "control",
    [
        {"claim": "admission.observer-off", "check": CHECK},
        {"claim": "x", "check": "observer-off-control", "params": {"check": CHECK}},
        {"scope": {**H200, "dtype": "bf16", "torch": "2.11"}},
    ],
)
def test_passing_observer_off_control_lets_observer_on_evidence_count(
    control: dict[str, Any],
) -> None:
    bf16 = {**H200, "dtype": "bf16"}
    on = receipt(seq=1, observer="on", claim="c", check=CHECK, scope=bf16)
    off = receipt(seq=2, observer="off", **{"claim": "c", "scope": bf16, **control})
    row = evaluate(
        plan=plan(name="c", observer_off=True),
        revision=revision(),
        receipts=[on, off],
        reviews=[],
        claims=["c"],
        query_scope={"dtype": "bf16"},
    ).at_required_scope("c")
    assert row.state == "qualified"
    assert f"observer-off control {off.id[7:19]} passed" in why(row)


@pytest.mark.parametrize(
    "control",
    [
        {"outcome": "failed"},
        {"outcome": "infra-error"},
        {"observer": "on"},
        {"check": "other-check"},
        {"check": "observer-off-control", "params": {"check": "other-check"}},
        {"scope": {"device_kind": "cuda", "gpu_model": "A100"}},
        {"scope": {"device_kind": "cuda"}},
        {"commit": "elsewhere"},
        {"problem": "unknown key"},
        {"dirty": True},
        {"clean": False},
    ],
)
def test_a_control_must_be_a_valid_pass_of_the_same_check_covering_the_scope(
    control: dict[str, Any],
) -> None:
    on = receipt(seq=1, observer="on")
    off = receipt(**{"seq": 2, "claim": "admission.observer-off", **control})
    row = status([on, off], observer_off=True)
    assert row.state == "unverified"
    assert R.OBSERVER_OFF_CONTROL in rules_of(row)


def test_observer_on_failure_is_a_counterexample_even_without_control() -> None:
    # Uncontrolled instrumentation keeps a pass from qualifying; it does not excuse an OOM.
    row = status(
        [receipt(seq=1), receipt(seq=2, observer="on", outcome="failed")], observer_off=True
    )
    assert row.state == "failed"


# -- cleanup-proof ------------------------------------------------------------------


@pytest.mark.parametrize(("clean", "text"), [(None, "no cleanup proof"), (False, "incomplete")])
def test_pass_without_complete_cleanup_is_unverified(clean: bool | None, text: str) -> None:
    row = status([receipt(seq=1, clean=clean)])
    assert row.state == "unverified"
    assert R.CLEANUP_PROOF in rules_of(row) and text in why(row)
    assert status([receipt(seq=1, clean=clean)], cleanup=False).state == "qualified"


def test_incomplete_cleanup_names_the_unreleased_resource() -> None:
    assert "gpu-memory GPU-0" in why(status([receipt(seq=1, clean=False)]))


def test_failure_with_incomplete_cleanup_is_still_a_counterexample() -> None:
    assert status([receipt(seq=1), receipt(seq=2, outcome="failed", clean=False)]).state == "failed"


# -- dirty-tree ---------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_dirty_work_tree_never_counts(outcome: str) -> None:
    row = status([receipt(seq=1, dirty=True, outcome=outcome)])
    assert row.state == "unverified"
    assert R.DIRTY_TREE in rules_of(row)


# -- planned-check ------------------------------------------------------------------


def test_pass_must_run_the_planned_check_and_parameters() -> None:
    params = {"batches": [1, 2, 4], "ballast": True}
    assert status([receipt(seq=1, check="other")]).state == "unverified"
    assert status([receipt(seq=1, params=params)], params=params).state == "qualified"
    more = {**params, "seed": 7}
    assert status([receipt(seq=1, params=more)], params=params).state == "qualified"
    less = {"batches": [1], "ballast": True}
    row = status([receipt(seq=1, params=less)], params=params)
    assert row.state == "unverified" and "batches=[1]" in why(row)
    # JSON identity: 1 is not true.
    assert status([receipt(seq=1, params={"x": 1})], params={"x": True}).state == "unverified"


def test_claim_outside_the_plan_accepts_any_check() -> None:
    r = receipt(seq=1, claim="team.acceptance", check="acceptance-script")
    rep = evaluate(
        plan=plan(), revision=revision(), receipts=[r], reviews=[], claims=["team.acceptance"]
    )
    row = rep.at_required_scope("team.acceptance")
    assert (row.state, row.in_plan, row.required) == ("qualified", False, True)
    assert rep.qualified


def test_failure_of_another_check_is_still_a_counterexample() -> None:
    assert (
        status([receipt(seq=1), receipt(seq=2, check="other", outcome="failed")]).state == "failed"
    )


# -- reviews / dispute --------------------------------------------------------------


def test_reviews_count_distinct_independent_reviewer_keys() -> None:
    r = receipt(seq=1)
    one = [review(r, seq=2)]
    assert status([r], one, reviews=1).state == "qualified"
    assert status([r], one, reviews=2).state == "needs-review"
    twice = [review(r, seq=2), review(r, seq=3)]
    assert status([r], twice, reviews=2).state == "needs-review"
    two = [review(r, seq=2), review(r, seq=3, signer="reviewer-2")]
    row = status([r], two, reviews=2)
    assert row.state == "qualified" and "2 concurring review(s)" in why(row)


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"signer": "runner-key"}, R.REVIEWS),
        ({"role": "runner"}, R.SIGNER_ROLE),
        ({"revoked_seq": 2}, R.KEY_REVOKED),
        ({"problem": "signature does not verify"}, R.SIGNATURE),
    ],
)
def test_reviews_that_do_not_count(kwargs: dict[str, Any], rule: str) -> None:
    r = receipt(seq=1)
    row = status([r], [review(r, seq=3, **kwargs)], reviews=1)
    assert row.state == "needs-review"
    assert "0 of 1 concurring" in why(row) and rule in rules_of(row)


def test_review_logged_before_its_key_was_revoked_counts() -> None:
    r = receipt(seq=1)
    assert status([r], [review(r, seq=2, revoked_seq=5)], reviews=1).state == "qualified"


def test_valid_dispute_makes_the_pass_disputed() -> None:
    r = receipt(seq=1)
    row = status([r], [review(r, seq=2, verdict="dispute", note="wrong budget")])
    assert (row.state, row.receipts) == ("disputed", (r.id,))
    assert "wrong budget" in why(row)
    # The signer disputing its own receipt is not an independent review.
    assert status([r], [review(r, seq=2, verdict="dispute", signer="runner-key")]).state == (
        "qualified"
    )


def test_a_reviewers_latest_verdict_replaces_its_earlier_one() -> None:
    r = receipt(seq=1)
    withdrawn = [review(r, seq=2, verdict="dispute"), review(r, seq=3, verdict="concur")]
    assert status([r], withdrawn, reviews=1).state == "qualified"
    changed = [review(r, seq=2, verdict="concur"), review(r, seq=3, verdict="dispute")]
    assert status([r], changed, reviews=1).state == "disputed"


def test_another_undisputed_pass_still_qualifies() -> None:
    a, b = receipt(seq=1), receipt(seq=2)
    row = status([a, b], [review(a, seq=3, verdict="dispute")])
    assert (row.state, row.receipts) == ("qualified", (b.id,))
    assert R.DISPUTE in rules_of(row)


def test_dispute_of_a_counterexample_is_shown_but_does_not_retire_it() -> None:
    fail = receipt(seq=1, outcome="failed")
    row = status([fail, receipt(seq=2)], [review(fail, seq=3, verdict="dispute", note="harness")])
    assert row.state == "failed"
    assert R.DISPUTE in rules_of(row)


# -- signature / key-revoked / signer-role ------------------------------------------


def test_signature_problem_is_unverified() -> None:
    row = status([receipt(seq=1, problem="signature does not verify")])
    assert row.state == "unverified" and R.SIGNATURE in rules_of(row)


def test_receipt_logged_after_revocation_is_unverified() -> None:
    row = status([receipt(seq=7, revoked_seq=5)])
    assert row.state == "unverified"
    assert "logged at seq 7, after key" in why(row) and "revoked at seq 5" in why(row)
    assert status([receipt(seq=4, revoked_seq=5)]).state == "qualified"


def test_revoked_failure_is_no_counterexample() -> None:
    assert status([receipt(seq=1), receipt(seq=7, outcome="failed", revoked_seq=5)]).state == (
        "qualified"
    )


def test_receipt_signed_by_a_reviewer_key_does_not_count() -> None:
    row = status([receipt(seq=1, role="reviewer")])
    assert row.state == "unverified" and R.SIGNER_ROLE in rules_of(row)


# -- scope ----------------------------------------------------------------------------


def test_evidence_at_another_value_does_not_count() -> None:
    a100 = receipt(seq=1, scope={"device_kind": "cuda", "gpu_model": "NVIDIA A100"})
    assert status([a100]).state == "not-run"
    assert status([receipt(seq=1, scope={"device_kind": "cuda"})]).state == "not-run"


def test_narrower_evidence_covers_and_is_reported_at_its_own_scope() -> None:
    bf16 = receipt(seq=1, scope={**H200, "dtype": "bf16"})
    fp32 = receipt(seq=2, scope={**H200, "dtype": "fp32"}, outcome="failed")
    rows = report([bf16, fp32]).rows(CLAIM)
    assert [(r.scope_role, r.scope.get("dtype"), r.state) for r in rows] == [
        ("required", None, "failed"),
        ("evidence", "bf16", "qualified"),
        ("evidence", "fp32", "failed"),
    ]


def test_query_scope_narrows_and_compares_by_text() -> None:
    r = receipt(seq=1, scope={**H200, "gpu_count": 2})
    assert status([r], query={"gpu_count": "2"}).state == "qualified"
    assert status([r], query={"gpu_count": 1}).state == "not-run"


def test_query_scope_conflicting_with_the_plan_is_not_applicable_there() -> None:
    row = status([receipt(seq=1)], query={"gpu_model": "NVIDIA A100"})
    assert row.state == "not-applicable" and row.scope["gpu_model"] == "NVIDIA A100"
    assert "gpu_model=NVIDIA A100 conflicts with claim" in why(row)


def test_a_pass_missing_only_reviews_needs_review_not_unverified() -> None:
    r = receipt(seq=1)
    assert status([r], [], reviews=1).state == "needs-review"


# -- overall ----------------------------------------------------------------------------


def test_qualified_needs_every_required_claim_and_ignores_optional_ones() -> None:
    ok = receipt(seq=1)
    assert report([ok]).qualified
    assert not report([]).qualified
    assert report([], required=False).qualified is True
    rep = evaluate(plan=None, revision=revision(), receipts=[], reviews=[])
    assert (rep.qualified, rep.claims) == (False, ())


def test_without_plan_every_claim_with_evidence_is_asked() -> None:
    a = receipt(seq=1, claim="a")
    b = receipt(seq=2, claim="b", outcome="failed")
    rep = evaluate(plan=None, revision=revision(), receipts=[a, b], reviews=[])
    assert [(r.claim, r.state) for r in rep.claims if r.scope_role == "required"] == [
        ("a", "qualified"),
        ("b", "failed"),
    ]
    assert not rep.qualified


def test_duplicate_receipts_are_counted_once() -> None:
    r = receipt(seq=1)
    assert status([r, r]).receipts == (r.id,)


def test_unknown_superseded_id_is_harmless() -> None:
    assert status([receipt(seq=1, supersedes=[(rid("nothing"), "gone")])]).state == "qualified"


def test_a_claim_asked_by_name_is_required_even_if_the_plan_makes_it_optional() -> None:
    fail = receipt(seq=1, outcome="failed")
    assert report([fail], required=False).qualified
    rep = evaluate(
        plan=plan(required=False), revision=revision(), receipts=[fail], reviews=[], claims=[CLAIM]
    )
    assert rep.at_required_scope(CLAIM).required and not rep.qualified
