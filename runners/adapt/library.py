"""Ready adapters: a plan names a library model instead of a workload it wrote.

``workload = "runners.adapt.library:causal_lm"`` builds a transformers causal LM
from a config (``model_type`` and ``config``: the sizes; ``attention`` and
``experts``: the implementations; ``dtype``), with an optional PEFT LoRA
(``lora``: `peft.LoraConfig`'s fields). ``workload = "runners.adapt.library:module"``
wraps a plain ``torch.nn.Module``: ``factory`` (``module:function`` in the
repository, called with ``factory_params``), ``loss`` (``(model, batch) ->
scalar``) and ``batch`` (``(shape, seed) -> dict of tensors``).

Both run as a trainer does: every no-grad forward in evaluation mode (``model.eval()``:
no dropout, BatchNorm on its running statistics), every gradient step in training mode
(`runners.protocol.SupportsModes`; ``from_config`` hands the model back in training
mode, and a library's default dropout would otherwise make two no-grad forwards differ).
Both implement the workload protocol and nothing team-specific: the checks'
generic routes do the rest (a reference precision by upcasting the model,
routing through the routers' hooks; `runners.adapt`). The causal LM builds its
model once on CPU in `prepare` (a fork server's), each claim copying it. Memory
is predicted by a plan-named ``estimator`` (``module:function``, called as
``fn(workload_params, shape, phase, device_kind, cold=...)`` returning a
`MemoryEstimate` or bytes), the team's own; where the plan names none, or names
``"builtin"``, by the built-in estimator: calibrated on the device at small shapes
(`runners.adapt.calibrate`, kept per workload digest and device) and fit to an upper
envelope that states its own error (`runners.workloads.envelope`). ``calibration``
(``{max_tokens = N, validate_tokens = M}``) sizes its largest fitted step (default
256 tokens) and its largest validation step (default 8 x N), never a sequence
longer than the model's positions. ``builtin_beside = true`` beside a team's estimator
records the built-in one's bound, point and fit on each admission row, the team's deciding.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any, cast

import torch
from torch import Tensor

from runners.adapt import calibrate, model_bytes
from runners.protocol import (
    AdmissionDecision,
    Batch,
    ForwardOutputs,
    MemoryEstimate,
    Mode,
    Phase,
    Shape,
    pad_sequences,
    workload_digest,
)
from runners.workloads import calibration_record, envelope
from runners.workloads.loader import import_ref

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

RESERVE_PERMILLE = 50
"""Free memory held back from admission, per mille (and at least `RESERVE_MIN_BYTES`)."""
RESERVE_MIN_BYTES = 64 << 20
CUDA_OUTSIDE_POOL_RESERVE_BYTES = 512 << 20
"""On CUDA, held back too for memory outside the allocator's pool (lazily loaded kernels,
library handles), as the reference workload does."""

BUILTIN = "builtin"
"""The ``estimator`` a plan names for the built-in one (also used where it names none)."""


def _dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {name!r}")
    return _DTYPES[name]


class _Adapter:
    """What both adapters share: the optimizer, steps, gradients and admission."""

    name = "adapter"

    def __init__(
        self,
        params: Mapping[str, Any],
        dtype: str,
        lr: float,
        estimator: str | None,
        builtin_beside: bool = False,
    ):
        # Only where asked: the digest of a plan that says nothing stays as it was.
        self.params = {**params, "builtin_beside": True} if builtin_beside else dict(params)
        self._dtype = _dtype(dtype)
        self.lr = lr
        team = estimator if estimator not in (None, "", BUILTIN) else None
        self._estimator: Callable[..., Any] | None = import_ref(team) if team else None
        self._estimator_ref = estimator
        self.builtin_beside = builtin_beside and self._estimator is not None
        """The built-in estimator predicts too, recorded beside the team's estimate."""
        self.calibration_source: str | None = None
        """Where the built-in estimator's calibration came from (``memo``, ``cache``,
        ``measured``); None: not used yet, or a team's estimator."""
        self.model: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.device: torch.device | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def builtin_estimator(self) -> bool:
        """Whether memory is predicted by the built-in estimator (no team estimator)."""
        return self._estimator is None

    def _sources(self) -> list[Any]:
        out: list[Any] = [sys.modules[__name__]]
        if self._estimator is not None:
            out.append(inspect.getsource(self._estimator))
        if self._estimator is None or self.builtin_beside:
            # The built-in estimator predicts (or is recorded): its method is in the identity.
            out.extend([envelope, calibrate, model_bytes])
        return out

    def _terms(self) -> tuple[str, ...]:
        """The basis the built-in estimator fits on (`runners.workloads.envelope`)."""
        return envelope.TERMS

    def _max_seq(self) -> int | None:
        """The longest sequence the model takes; None: any."""
        return None

    def _budget(self) -> calibrate.Budget:
        """The built-in estimator's calibration sizes: the plan's ``calibration``
        (``max_tokens``, ``validate_tokens``), within the model's sequence length."""
        asked = self.params.get("calibration") or {}
        top = int(asked.get("max_tokens") or calibrate.DEFAULT_MAX_TOKENS)
        seq = self._max_seq()
        validate = asked.get("validate_tokens")
        return calibrate.Budget(
            max_tokens=top if seq is None else min(top, seq),
            validate_tokens=int(validate) if validate else None,
            max_seq=seq,
        )

    def calibration(self, *, fresh: bool = False) -> calibration_record.Calibration:
        """The built-in estimator's calibration on this workload's device, measured now
        unless one is kept for its digest and device (`runners.adapt.calibrate`);
        ``fresh``: measured now in any case."""
        self._model()
        # Both subclasses make batches and run steps: what calibrating needs.
        me = cast("calibrate.Calibrated", self)
        got, source = calibrate.calibration(me, self._terms(), self._budget(), fresh=fresh)
        if source != "memo" or self.calibration_source is None:
            # A later ask finds it in memory: the source stays where the fit came from.
            self.calibration_source = source
        return got

    def _train(self, model: Any, device: torch.device) -> None:
        self.model = model.to(device=device, dtype=self.dtype)
        self.device = device
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=self.lr, foreach=False)

    def teardown(self) -> None:
        if self.optimizer is not None:
            self.optimizer.state.clear()
        self.model = self.optimizer = self.device = None

    def _model(self) -> Any:
        if self.model is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        return self.model

    def _builtin(self, shape: Shape, phase: Phase, *, cold: bool) -> MemoryEstimate:
        if phase == "optimizer_step":  # what the model is in bytes: nothing to fit
            got = model_bytes.optimizer_step_bytes(self._model(), self.optimizer, cold=cold)
            return MemoryEstimate(predicted_bytes=sum(got.values()), terms=got)
        cal = self.calibration()
        predicted, point, terms = cal.estimate(shape.batch, shape.seq, phase, cold=cold)
        return MemoryEstimate(
            predicted_bytes=predicted, terms=terms, point_bytes=point, calibration=cal.id
        )

    def estimate(self, shape: Shape, phase: Phase, *, cold: bool = False) -> MemoryEstimate:
        if self._estimator is None:
            return self._builtin(shape, phase, cold=cold)
        kind = self.device.type if self.device is not None else "cpu"
        got = self._estimator(self.params, shape, phase, kind, cold=cold)
        est = got if isinstance(got, MemoryEstimate) else MemoryEstimate(predicted_bytes=int(got))
        if self.builtin_beside and self.model is not None:
            # The team's decides; the built-in one (once set up) is recorded beside it.
            est = dataclasses.replace(est, builtin=self._builtin(shape, phase, cold=cold))
        return est

    def admit(
        self, shape: Shape, phase: Phase, free_bytes: int, *, cold: bool = False
    ) -> AdmissionDecision:
        est = self.estimate(shape, phase, cold=cold)
        reserve = max(RESERVE_MIN_BYTES, free_bytes * RESERVE_PERMILLE // 1000)
        if self.device is not None and self.device.type == "cuda":
            reserve += CUDA_OUTSIDE_POOL_RESERVE_BYTES
        usable = free_bytes - reserve
        ok = est.predicted_bytes <= usable
        return AdmissionDecision(
            admitted=ok,
            predicted_bytes=est.predicted_bytes,
            usable_bytes=usable,
            reserve_bytes=reserve,
            suggestion=None if ok else f"{shape} needs {est.predicted_bytes} of {usable} bytes",
            point_bytes=est.point_bytes,
            calibration=est.calibration,
            builtin=est.builtin,
        )

    def set_mode(self, mode: Mode) -> None:
        """``eval`` or ``train`` (`runners.protocol.SupportsModes`); each forward sets the
        mode of its own step too, so a caller that never says one still evaluates no-grad
        forwards as the trainer does."""
        self._model().train(mode == "train")

    def _mode(self, grad: bool) -> Any:
        """The model, in the mode of a step with or without gradients."""
        model = self._model()
        model.train(grad)
        return model

    def backward(self, out: ForwardOutputs) -> None:
        if out.loss is None or not out.loss.requires_grad:
            raise ValueError("backward needs outputs of forward(grad=True)")
        torch.autograd.backward(out.loss)

    def optimizer_step(self) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.step()

    def zero_grad(self) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"workload {self.name!r} used before setup()")
        self.optimizer.zero_grad(set_to_none=True)

    def gradients(self) -> dict[str, Tensor]:
        return {
            n.removeprefix("base_model.model."): p.grad.detach().clone()
            for n, p in self._model().named_parameters()
            if p.requires_grad and p.grad is not None
        }


class CausalLM(_Adapter):
    """A transformers causal LM from a config, optionally with PEFT LoRA."""

    def __init__(
        self,
        *,
        model_type: str,
        config: Mapping[str, Any],
        attention: str = "eager",
        experts: str | None = None,
        dtype: str = "float32",
        lora: Mapping[str, Any] | None = None,
        lora_b_std: float = 0.02,
        padding: int = 0,
        lr: float = 1e-3,
        estimator: str | None = None,
        calibration: Mapping[str, Any] | None = None,
        builtin_beside: bool = False,
    ) -> None:
        params = {
            "model_type": model_type,
            "config": dict(config),
            "attention": attention,
            "experts": experts,
            "dtype": dtype,
            "lora": dict(lora) if lora is not None else None,
            "lora_b_std": lora_b_std,
            "padding": padding,
            "lr": lr,
            "estimator": estimator,
        }
        if calibration is not None:
            # Only where given: the digest of a plan that says none stays as it was.
            params["calibration"] = dict(calibration)
        super().__init__(params, dtype, lr, estimator, builtin_beside)
        self.name = f"hf-{model_type}" + ("-lora" if lora is not None else "")
        self.vocab = int(config.get("vocab_size", 32000))
        self._prepared: Any = None

    def _terms(self) -> tuple[str, ...]:
        """Attention scores are materialised (``batch x seq**2``) by eager attention and
        by any attention on the CPU; the fused kernels on a GPU keep none."""
        on_gpu = self.device is not None and self.device.type == "cuda"
        if on_gpu and self.params["attention"] != "eager":
            return tuple(t for t in envelope.TERMS if t != "attention")
        return envelope.TERMS

    def _max_seq(self) -> int | None:
        """The model's positions, where its config names them."""
        cfg = self.params["config"]
        positions = cfg.get("n_positions") or cfg.get("max_position_embeddings")
        return int(positions) if positions else None

    def digest(self) -> str:
        """Over the parameters, this adapter, the estimator, and the library versions."""
        libs = {d: metadata.version(d) for d in ("torch", "transformers")}
        if self.params["lora"] is not None:
            libs["peft"] = metadata.version("peft")
        return workload_digest({"workload": self.name, **self.params, **libs}, self._sources())

    def _build(self, seed: int) -> Any:
        from transformers import AutoConfig, AutoModelForCausalLM

        p = self.params
        cfg = AutoConfig.for_model(p["model_type"], **p["config"])
        cfg._attn_implementation = p["attention"]
        if p["experts"]:
            cfg._experts_implementation = p["experts"]
        # transformers initialises from the global generator: a fork keeps the caller's.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg)  # type: ignore[no-untyped-call]
            if p["lora"] is not None:
                from peft import LoraConfig, get_peft_model

                model = get_peft_model(model, LoraConfig(**p["lora"]))
                gen = torch.Generator().manual_seed(seed + 1)
                for n, t in model.named_parameters():
                    # PEFT starts B at zero (A gets no gradient then): start mid-training.
                    if "lora_B" in n and p["lora_b_std"]:
                        with torch.no_grad():
                            t.copy_(torch.randn(t.shape, generator=gen) * p["lora_b_std"])
        return model

    def prepare(self) -> None:
        """Build the model on CPU once, for seed 0 (`runners.protocol.SupportsPrepare`)."""
        self._prepared = self._build(0).to(dtype=self.dtype)

    def setup(self, device: torch.device, seed: int) -> None:
        self.teardown()
        if self._prepared is not None and seed == 0:
            model = _private_copy(self._prepared, device)
        else:
            model = self._build(seed)
        self._train(model, device)

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """Random token ids; every other row ends in ``padding`` padding tokens."""
        gen = torch.Generator().manual_seed(seed)
        pad = min(int(self.params["padding"]), shape.seq - 1)
        rows = [
            torch.randint(self.vocab, (shape.seq - (pad if i % 2 else 0),), generator=gen)
            for i in range(shape.batch)
        ]
        return {k: v.to(self.device) for k, v in pad_sequences(rows, length=shape.seq).items()}

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        model = self._mode(grad)
        with torch.set_grad_enabled(grad):
            out = model(**batch)
        return ForwardOutputs(
            loss=out.loss if grad else out.loss.detach(), compared={"logits": out.logits.detach()}
        )


class ModuleAdapter(_Adapter):
    """A plain ``torch.nn.Module`` from the team's factory, with its loss and batches."""

    def __init__(
        self,
        *,
        factory: str,
        loss: str,
        batch: str,
        factory_params: Mapping[str, Any] | None = None,
        dtype: str = "float32",
        lr: float = 1e-3,
        estimator: str | None = None,
        name: str | None = None,
        calibration: Mapping[str, Any] | None = None,
        builtin_beside: bool = False,
    ) -> None:
        params = {
            "factory": factory,
            "loss": loss,
            "batch": batch,
            "factory_params": dict(factory_params or {}),
            "dtype": dtype,
            "lr": lr,
            "estimator": estimator,
        }
        if calibration is not None:
            params["calibration"] = dict(calibration)
        super().__init__(params, dtype, lr, estimator, builtin_beside)
        self._factory = import_ref(factory)
        self._loss = import_ref(loss)
        self._batch = import_ref(batch)
        self.name = name or f"module-{factory.rpartition(':')[2]}"

    def digest(self) -> str:
        """Over the parameters, this adapter and the team's functions' source."""
        team = [inspect.getsource(f) for f in (self._factory, self._loss, self._batch)]
        libs = {"torch": metadata.version("torch")}
        return workload_digest(
            {"workload": self.name, **self.params, **libs}, [*self._sources(), *team]
        )

    def setup(self, device: torch.device, seed: int) -> None:
        self.teardown()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self._factory(**self.params["factory_params"])
        self._train(model, device)

    def make_batch(self, shape: Shape, seed: int) -> Batch:
        """The team's batch on the device; floating inputs in the workload's dtype."""
        got: Batch = self._batch(shape, seed)
        return {
            k: v.to(self.device, self.dtype) if v.is_floating_point() else v.to(self.device)
            for k, v in got.items()
        }

    def forward(self, batch: Batch, *, grad: bool) -> ForwardOutputs:
        model = self._mode(grad)
        with torch.set_grad_enabled(grad):
            got = self._loss(model, batch)
        if isinstance(got, ForwardOutputs):
            return got
        return ForwardOutputs(loss=got if grad else got.detach())


def _private_copy(model: Any, device: torch.device) -> Any:
    """A copy of ``model`` that training on ``device`` cannot change it through: on CPU
    a deep copy; elsewhere parameters alias the CPU weights until moved (no host copy)."""
    if device.type == "cpu":
        return copy.deepcopy(model)
    memo: dict[int, Any] = {id(b): b for b in model.buffers()}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(p.data, requires_grad=p.requires_grad)
    return copy.deepcopy(model, memo)


def causal_lm(**params: Any) -> CausalLM:
    """Entry point: a transformers causal LM (module docstring)."""
    return CausalLM(**params)


def module(**params: Any) -> ModuleAdapter:
    """Entry point: a plain ``torch.nn.Module`` (module docstring)."""
    return ModuleAdapter(**params)
