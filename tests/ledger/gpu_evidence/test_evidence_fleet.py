"""The Qwen3-MoE example at its H200 size, qualified on one H200 with `--gpus all`
(`scripts/gpu_evidence.sh fleet`, evidence/h200-fleet-*), checked offline on CPU.

Signatures, keys and the ledger are verified with every other run by
test_evidence.py; here: the size, the whole plan's wall time (target <= 120 s),
the per-claim time outside the check (target <= 2 s), the receipts' executor and
GPUs, and what the fork server's preload saved. The size check runs always; the
others for each evidence folder committed.
"""

from __future__ import annotations

import base64
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNS = sorted((ROOT / "evidence").glob("h200-fleet-*"))
PLAN = ROOT / "examples" / "qwen3_moe" / "qualification.toml"


def test_the_h200_profile_is_a_realistic_size() -> None:
    """~0.9 B parameters, counted on the meta device (nothing allocated)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    plan = tomllib.loads(PLAN.read_text())
    p = {**plan["workload_params"], **plan["profiles"]["h200"]["workload_params"]}
    assert p["dtype"] == "bfloat16" and plan["preload"] == ["transformers", "peft"]
    cfg = Qwen3MoeConfig(
        vocab_size=p["vocab"],
        hidden_size=p["hidden"],
        intermediate_size=2 * p["moe_ff"],
        moe_intermediate_size=p["moe_ff"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        head_dim=p["head_dim"],
        num_experts=p["experts"],
        num_experts_per_tok=p["top_k"],
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(cfg)
    n = sum(t.numel() for t in model.parameters())
    assert 0.8e9 <= n <= 1.0e9, n


def _receipts(run: Path) -> list[dict[str, Any]]:
    out = []
    for path in (run / "bundles").glob("*.json"):
        env = json.loads(json.loads(path.read_text())["entry"]["body"])
        out.append(json.loads(base64.b64decode(env["payload"]))["predicate"])
    return out


def _walls(run: Path) -> dict[str, float]:
    """Each claim's wall time as qualify printed it (`[i/n] CLAIM OUTCOME ... (N s)`)."""
    out = {}
    for line in (run / "qualify.log").read_text().splitlines():
        m = re.search(r"\] (\S+) [a-z-]+.* \((\d+\.\d) s\) -> sha256:", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _ns(stamp: str) -> int:
    import datetime as dt

    t = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return int(t.timestamp() * 1e9)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_the_whole_plan_on_one_h200(run: Path) -> None:
    wall = json.loads((run / "qualify_wall.json").read_text())
    assert wall["wall_ns"] <= 120 * 10**9, wall  # the whole plan in two minutes
    preds = _receipts(run)
    plan = tomllib.loads(PLAN.read_text())
    assert {p["claim"] for p in preds} == {c["name"] for c in plan["claims"]}
    for p in preds:
        env = p["runner"]["environment"]
        assert env["executor"] == "local" and env["executor_devices"] == "0"
        assert p["runner"]["gpu_uuids"] and p["scope"]["profile"] == "h200"
        assert p["scope"]["dtype"] == "bfloat16" and p["scope"]["sandbox"] == "bwrap"
        assert p["outcome"] == "passed"
    walls = _walls(run)
    for p in preds:
        check_s = (_ns(p["runner"]["finished"]) - _ns(p["runner"]["started"])) / 1e9
        # What a claim costs outside its check (process, imports, request and result,
        # reaping, the exit proof), from the log's per-claim wall (0.1 s resolution).
        assert walls[p["claim"]] - check_s <= 2.1, (p["claim"], walls[p["claim"]], check_s)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_the_preload_saved_time_per_claim(run: Path) -> None:
    doc = json.loads((run / "qualify_overhead_qwen3.json").read_text())
    assert doc["size"] == "h200" and doc["device"] == "cuda"
    assert doc["after_median_wall_s"] < doc["no_preload_median_wall_s"]
    assert doc["after_median_overhead_s"] <= 2.0
