"""The reference rule on real cases, on CPU: each case its own commit of a real git
repository, compared with ``main`` by gradient-compare (float32 against a float64
reference; Qwen3 also in bfloat16 against float32). Benign changes pass, planted
defects fail.

As `ledger qualify` runs them, each arm forks from a fork server preloaded from its
own tree (torch, and for Qwen3 transformers and peft, imported once per tree instead
of once per arm); the servers only import, so every arm still builds its own workload.
tests/runners/checks/test_checks.py keeps the arms started as fresh interpreters."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners.api import run_claim
from runners.contract.childenv import env
from runners.contract.result import CheckResult, Json
from runners.fork.forkparent import ForkServer, Starting
from scripts.numerics_cases import CASES, CasesRepo, checkout, make_cases_repo

QWEN3_TINY: dict[str, Json] = {
    "vocab": 128,
    "hidden": 32,
    "layers": 2,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 16,
    "experts": 4,
    "top_k": 2,
    "moe_ff": 32,
    "lora_rank": 4,
    "lora_alpha": 8,
}
MOE_TINY: dict[str, Json] = {
    "vocab": 128,
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 2,
    "n_experts": 4,
    "d_ff": 64,
    "lora_rank": 4,
}
TINY = {"qwen3": QWEN3_TINY, "moe": MOE_TINY}
PARAMS: dict[str, Json] = {"batch": 2, "seq": 16, "noise_floor": False}


class Checkouts:
    """A cases repository and a worktree per commit, made once per workload, and the
    base tree's fork server, started once per workload."""

    def __init__(self, root: Path, workload: str) -> None:
        self.repo: CasesRepo = make_cases_repo(root / "repo", workload)  # type: ignore[arg-type]
        self.base = checkout(self.repo, self.repo.base, root / "main")
        self.trees = {
            name: checkout(self.repo, sha, root / name) for name, sha in self.repo.commits.items()
        }
        self.base_server = self._server(self.base).wait()

    def _server(self, tree: Path) -> Starting:
        return ForkServer.launch([(str(tree), self.repo.workload_ref)], env())

    def compare(self, case: str, tmp: Path, **workload_params: Json) -> CheckResult:
        wl = "qwen3" if "qwen3" in self.repo.workload_ref else "moe"
        server = self._server(self.trees[case]).wait()
        sockets = {
            str(self.base): str(self.base_server.sock),
            str(self.trees[case]): str(server.sock),
        }
        before = os.environ.get("LEDGER_FORK_SERVERS")
        os.environ["LEDGER_FORK_SERVERS"] = json.dumps(sockets)
        try:
            [r] = run_claim(
                claim="numerics.gradient-compare",
                check="gradient-compare",
                params=PARAMS,
                repo_root=self.trees[case],
                base_root=self.base,
                workload_ref=self.repo.workload_ref,
                workload_params={**TINY[wl], **workload_params},
                device="cpu",
                observer_off_required=False,
                progress=lambda _m: None,
                artifact_dir=tmp,
            )
        finally:
            if before is None:
                os.environ.pop("LEDGER_FORK_SERVERS", None)
            else:
                os.environ["LEDGER_FORK_SERVERS"] = before
            server.close()
        return r

    def close(self) -> None:
        self.base_server.close()


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Checkouts]]:
    out: dict[str, Checkouts] = {}
    try:
        for wl in ("moe", "qwen3"):
            if wl == "qwen3":
                pytest.importorskip("transformers")
                pytest.importorskip("peft")
            out[wl] = Checkouts(tmp_path_factory.mktemp(wl), wl)
        yield out
    finally:
        for c in out.values():
            c.close()


def _worst(r: CheckResult) -> dict[str, Any]:
    fams = r.measurements["families"]
    assert isinstance(fams, list)
    return max(fams, key=lambda f: f["multiple"] or 0.0)  # type: ignore[no-any-return]


ALL = [(wl, c.name, c.kind) for wl in ("moe", "qwen3") for c in CASES[wl]]  # type: ignore[index]


@pytest.mark.parametrize(("workload", "case", "kind"), ALL, ids=[f"{w}-{c}" for w, c, _ in ALL])
def test_benign_changes_pass_and_planted_defects_fail(
    cases: dict[str, Checkouts], workload: str, case: str, kind: str, tmp_path: Path
) -> None:
    r = cases[workload].compare(case, tmp_path)
    m = r.measurements
    assert m["rule"] == "reference" and m["reference_dtype"] == "float64"
    assert r.params["rule"] == "reference"
    routed = m["routing"]
    assert isinstance(routed, dict)
    moved = routed["candidate_vs_base"]["selections_differing"]  # type: ignore[index,call-overload]
    worst = _worst(r)
    if kind == "benign":
        assert r.outcome == "passed", r.reason
        # Within twice the base's own float32 error against float64, tensor by tensor.
        assert worst["multiple"] <= 2.0 and worst["floor_from"] == "precision"
        assert m["tensors_beyond_rule"] == 0
        return
    assert r.outcome == "failed", r.reason
    failed = m["failed_tensors"]
    assert isinstance(failed, list) and failed
    assert r.reason is not None and str(failed[0]) in r.reason
    # A defect is orders of magnitude beyond the float32 precision floor.
    assert worst["multiple"] > 100, worst
    assert "precision" in worst["failed_by"]
    if case == "lora-scaling":
        # Rescaled adapters move the router's inputs: the receipt counts the tokens.
        assert moved > 0 and "token routings (tokens x routed layers) differ" in r.reason


def test_a_defect_below_bf16_resolution_fails_in_the_reference_precision(
    cases: dict[str, Checkouts], tmp_path: Path
) -> None:
    """In bfloat16 a 1.01 scale on one expert is within twice the base's own bf16 error
    (the precision part passes); run in float32 both codes differ far beyond float32's
    rounding, so the function part fails it. Attention through SDPA passes both."""
    q = cases["qwen3"]
    scaled = q.compare("expert-scale", tmp_path / "a", dtype="bfloat16")
    assert scaled.measurements["reference_dtype"] == "float32"
    assert scaled.outcome == "failed", scaled.reason
    fams = scaled.measurements["families"]
    assert isinstance(fams, list)
    # Nothing beyond the bf16 precision floor; the scaled expert far beyond float32's.
    assert all("precision" not in f["failed_by"] for f in fams)  # type: ignore[index,operator]
    experts = [f for f in fams if "experts.lora" in f["worst"]]  # type: ignore[index,operator]
    assert experts and all(f["failed_by"] == ["function"] for f in experts)  # type: ignore[index]
    assert max(f["err_function"] / f["function_allowed"] for f in experts) > 10  # type: ignore[index,operator]
    assert "in the reference precision err" in (scaled.reason or "")
    # The candidate's reference arm took the reference arm's routing (ReplaysRouting).
    assert scaled.measurements["candidate_reference_routing_replay"] == "replayed"
    assert scaled.measurements["candidate_reference_routing_replayed_layers"] == 2
    sdpa = q.compare("sdpa", tmp_path / "b", dtype="bfloat16")
    assert sdpa.outcome == "passed", sdpa.reason
    assert sdpa.measurements["candidate_reference_routing_replay"] == "replayed"
    fams = sdpa.measurements["families"]
    assert isinstance(fams, list)
    assert max(f["multiple"] for f in fams) <= 2.0  # type: ignore[index]
    assert all(f["err_function"] <= f["function_allowed"] for f in fams)  # type: ignore[index,operator]
