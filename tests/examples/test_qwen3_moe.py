"""The Qwen3-MoE LoRA example (transformers + PEFT) qualified end to end on CPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run

pytest.importorskip("transformers")
pytest.importorskip("peft")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qwen3_moe"

pytestmark = pytest.mark.slow


def make_repo(path: Path) -> Path:
    """The example as its own repository (one commit)."""
    shutil.copytree(EXAMPLE, path, ignore=shutil.ignore_patterns("__pycache__"))
    repo = git.Repo.init(path)
    files = [p.relative_to(path) for p in path.rglob("*") if p.is_file()]
    repo.index.add([str(f) for f in files if f.parts[0] != ".git"])
    actor = git.Actor("Example", "example@example.invalid")
    repo.index.commit("Qwen3-MoE LoRA workload", author=actor, committer=actor)
    repo.create_remote("origin", "https://example.invalid/qwen3-moe-lora.git")
    return path


def test_qwen3_moe_lora_qualifies_on_cpu(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_repo(tmp_path / "qwen3")
    common = ("--rev", "HEAD", "--repo", str(repo))
    r = run(capsys, "qualify", *common, "--device", "cpu", "--profile", "cpu", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["status"]["qualified"] is True, doc["status"]
    preds = {}
    for x in doc["receipts"]:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        preds[x["claim"]] = shown["statement"]["predicate"]
    assert {p["outcome"] for p in preds.values()} == {"passed"}
    assert {p["scope"]["workload"] for p in preds.values()} == {"qwen3-moe-lora"}
    assert {p["scope"]["profile"] for p in preds.values()} == {"cpu"}
    reg = preds["regression.24view-nograd"]["measurements"]
    assert "offers no nll_chunked" in reg["nll_chunked_skipped"]
    assert {o["name"] for o in reg["outputs"]} == {"loss", "logits"}
    grad = preds["numerics.gradient-compare"]["measurements"]
    fams = {f["family"] for f in grad["families"]}
    assert any("experts" in f for f in fams) and any("q_proj" in f for f in fams)
    adm = preds["admission.no-oom-after-admit"]["measurements"]
    assert adm["counterexample_count"] == 0 and adm["admitted_count"] > 0
    assert run(capsys, "status", *common).code == 0
