"""Situations from the PR #898 memory-admission history, replayed through the engine."""

from __future__ import annotations

from ledger.qualification import ClaimStatus, Revision, evaluate, history
from ledger.qualification.plan import parse_plan
from ledger.read.render import render_table

from .factories import REPO, hex40, hex64, receipt, review
from .helpers import status, why

# Heads of PR #898 in the order they were pushed, then its merge commit.
HEAD_SEP17 = "04863263436b2d6977c171f059e8681636a6218d"
HEAD_SEP18 = "8b3e1dfb0059554223666a84db99bfb86371da63"
HEAD_SEP21 = "05e8ebf32dd7edb6d3e7793b552e24f32aecf054"
HEAD_SEP22 = "804bf4b6c3e05854efd831081ea95ed7a511b18c"
HEAD_SEP23 = "4a519f6dcfe4f9dd18d966a9c98d4cc39fc1d125"
MERGED = "a655c051105038960b0dc97be1e74bc98eeed663"
COMBINED_ART = "f80dba32" + "0" * 32

ONE_H200: dict[str, str | int] = {"device_kind": "cuda", "gpu_model": "NVIDIA H200", "gpu_count": 1}
TWO_H200: dict[str, str | int] = {**ONE_H200, "gpu_count": 2}
GIB = 1024**3

PLAN = parse_plan(
    """
workload = "art.dev.trainer_rank:make_workload"

[package]
paths = ["src/art/megatron/**/*.py"]

[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = { ballast = true }
scope = { device_kind = "cuda", gpu_model = "NVIDIA H200" }
carry_over = "tree"
reviews = 1
observer_off = true

[[claims]]
name = "backward.full-prefix"
check = "full-prefix-backward"
scope = { device_kind = "cuda", gpu_model = "NVIDIA H200" }
carry_over = "package"

[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
scope = { device_kind = "cuda", gpu_model = "NVIDIA H200" }
required = false
"""
)
ADMISSION = "admission.no-oom-after-admit"


def pr_head(commit: str, *, tree: str | None = None, package: str | None = None) -> Revision:
    return Revision(
        repo=REPO,
        commit=commit,
        tree=hex40(tree or f"tree-of-{commit}"),
        package_digest=hex64(package) if package else None,
        pr=898,
    )


def test_tree_identical_merge_keeps_qualification() -> None:
    # "PR #898 is now merged as a655c051...": the merge commit's tree equals the reviewed head's.
    passed = receipt(seq=1, commit=HEAD_SEP23, tree="T23", pr=898, params={"ballast": True})
    reviews = [review(passed, seq=2, signer="schulman-review")]
    merged = Revision(repo=REPO, commit=MERGED, tree=hex40("T23"))
    row = status([passed], reviews, rev=merged, carry_over="tree", reviews=1, params={})
    assert (row.state, row.via) == ("qualified", "tree")
    assert f"commit {HEAD_SEP23[:12]} has the same tree" in why(row)
    # A merge that changed the tree (e.g. a conflicting rebase) carries nothing over.
    other = Revision(repo=REPO, commit=MERGED, tree=hex40("T-merged-differently"))
    assert status([passed], reviews, rev=other, carry_over="tree", reviews=1).state == "not-run"


def test_matching_planner_modules_with_other_package_identity_do_not_carry() -> None:
    # "The 14 planner modules match public #898, but the complete package identity differs."
    run = receipt(
        seq=1,
        claim="backward.full-prefix",
        check="full-prefix-backward",
        commit=COMBINED_ART,
        package="combined-art-package",
    )
    rev = pr_head(HEAD_SEP23, package="pr898-package")
    row = evaluate(
        plan=PLAN, revision=rev, receipts=[run], reviews=[], claims=["backward.full-prefix"]
    ).at_required_scope("backward.full-prefix")
    assert row.state == "not-run"
    assert "carry-over: " in why(row)
    # Had the package identity matched, the same receipt would carry over via package.
    same = pr_head(HEAD_SEP23, package="combined-art-package")
    row = evaluate(
        plan=PLAN, revision=same, receipts=[run], reviews=[], claims=["backward.full-prefix"]
    ).at_required_scope("backward.full-prefix")
    assert (row.state, row.via) == ("qualified", "package")


def test_comparison_across_different_gpus_is_inconclusive() -> None:
    # "They ran on different GPUs, so these outcomes do not attribute a regression."
    compare = receipt(
        seq=1,
        claim="numerics.gradient-compare",
        check="gradient-compare",
        commit=HEAD_SEP22,
        pr=898,
        outcome="failed",
        reason="pooled-hidden repeatability assertion failed",
        measurements={
            "tensors": 660,
            "over_threshold": 33,
            "arm_gpu_uuids": ["GPU-3f1a", "GPU-9c0d"],
        },
    )
    # The runner itself writes inconclusive when starting reserved-cache bytes differ.
    on_off = receipt(
        seq=2,
        claim="numerics.gradient-compare",
        check="gradient-compare",
        commit=HEAD_SEP22,
        pr=898,
        outcome="inconclusive",
        reason="packing/call records and starting reserved-cache bytes differed",
        measurements={"arm_start_reserved_bytes": [2 * GIB, 3 * GIB]},
    )
    rep = evaluate(plan=PLAN, revision=pr_head(HEAD_SEP22), receipts=[compare, on_off], reviews=[])
    row = rep.at_required_scope("numerics.gradient-compare")
    assert row.state == "inconclusive"
    assert set(row.receipts) == {compare.id, on_off.id}
    assert "different GPUs" in why(row)


def test_oom_after_admission_outweighs_earlier_passes_until_superseded() -> None:
    rev = pr_head(HEAD_SEP23)
    passes = [
        receipt(seq=i, commit=HEAD_SEP23, pr=898, params={"ballast": True}, scope=ONE_H200)
        for i in (1, 2, 3)
    ]
    reviews = [review(p, seq=10 + i, signer="reviewer-a") for i, p in enumerate(passes)]
    oom = receipt(
        seq=4,
        commit=HEAD_SEP23,
        pr=898,
        params={"ballast": True},
        scope=ONE_H200,
        outcome="failed",
        reason="admitted 4092810444 required bytes against 4652784333 available; "
        "the admitted forward raised CUDA OutOfMemoryError",
        measurements={
            "predicted_bytes": 4092810444,
            "usable_bytes": 4652784333,
            "ballast_bytes": 68451041280,
        },
    )
    log = [*passes, oom]
    rep = evaluate(plan=PLAN, revision=rev, receipts=log, reviews=reviews, claims=[ADMISSION])
    row = rep.at_required_scope(ADMISSION)
    assert (row.state, row.receipts) == ("failed", (oom.id,))
    assert "CUDA OutOfMemoryError" in why(row)
    assert not rep.qualified

    fixed = receipt(
        seq=20,
        commit=HEAD_SEP23,
        pr=898,
        params={"ballast": True},
        scope=ONE_H200,
        supersedes=[
            (oom.id, "the OOM came from the harness's own ballast leak, fixed in runner 1.1")
        ],
    )
    reviews.append(review(fixed, seq=21, signer="reviewer-b"))
    rep = evaluate(
        plan=PLAN, revision=rev, receipts=[*log, fixed], reviews=reviews, claims=[ADMISSION]
    )
    row = rep.at_required_scope(ADMISSION)
    assert row.state == "qualified"
    assert "ballast leak" in why(row)
    # The superseded counterexample stays in history, marked.
    items = {item.id: item for item in history([*log, fixed], reviews)}
    assert items[oom.id].superseded_by[0].id == fixed.id
    assert len(items) == len(log) + 1 + len(reviews)


def test_refusal_without_oom_is_no_counterexample() -> None:
    # "admission refused 70,758 packed tokens (predicted 37.200 GiB versus usable 33.278 GiB)...
    # no CUDA OOM was observed. This is not proof of true infeasibility."
    refused = receipt(
        seq=2,
        commit=HEAD_SEP21,
        pr=898,
        outcome="refused",
        reason="predicted 39943195443 bytes exceeds usable 35732459929 bytes",
        measurements={"predicted_bytes": 39943195443, "usable_bytes": 35732459929},
    )
    alone = status([refused], rev=pr_head(HEAD_SEP21), carry_over="tree")
    assert alone.state == "not-run"
    assert "refusal: " in why(alone) and "infeasibility" in why(alone)
    earlier = receipt(seq=1, commit=HEAD_SEP21, pr=898)
    assert status([earlier, refused], rev=pr_head(HEAD_SEP21)).state == "qualified"


def test_infrastructure_failures_count_as_nothing() -> None:
    rev = pr_head(HEAD_SEP23)
    http503 = receipt(
        seq=1,
        commit=HEAD_SEP23,
        pr=898,
        outcome="infra-error",
        reason="model download failed: HTTP 503",
    )
    no_gpu = receipt(
        seq=2,
        commit=HEAD_SEP23,
        pr=898,
        outcome="infra-error",
        reason="smoke could not provision an H200 via Sky",
    )
    row = status([http503, no_gpu], rev=rev)
    assert row.state == "infra-error"
    assert "HTTP 503" in why(row) and "provision an H200" in why(row)
    assert status([http503, receipt(seq=3, commit=HEAD_SEP23), no_gpu], rev=rev).state == (
        "qualified"
    )
    fail = receipt(seq=3, commit=HEAD_SEP23, outcome="failed")
    assert status([http503, fail, no_gpu], rev=rev).state == "failed"


def test_instrumented_pass_without_its_observer_off_control_is_not_qualified() -> None:
    rev = pr_head(HEAD_SEP18)
    instrumented = receipt(
        seq=1,
        commit=HEAD_SEP18,
        pr=898,
        observer="on",
        scope=TWO_H200,
        params={"ballast": True},
        measurements={"predicted_bytes": 32717895466, "measured_cold_bytes": 25180311142},
    )
    reviews = [review(instrumented, seq=2, signer="reviewer-a")]
    rep = evaluate(
        plan=PLAN, revision=rev, receipts=[instrumented], reviews=reviews, claims=[ADMISSION]
    )
    row = rep.at_required_scope(ADMISSION)
    assert row.state == "unverified"
    assert "observer-off-control: " in why(row)
    # "Next work: an otherwise matched observer-off control": once it passes, the pass counts.
    control = receipt(
        seq=3,
        commit=HEAD_SEP18,
        pr=898,
        claim="admission.observer-off",
        check="observer-off-control",
        params={"check": "admission"},
        scope=TWO_H200,
    )
    rep = evaluate(
        plan=PLAN,
        revision=rev,
        receipts=[instrumented, control],
        reviews=reviews,
        claims=[ADMISSION],
    )
    assert rep.at_required_scope(ADMISSION).state == "qualified"


def test_force_pushed_head_makes_earlier_evidence_stale_unless_carried() -> None:
    old = receipt(
        seq=1,
        claim="backward.full-prefix",
        check="full-prefix-backward",
        commit=HEAD_SEP18,
        tree="T18",
        package="pkg18",
        pr=898,
    )

    def backward(rev: Revision) -> ClaimStatus:
        rep = evaluate(
            plan=PLAN, revision=rev, receipts=[old], reviews=[], claims=["backward.full-prefix"]
        )
        return rep.at_required_scope("backward.full-prefix")

    row = backward(pr_head(HEAD_SEP21, tree="T21", package="pkg21"))
    assert (row.state, row.receipts) == ("stale", (old.id,))
    assert f"earlier head {HEAD_SEP18[:12]} of PR #898" in why(row)
    # A push that changed only the message keeps the tree; one that changed only
    # files outside the package keeps the package digest.
    for rev, via in (
        (pr_head(HEAD_SEP21, tree="T18", package="pkg21"), "tree"),
        (pr_head(HEAD_SEP21, tree="T21", package="pkg18"), "package"),
    ):
        row = backward(rev)
        assert (row.state, row.via) == ("qualified", via)


def test_whole_plan_report_for_the_current_head() -> None:
    rev = pr_head(HEAD_SEP23, tree="T23", package="pkg23")
    log = [
        receipt(seq=1, commit=HEAD_SEP23, tree="T23", pr=898, params={"ballast": True}),
        receipt(
            seq=2,
            commit=HEAD_SEP23,
            tree="T23",
            pr=898,
            claim="backward.full-prefix",
            check="full-prefix-backward",
            package="pkg23",
            measurements={
                "measured_bytes": 46525022535,
                "predicted_bytes": 65410433138,
                "usable_bytes": 67373271286,
            },
        ),
    ]
    reviews = [review(log[0], seq=3, signer="reviewer-a")]
    rep = evaluate(plan=PLAN, revision=rev, receipts=log, reviews=reviews)
    states = {r.claim: r.state for r in rep.claims if r.scope_role == "required"}
    assert states == {
        ADMISSION: "qualified",
        "backward.full-prefix": "qualified",
        "numerics.gradient-compare": "not-run",
    }
    assert rep.qualified  # the gradient comparison is optional in this plan
    table = render_table(rep)
    assert "numerics.gradient-compare (optional)" in table
    assert log[0].id[7:19] in table
