"""`ledger doctor`: each claim judged, judged through a fallback (named) or inconclusive
(why, and the line to add), from a probe of the workload at a tiny shape on CPU."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import git
import pytest

from runners.doctor.claims import judge, summary
from runners.doctor.probe import probe
from tests.ledger.helpers import run
from tests.runners.conftest import MOE, REPO, TINY

TOY = '''
import torch
from runners.protocol import ForwardOutputs, MemoryEstimate, AdmissionDecision, Shape

class Toy:
    """An earlier-protocol workload: setup takes no dtype; AUTOCAST casts back to bf16."""
    name = "toy"
    dtype = torch.bfloat16
    def __init__(self, autocast=False, estimator=True):
        self.autocast, self.estimator, self.model, self.opt = autocast, estimator, None, None
    def digest(self): return "0" * 64
    def setup(self, device, seed):
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
        self.model.to(torch.bfloat16)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
    def teardown(self): self.model = self.opt = None
    def make_batch(self, shape, seed):
        g = torch.Generator().manual_seed(seed)
        return {"input_ids": torch.randint(16, (shape.batch, shape.seq), generator=g)}
    def estimate(self, shape, phase):
        if not self.estimator:
            raise NotImplementedError("no estimator named")
        return MemoryEstimate(predicted_bytes=1 << 20)
    def admit(self, shape, phase, free_bytes):
        p = self.estimate(shape, phase).predicted_bytes
        return AdmissionDecision(admitted=p <= free_bytes, predicted_bytes=p,
                                 usable_bytes=free_bytes, reserve_bytes=0)
    def forward(self, batch, *, grad):
        with torch.set_grad_enabled(grad):
            if self.autocast:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = self.model(batch["input_ids"])
            else:
                logits = self.model(batch["input_ids"])
            loss = logits.float().logsumexp(-1).mean()
        return ForwardOutputs(loss=loss if grad else loss.detach(),
                              compared={"logits": logits.detach()})
    def backward(self, out): out.loss.backward()
    def optimizer_step(self): self.opt.step()
    def gradients(self):
        return {n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None}
    def zero_grad(self): self.opt.zero_grad(set_to_none=True)

def make_workload(**params):
    return Toy(**params)
'''

PLAN = """
workload = "toy_wl:make_workload"
[workload_params]
autocast = {autocast}
[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = {{ batch = 1, seq = 8 }}
[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
params = {{ views = 2, seq = 8 }}
"""


def toy_repo(path: Path, *, autocast: bool, code: str = TOY, plan: str = "") -> Path:
    """A repository of ``code`` (the toy workload) and ``plan`` (by default `PLAN`)."""
    path.mkdir()
    (path / "toy_wl.py").write_text(textwrap.dedent(code))
    plan = plan or PLAN.format(autocast=str(autocast).lower())
    (path / "qualification.toml").write_text(plan)
    repo = git.Repo.init(path)
    repo.index.add(["toy_wl.py", "qualification.toml"])
    actor = git.Actor("T", "t@example.invalid")
    repo.index.commit("toy", author=actor, committer=actor)
    repo.create_remote("origin", f"https://example.invalid/{path.name}.git")
    return path


_STEPS = [
    "load",
    "setup",
    "make_batch",
    "forward",
    "forward_backward",
    "gradients",
    "optimizer_step",
    "zero_grad",
    "teardown",
    "estimate",
    "chunked_nll",
    "precision",
]


def caps(**states: tuple[str, str, str]) -> dict[str, dict[str, str]]:
    base = {k: {"state": "native", "detail": "", "add": ""} for k in _STEPS}
    base["routing"] = base["replay"] = {"state": "absent", "detail": "", "add": ""}
    for k, (s, d, a) in states.items():
        base[k] = {"state": s, "detail": d, "add": a}
    return base


def test_a_missing_estimator_leaves_admission_inconclusive_with_the_line_to_add() -> None:
    c = caps(estimate=("missing", "no estimator", 'estimator = "m:f"'))
    r = judge("admission.x", "admission", {}, c)
    assert r.judgement == "inconclusive"
    assert (
        r.line()
        == 'admission.x: will be inconclusive (estimate: no estimator); add: estimator = "m:f"'
    )
    assert judge("g", "gradient-compare", {}, c).judgement == "judged"


def test_the_reference_precision_by_upcast_is_a_named_fallback() -> None:
    c = caps(precision=("fallback", "upcast-modules to float32 (model)", ""))
    r = judge("g", "gradient-compare", {}, c)
    assert r.judgement == "fallback"
    assert r.fallbacks == ["reference precision: upcast-modules to float32 (model)"]
    # The threshold rule runs no reference arm.
    assert judge("g", "gradient-compare", {"rule": "threshold"}, c).judgement == "judged"
    # Without a chunked NLL the 24-view regression judges nothing against the reference.
    no_chunk = caps(
        precision=("missing", "autocast", "def setup(...)"), chunked_nll=("missing", "", "")
    )
    assert judge("r", "regression-24view", {}, no_chunk).judgement == "judged"
    assert judge("r", "regression-24view", {}, {**no_chunk, **caps()}).judgement == "judged"
    inner = judge("o", "observer-off-control", {"check": "gradient-compare"}, c)
    assert inner.judgement == "fallback" and inner.check == "observer-off-control"


def test_summary_counts_each_judgement() -> None:
    c = caps(precision=("missing", "autocast", "def setup(..., dtype=None)"))
    reports = [judge("a", "admission", {}, c), judge("g", "gradient-compare", {}, c)]
    assert summary(reports) == (
        "doctor: 2 claim(s): 1 judged, 0 through a fallback, 1 will be inconclusive, 0 cannot run"
    )
    assert judge("m", "mesh-handoff", {}, c).judgement == "not-probed"


def test_probe_of_the_reference_workload_finds_its_own_capabilities() -> None:
    got = probe(REPO, MOE, TINY)["capabilities"]
    assert got["precision"] == {"state": "native", "detail": "setup(dtype=float64)", "add": ""}
    assert got["routing"]["state"] == "native"
    assert got["replay"]["state"] == "missing"
    assert got["estimate"]["state"] == "native"


def test_probe_of_an_earlier_protocol_workload(tmp_path: Path) -> None:
    root = toy_repo(tmp_path / "r", autocast=False)
    got = probe(root, "toy_wl:make_workload", {"estimator": False})["capabilities"]
    assert got["precision"]["state"] == "fallback"
    assert got["precision"]["detail"] == "upcast-modules to float32 (model)"
    assert got["estimate"]["state"] == "missing"
    assert got["routing"]["state"] == "absent"
    casting = probe(root, "toy_wl:make_workload", {"autocast": True})["capabilities"]
    assert casting["precision"]["state"] == "missing"
    assert "output logits in bfloat16" in casting["precision"]["detail"]


def test_doctor_cli_says_which_claims_cannot_be_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = toy_repo(tmp_path / "good", autocast=False)
    args = ("doctor", "--rev", "HEAD", "--sandbox", "none")
    r = run(capsys, *args, "--repo", str(good), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    by = {c["claim"]: c for c in doc["claims"]}
    assert by["numerics.gradient-compare"]["judgement"] == "fallback"
    assert by["regression.24view-nograd"]["judgement"] == "judged"
    bad = toy_repo(tmp_path / "bad", autocast=True)
    r = run(capsys, *args, "--repo", str(bad))
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[0].startswith("numerics.gradient-compare: will be inconclusive (reference")
    assert "add: def setup(self, device, seed, *, dtype=None)" in lines[0]
    assert lines[-1].startswith("doctor: 2 claim(s): 1 judged, 0 through a fallback, 1 will be")
    assert lines[-2] == (
        "note: toy: no prepare(): built once in the fork server, copied per setup (harness)"
    )


def test_qualify_probes_before_the_first_claim_and_refuses_what_it_cannot_judge(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_QUALIFY_PROBE", "1")
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    bad = toy_repo(tmp_path / "bad", autocast=True)
    args = ("qualify", "--rev", "HEAD", "--device", "cpu", "--sandbox", "none")
    r = run(capsys, *args, "--repo", str(bad))
    assert r.code == 2
    assert "doctor: 2 claim(s): 1 judged, 0 through a fallback, 1 will be inconclusive" in r.err
    assert "refused before any receipt was recorded: 1 required claim(s) cannot be judged: " in (
        r.err
    )
    assert "numerics.gradient-compare: will be inconclusive (reference precision" in r.err
    # The probe ran beside the first claim; nothing of it was recorded.
    assert "beside the first claims" in r.err
    assert "passed (" not in r.err and "-> sha256:" not in r.err
    h = run(capsys, "history", "--rev", "HEAD", "--repo", str(bad), "--json")
    assert h.code == 0 and json.loads(h.out)["entries"] == [], h.out
    good = toy_repo(tmp_path / "good", autocast=False)
    r = run(capsys, *args, "--repo", str(good))
    assert r.code == 0, r.err
    # Said once the probe judged, beside the claims; every receipt waited for it.
    assert "doctor: 2 claim(s): 1 judged, 1 through a fallback" in r.err
    # Forked from the run's fork server (its imports and model already there); without
    # a fork server, a fresh interpreter judges the same.
    assert "beside the first claims (forked from the fork server)" in r.err
    monkeypatch.setenv("LEDGER_FORK_SERVER", "0")
    r = run(capsys, *args, "--repo", str(bad))
    assert r.code == 2 and "beside the first claims (in a fresh interpreter)" in r.err
    assert "doctor: 2 claim(s): 1 judged, 0 through a fallback, 1 will be inconclusive" in r.err
