"""The numerics cases on one H200 (evidence/h200-numerics-*), checked offline on CPU.

``scripts/gpu_evidence.sh numerics`` produced each folder: examples/qwen3_moe in
bfloat16, one commit per case, each judged by gradient-compare's reference rule
against a float32 reference. Signatures, keys and the run's ledger are verified
with every other run by test_evidence.py; here: every case has its signed
receipt, benign changes passed and planted defects failed, with the figures the
rule judged by. Skipped until a run is committed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import load_public_pem
from ledger.verify import verify_bundle

EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
RUNS = sorted(p for p in EVIDENCE.glob("h200-numerics-*") if (p / "cases.json").is_file())

pytestmark = pytest.mark.skipif(not RUNS, reason="no numerics run on the H200 committed")

BENIGN = {"sdpa", "experts-loop"}
DEFECTS = {"expert-scale", "dropped-residual", "lora-scaling"}


def _predicates(run: Path) -> dict[str, dict[str, Any]]:
    """Each receipt's predicate by receipt id, read from bundles verified offline."""
    anchor = load_public_pem((run / "ledger.pub.pem").read_bytes())
    out = {}
    for path in (run / "bundles").glob("*.json"):
        rep = verify_bundle(path.read_bytes(), [anchor])
        env = json.loads(json.loads(path.read_text())["entry"]["body"])
        out[rep.id] = json.loads(base64.b64decode(env["payload"]))["predicate"]
    return out


def _cases(run: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads((run / "cases.json").read_text())
    return {c["case"]: c for c in doc["cases"]}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_case_has_its_signed_receipt(run: Path) -> None:
    cases, preds = _cases(run), _predicates(run)
    assert set(cases) == BENIGN | DEFECTS
    for name, case in cases.items():
        pred = preds[case["receipt"]]
        assert pred["claim"] == "numerics.gradient-compare"
        assert pred["source"]["commit"] == case["commit"], name
        assert pred["outcome"] == case["outcome"], name
        assert pred["scope"]["dtype"] == "bfloat16" and pred["scope"]["device_kind"] == "cuda"
        m = pred["measurements"]
        assert pred["check"]["parameters"]["rule"] == "reference" == m["rule"]
        assert m["reference_dtype"] == "float32"


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_benign_changes_pass_and_planted_defects_fail(run: Path) -> None:
    preds = _predicates(run)
    for name, case in _cases(run).items():
        pred = preds[case["receipt"]]
        m = pred["measurements"]
        fams = m["families"]
        if name in BENIGN:
            assert pred["outcome"] == "passed", (name, pred.get("reason"))
            assert m["tensors_beyond_rule"] == 0
            assert all(f["multiple"] is None or f["multiple"] <= m["k"] for f in fams)
            assert all(f["err_function"] <= f["function_allowed"] for f in fams)
        else:
            assert pred["outcome"] == "failed", name
            assert m["failed_tensors"] and m["failed_tensors"][0] in pred["reason"]
        # Both floors are recorded: bf16 against float32, and the repeat (deterministic
        # kernels: zero, which is why the repeat alone cannot be the floor).
        assert all(f["err_base"] > 0 for f in fams)
        assert m["max_noise_rel_l2"] is not None


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_a_one_percent_expert_scale_shows_only_in_the_reference_precision(run: Path) -> None:
    """In bf16 the scaled expert is within twice the base's own error against float32;
    run in float32 the two codes differ far beyond float32's rounding."""
    case = _cases(run)["expert-scale"]
    assert case["outcome"] == "failed"
    assert case["worst_function"]["ratio"] > 10
    assert "mlp.experts" in case["worst_function"]["worst"]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_routing_is_counted_between_the_arms(run: Path) -> None:
    for case in _cases(run).values():
        routed = case["routing"]
        assert {"candidate_vs_base", "base_vs_reference"} <= set(routed)
        for pair in routed.values():
            assert pair["comparable"] and pair["selections"] == pair["tokens"] * pair["layers"]


def test_at_the_realistic_size_the_reference_routing_was_replayed() -> None:
    """evidence/h200-numerics-qwen3 (0.3 B parameters): attention eager -> SDPA flipped
    a router near a tie in float32. Without a replay that one token made the function
    part 88x its allowance, a false failure; replaying the reference arm's routing
    (ReplaysRouting) it passed, while the 1.01-scaled expert still failed."""
    run = EVIDENCE / "h200-numerics-qwen3"
    if not (run / "cases.json").is_file():
        pytest.skip("the realistic-size run is not committed")
    preds = _predicates(run)
    cases = _cases(run)
    for name, case in cases.items():
        m = preds[case["receipt"]]["measurements"]
        assert m["candidate_reference_routing_replay"] == "replayed", name
        assert m["candidate_reference_routing_replayed_layers"] == 8, name
    sdpa = preds[cases["sdpa"]["receipt"]]
    flips = sdpa["measurements"]["routing"]["candidate_reference_vs_reference"]
    assert flips["tokens_differing"] >= 1 and sdpa["outcome"] == "passed"
    assert preds[cases["expert-scale"]["receipt"]]["outcome"] == "failed"
