"""Build once, copy per setup (`runners.workloads.prebuilt`): a workload without
``prepare()`` built once on CPU as a fork server does, each claim's ``setup`` a copy
that computes exactly what the workload's own ``setup`` gives, and every case where a
copy could differ refused (the workload's own ``setup`` runs instead)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch

from runners.protocol import ForwardOutputs, Shape
from runners.workloads import prebuilt
from runners.workloads.loader import load_workload, prebuild_workload

FROZEN = Path(__file__).resolve().parents[2] / "examples" / "frozen_protocol"
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    prebuilt._BUILT.clear()
    prebuilt.routes()
    yield
    prebuilt._BUILT.clear()
    prebuilt.routes()


def _frozen_params() -> tuple[str, dict[str, Any]]:
    plan = tomllib.loads((FROZEN / "qualification.toml").read_text())
    return plan["workload"], {
        **plan["workload_params"],
        **plan["profiles"]["tiny"]["workload_params"],
    }


def _train_once(w: Any) -> tuple[float, dict[str, torch.Tensor]]:
    out = w.forward(w.make_batch(Shape(batch=2, seq=8), 1), grad=True)
    w.backward(out)
    grads = w.gradients()
    w.optimizer_step()
    return float(out.loss.detach()), grads


def test_the_frozen_trainer_copied_computes_what_its_own_setup_gives() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    ref, params = _frozen_params()
    assert prebuild_workload(FROZEN, ref, params) == ""
    copied = load_workload(FROZEN, ref, params)
    prebuilt.setup(copied, CPU, 0)
    assert prebuilt.routes() == ["prebuilt"]
    native = load_workload(FROZEN, ref, params)
    native.setup(CPU, 0)
    a, b = dict(copied.model.named_parameters()), dict(native.model.named_parameters())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # The optimizer trains the copy's own parameters, never the snapshot's.
    held = {id(p) for g in copied.optimizer.param_groups for p in g["params"]}
    assert held and held <= {id(p) for p in copied.model.parameters()}
    snap = prebuilt._BUILT[next(iter(prebuilt._BUILT))][0].workload
    before = {n: p.detach().clone() for n, p in snap.model.named_parameters()}
    (loss_a, grads_a), (loss_b, grads_b) = _train_once(copied), _train_once(native)
    assert loss_a == loss_b and grads_a.keys() == grads_b.keys()
    assert all(torch.equal(grads_a[k], grads_b[k]) for k in grads_a)
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same step, the same weights
    assert all(torch.equal(before[n], p) for n, p in snap.model.named_parameters())
    trained = [n for n, p in copied.model.named_parameters() if p.requires_grad]
    assert any(
        not torch.equal(before[n], dict(copied.model.named_parameters())[n]) for n in trained
    )


class Toy:
    """The smallest workload at the earlier protocol; ``how`` plants one hazard."""

    name = "toy"
    dtype = torch.float32

    def __init__(self, how: str = "") -> None:
        self.how = how
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.device: torch.device | None = None
        self.extra: Any = None

    def digest(self) -> str:
        return "toy"

    def setup(self, device: torch.device, seed: int) -> None:
        torch.manual_seed(seed)  # no fork_rng: the global generators stay seeded
        model = torch.nn.Linear(4, 2).to(device)
        self.model, self.device = model, device
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if self.how == "hook":
            model.register_forward_hook(lambda m, i, o: o * model.weight.sum())
        elif self.how == "shared":
            self.extra = model.weight.detach()  # the same storage, another tensor
        elif self.how == "history":
            self.extra = model.weight * 2

    def forward(self, x: torch.Tensor) -> ForwardOutputs:
        assert self.model is not None
        return ForwardOutputs(loss=self.model(x).sum() + torch.rand(()))


def _toy_key(how: str) -> tuple[str, str, str]:
    return ("/toy", "toy:make", how)


def _loaded(how: str) -> Toy:
    w = Toy(how)
    prebuilt.note_origin(w, _toy_key(how))  # type: ignore[arg-type]
    return w


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("hook", "closes over the model"),
        ("shared", "share storage"),
        ("history", "autograd history"),
    ],
)
def test_a_snapshot_a_copy_could_change_is_refused_and_setup_runs(how: str, why: str) -> None:
    assert why in prebuilt.prebuild(Toy(how), _toy_key(how))  # type: ignore[arg-type]
    w = _loaded(how)
    prebuilt.setup(w, CPU, 0)  # type: ignore[arg-type]
    assert prebuilt.routes() == ["workload"]
    assert w.model is not None


def test_the_random_state_setup_leaves_is_replayed() -> None:
    assert prebuilt.prebuild(Toy(), _toy_key("")) == ""  # type: ignore[arg-type]
    x = torch.ones(1, 4)
    torch.manual_seed(123)  # whatever the claim's state was before setup
    copied = _loaded("")
    prebuilt.setup(copied, CPU, 0)  # type: ignore[arg-type]
    got = copied.forward(x).loss
    torch.manual_seed(123)
    native = Toy()
    native.setup(CPU, 0)
    assert prebuilt.routes() == ["prebuilt"]
    assert got is not None and torch.equal(got, native.forward(x).loss)  # type: ignore[arg-type]
    assert copied.device == CPU and copied.model is not native.model


def test_another_seed_is_set_up_by_the_workload() -> None:
    assert prebuilt.prebuild(Toy(), _toy_key("")) == ""  # type: ignore[arg-type]
    w = _loaded("")
    prebuilt.setup(w, CPU, 1)  # type: ignore[arg-type]
    assert prebuilt.routes() == ["workload"]


def test_turned_off_the_fork_server_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_PREBUILD", "0")
    assert "LEDGER_PREBUILD=0" in prebuild_workload(Path("/nonexistent"), "toy:make", {})
    w = _loaded("")
    prebuilt.setup(w, CPU, 0)  # type: ignore[arg-type]
    assert prebuilt.routes() == ["workload"]


def test_a_forked_child_copies_the_servers_snapshot(tmp_path: Path) -> None:
    """As in a fork server: built in the parent, copied in a child that inherits it."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    ref, params = _frozen_params()
    script = textwrap.dedent(
        f"""
        import os, sys, torch
        from pathlib import Path
        from runners.workloads import prebuilt
        from runners.workloads.loader import load_workload, prebuild_workload
        root, ref, params = Path({str(FROZEN)!r}), {ref!r}, {params!r}
        assert prebuild_workload(root, ref, params) == ""
        pid = os.fork()
        if pid == 0:
            w = load_workload(root, ref, params)
            prebuilt.setup(w, torch.device("cpu"), 0)
            os._exit(0 if prebuilt.routes() == ["prebuilt"] else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_gradient_arms_share_a_gpu_only_when_the_base_arms_footprint_fits() -> None:
    from runners.checks.arms import side_by_side_fits

    names = ["candidate", "reference", "base_repeat"]  # 1 + 2 + 1 base footprints
    gib = 1 << 30
    assert side_by_side_fits(4 * gib, 20 * gib, names)  # 16 GiB within 80 % of 20
    assert not side_by_side_fits(4 * gib, 19 * gib, names)
    assert not side_by_side_fits(0, 100 * gib, names)  # an unknown footprint: in turn


def test_the_server_builds_only_what_it_will_set_up_twice() -> None:
    from runners.fork.forkparent import Spec

    once, twice = ("m:once", {"a": 1}), ("m:twice", {"a": 2})
    spec = Spec.of(Path("/r"), [once, twice, twice])
    assert [ref for _, ref, _ in spec.prepare] == ["m:once", "m:twice"]
    assert [ref for _, ref, _ in spec.prebuild] == ["m:twice"]


def test_a_setup_that_never_returns_cannot_hold_the_server() -> None:
    import threading

    from runners.workloads.prebuilt import _deadline

    with pytest.raises(TimeoutError, match="LEDGER_PREBUILD_TIMEOUT_S"), _deadline(0.2):
        threading.Event().wait()  # what a blocking setup does; the alarm ends it
