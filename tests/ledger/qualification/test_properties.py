"""Properties that keep the engine safe whatever the log holds."""

from __future__ import annotations

from typing import Any, TypeAlias

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.qualification import ReceiptEvidence, ReviewEvidence, State, covers, evaluate
from ledger.qualification.plan import ClaimSpec, PackageSpec, Plan

from .factories import CHECK, CLAIM, PACKAGE_PATHS, receipt, review, revision

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REV = revision("head", tree="T", package="P", pr=898)
CONTROL_CLAIM = "admission.observer-off"
OUTCOMES = ["passed"] * 4 + ["failed"] * 3 + ["inconclusive", "refused", "infra-error"]

# Where a receipt ran, relative to REV: (commit, tree, package, pr).
HEAD = ("head", "T", "P", 898)
ELSEWHERE = [
    ("sibling", "T", "P2", None),  # same tree
    ("rebuilt", "T3", "P", None),  # same package only
    ("old-head", "T4", "P4", 898),  # earlier head of the PR
    ("unrelated", "T5", "P5", None),
]

# One thing wrong with a receipt, at most: keeps most generated evidence relevant
# while every rule still gets exercised.
FLAWS: dict[str, dict[str, Any]] = {
    "dirty": {"dirty": True},
    "signature": {"problem": "signature does not verify"},
    "role": {"role": "reviewer"},
    "revoked": {"revoked_seq": 0},
    "no-cleanup": {"clean": None},
    "cleanup-incomplete": {"clean": False},
    "observer-on": {"observer": "on"},
    "other-check": {"check": "other"},
    "control-check": {"check": "observer-off-control", "params": {"check": CHECK}},
    "control-claim": {"claim": CONTROL_CLAIM},
    "arms-differ": {"measurements": {"arm_gpu_uuids": ["GPU-a", "GPU-b"]}},
}

scopes: st.SearchStrategy[dict[str, str | int]] = st.fixed_dictionaries(
    {},
    optional={
        "device_kind": st.just("cuda"),
        "gpu_model": st.sampled_from(["NVIDIA H200", "NVIDIA A100"]),
        "dtype": st.sampled_from(["bf16", "fp32"]),
    },
)
# Asked scopes are usually broader than where evidence ran, as in practice.
_BROAD: list[dict[str, str | int]] = [{}, {}, {"device_kind": "cuda"}]
query_scopes = st.sampled_from(_BROAD) | scopes


@st.composite
def receipt_specs(draw: st.DrawFn, outcomes: list[str] = OUTCOMES) -> dict[str, Any]:
    commit, tree, package, pr = draw(st.sampled_from([HEAD] * 4 + ELSEWHERE))
    flaw = draw(st.sampled_from([None] * 8 + list(FLAWS)))
    return {
        "scope": draw(scopes),
        "outcome": draw(st.sampled_from(outcomes)),
        "commit": commit,
        "tree": tree,
        "package": package,
        "pr": pr,
        **(FLAWS[flaw] if flaw else {}),
    }


@st.composite
def logs(draw: st.DrawFn) -> list[ReceiptEvidence]:
    """Receipts at seq 10, 20, ...; each may supersede receipts logged before it."""
    out: list[ReceiptEvidence] = []
    for spec in draw(st.lists(receipt_specs(), max_size=7)):
        seq = (len(out) + 1) * 10
        named = (
            draw(st.lists(st.sampled_from(out), max_size=2, unique_by=lambda r: r.id))
            if out
            else []
        )
        supersedes = [(r.id, "replaced") for r in named]
        out.append(receipt(seq=seq, supersedes=supersedes, label=f"r{seq}", **spec))
    return out


@st.composite
def review_logs(draw: st.DrawFn, receipts: list[ReceiptEvidence]) -> list[ReviewEvidence]:
    if not receipts:
        return []
    picks = draw(
        st.lists(
            st.tuples(st.sampled_from(receipts), st.sampled_from([True, True, True, False])),
            max_size=4,
        )
    )
    return [
        review(
            r, seq=1000 + n, verdict="concur" if concur else "dispute", signer=f"reviewer-{n % 2}"
        )
        for n, (r, concur) in enumerate(picks)
    ]


claim_specs = st.fixed_dictionaries(
    {
        "carry_over": st.sampled_from(["commit", "tree", "package"]),
        "reviews": st.sampled_from([0, 0, 1]),
        "observer_off": st.booleans(),
        "cleanup": st.booleans(),
    }
)

World: TypeAlias = tuple[
    dict[str, Any], dict[str, str | int], list[ReceiptEvidence], list[ReviewEvidence]
]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    receipts = draw(logs())
    return draw(claim_specs), draw(query_scopes), receipts, draw(review_logs(receipts))


def state_at(
    claim: dict[str, Any],
    scope: dict[str, str | int],
    receipts: list[ReceiptEvidence],
    reviews: list[ReviewEvidence],
) -> State:
    plan = Plan(
        claims=(ClaimSpec(name=CLAIM, check=CHECK, **claim),),
        package=PackageSpec(paths=tuple(PACKAGE_PATHS)),
    )
    rep = evaluate(plan=plan, revision=REV, receipts=receipts, reviews=reviews, query_scope=scope)
    return rep.at_required_scope(CLAIM).state


@SETTINGS
@given(world=worlds(), extra=receipt_specs(), at=st.integers(0, 8), reach=st.booleans())
def test_evidence_never_changes_a_scope_it_does_not_cover(
    world: World, extra: dict[str, Any], at: int, reach: bool
) -> None:
    claim, scope, receipts, reviews = world
    if covers(extra["scope"], scope):
        # Move the extra receipt off the asked scope: another GPU model than asked.
        scope = {**scope, "gpu_model": scope.get("gpu_model", "NVIDIA H200")}
        extra = {**extra, "scope": {**extra["scope"], "gpu_model": "NVIDIA B200"}}
    assert not covers(extra["scope"], scope)
    # Logged anywhere in the sequence; when `reach`, it names every earlier receipt
    # as superseded and is itself reviewed, to give it the most influence.
    seq = at * 10 + 5
    targets = [(r.id, "replaced") for r in receipts if r.seq < seq] if reach else []
    added = receipt(seq=seq, label="extra", supersedes=targets, **extra)
    more_reviews = [review(added, seq=2000)] if reach else []
    before = state_at(claim, scope, receipts, reviews)
    after = state_at(claim, scope, [*receipts, added], [*reviews, *more_reviews])
    assert before == after


@SETTINGS
@given(world=worlds(), which=st.integers(0, 99))
def test_removing_a_pass_never_turns_failed_into_qualified(world: World, which: int) -> None:
    claim, scope, receipts, reviews = world
    passes = [r for r in receipts if r.predicate.outcome == "passed"]
    if not passes:
        return
    gone = passes[which % len(passes)]
    before = state_at(claim, scope, receipts, reviews)
    after = state_at(claim, scope, [r for r in receipts if r.id != gone.id], reviews)
    if before == "failed":
        assert after == "failed"


@SETTINGS
@given(world=worlds(), failure=receipt_specs(outcomes=["failed"]), reach=st.booleans())
def test_adding_a_failure_never_turns_anything_into_qualified(
    world: World, failure: dict[str, Any], reach: bool
) -> None:
    claim, scope, receipts, reviews = world
    # Logged last (the log only appends); it may name every earlier receipt as superseded.
    targets = [(r.id, "replaced") for r in receipts] if reach else []
    added = receipt(seq=10_000, label="appended", supersedes=targets, **failure)
    before = state_at(claim, scope, receipts, reviews)
    after = state_at(claim, scope, [*receipts, added], [*reviews, review(added, seq=3000)])
    if before != "qualified":
        assert after != "qualified"
    if before == "failed":
        assert after == "failed"


@SETTINGS
@given(world=worlds(), order=st.randoms(use_true_random=False))
def test_the_order_evidence_is_given_in_does_not_matter(world: World, order: Any) -> None:
    claim, scope, receipts, reviews = world
    shuffled = list(receipts)
    order.shuffle(shuffled)
    assert state_at(claim, scope, receipts, reviews) == state_at(claim, scope, shuffled, reviews)
