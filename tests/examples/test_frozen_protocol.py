"""An earlier workload keeps every claim (docs/workload-protocol.md: "Nothing is
required"): a Qwen3-MoE + LoRA trainer frozen at the earlier protocol (its ``setup``
takes no ``dtype``) still gets gradient-compare's and the 24-view regression's
reference-precision arm, by upcasting the modules it holds (`runners.adapt.upcast`),
and the receipts name that route."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest
import torch

from runners.adapt.upcast import setup_reference
from runners.protocol import ForwardOutputs, PrecisionUnsupported
from tests.ledger.helpers import run

FROZEN = Path(__file__).resolve().parent / "frozen_protocol"
CPU = torch.device("cpu")


def make_repo(path: Path) -> Path:
    shutil.copytree(FROZEN, path, ignore=shutil.ignore_patterns("__pycache__"))
    repo = git.Repo.init(path)
    files = [p.relative_to(path) for p in path.rglob("*") if p.is_file()]
    repo.index.add([str(f) for f in files if f.parts[0] != ".git"])
    actor = git.Actor("Third Party", "tp@example.invalid")
    repo.index.commit("Qwen3-MoE LoRA trainer (earlier protocol)", author=actor, committer=actor)
    repo.create_remote("origin", "https://example.invalid/frozen.git")
    return path


@pytest.mark.slow
def test_frozen_protocol_workload_keeps_its_reference_claims_in_bf16(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_repo(tmp_path / "frozen")
    claims = ("--claim", "numerics.gradient-compare", "--claim", "regression.24view-nograd")
    r = run(
        capsys,
        *("qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu"),
        *("--profile", "tiny", "--json", *claims),
    )
    doc = json.loads(r.out)  # exit 1: the claims not run leave the whole plan unqualified
    preds = {}
    for x in doc["receipts"]:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        preds[x["claim"]] = shown["statement"]["predicate"]
    assert {c: p["outcome"] for c, p in preds.items()} == {
        "numerics.gradient-compare": "passed",
        "regression.24view-nograd": "passed",
    }, {c: p.get("reason") for c, p in preds.items()}
    assert {p["scope"]["dtype"] for p in preds.values()} == {"bfloat16"}
    grad = preds["numerics.gradient-compare"]["measurements"]
    for arm in ("reference", "candidate_reference"):
        assert grad[f"{arm}_precision_route"] == "upcast-modules"
        assert grad[f"{arm}_precision_route_modules"] == ["model"]
        seen = grad[f"{arm}_precision_route_seen"]
        assert seen["confirmed"] is True and seen["gradients"] == ["float32"]
    assert grad["reference_dtype"] == "float32"
    # Built once in each tree's fork server, copied by every arm (runners.workloads.prebuilt).
    arms = ("base", "base_repeat", "candidate", "reference", "candidate_reference")
    assert {a: grad[f"{a}_setup_routes"] for a in arms} == {a: ["prebuilt"] for a in arms}
    reg = preds["regression.24view-nograd"]["measurements"]
    assert reg["setup_routes"] == ["prebuilt"]
    assert reg["precision_route"] == "upcast-modules"
    assert isinstance(reg["nll_reference"], float) and "reference_skipped" not in reg


class Toy:
    """A workload at the earlier protocol, reduced to what the upcast route touches."""

    name = "toy"

    def __init__(self, cast_inside: bool = False, hold: bool = True) -> None:
        self.cast_inside, self.hold = cast_inside, hold
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.loose: torch.nn.Module | None = None

    def setup(self, device: torch.device, seed: int) -> None:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)).to(torch.bfloat16)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if self.hold:
            self.model = model
        else:
            self.loose = None  # only the optimizer's parameters remain reachable

    def forward(self, x: torch.Tensor) -> ForwardOutputs:
        assert self.model is not None
        if self.cast_inside:  # what a trainer's autocast does to an upcast model
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.model(x)
        else:
            y = self.model(x)
        return ForwardOutputs(loss=y.mean(), compared={"y": y.detach()})


def test_upcast_keeps_the_parameters_so_the_optimizer_still_applies() -> None:
    w = Toy()
    arm = setup_reference(w, CPU, 0, torch.float32)  # type: ignore[arg-type]
    assert arm.route == "upcast-modules" and arm.modules == ["model"]
    assert w.model is not None and w.optimizer is not None
    params = list(w.model.parameters())
    assert {p.dtype for p in params} == {torch.float32}
    assert [id(p) for p in w.optimizer.param_groups[0]["params"]] == [id(p) for p in params]
    out = w.forward(torch.ones(2, 4))
    assert out.loss is not None
    out.loss.backward()
    before = params[0].detach().clone()
    w.optimizer.step()
    assert not torch.equal(before, params[0].detach())
    arm.confirm(out, {str(i): p.grad for i, p in enumerate(params) if p.grad is not None})
    assert arm.measurements()["precision_route_seen"] == {
        "outputs": {"loss": "float32", "y": "float32"},
        "gradients": ["float32"],
        "confirmed": True,
    }


def test_a_cast_back_inside_the_forward_is_caught_not_trusted() -> None:
    w = Toy(cast_inside=True)
    arm = setup_reference(w, CPU, 0, torch.float32)  # type: ignore[arg-type]
    assert w.model is not None
    out = w.forward(torch.ones(2, 4))
    assert out.loss is not None
    out.loss.backward()
    grads = {n: p.grad for n, p in w.model.named_parameters() if p.grad is not None}
    assert {g.dtype for g in grads.values()} == {torch.float32}  # the gradients alone pass
    with pytest.raises(PrecisionUnsupported, match="output y in bfloat16"):
        arm.confirm(out, grads)


def test_nothing_to_upcast_says_which_line_to_add() -> None:
    with pytest.raises(PrecisionUnsupported, match=r"holds no torch\.nn\.Module"):
        setup_reference(Toy(hold=False), CPU, 0, torch.float32)  # type: ignore[arg-type]


def test_a_model_kept_aside_for_the_next_setup_is_not_upcast() -> None:
    w = Toy()
    w.setup(CPU, 0)
    spare = w.model  # what a prepared workload keeps to copy from
    w.loose = spare
    arm = setup_reference(w, CPU, 1, torch.float32)  # type: ignore[arg-type]
    assert arm.modules == ["model"]
    assert spare is not None and {p.dtype for p in spare.parameters()} == {torch.bfloat16}
