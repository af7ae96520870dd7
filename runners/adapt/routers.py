"""Routers found by the harness, for a workload that declares none.

A mixture of experts built from a known library has its routers where the
library puts them: transformers' MoE blocks hold a ``gate`` (or ``router``)
beside their ``experts``, returning ``(logits, weights, top-k indices)`` or the
logits alone. Forward hooks on those modules record each forward's top-k
selections (as `runners.protocol.DeclaresRouting` would) and, for the
``(logits, weights, indices)`` form, take given selections instead
(`runners.protocol.ReplaysRouting`): the given experts weighted by the router's
own softmax, renormalised over the top k where the router says so
(``norm_topk_prob``).

Where the router's output holds its logits, the hooks also record each token's
margin: the router's k-th highest probability less its (k+1)-th, one float per
token and routed layer. A token whose margin is within what the precision moves it
flips under any change of rounding; one with a large margin flips only for a real
change of the router (`runners.checks.routing.benign_flips`).

A replay is only as right as that formula is for the router at hand, so it is
checked while it runs: for the tokens whose given selection is the router's own,
the replayed weights must equal the router's own weights. A router where they do
not stops being replayed, and `broken` says which one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

_PREFIXES = ("base_model.model.",)
"""Wrapper prefixes (PEFT's) removed from router names, as workloads name them."""

_ROUTER_CHILD = ("gate", "router")


def _short(name: str) -> str:
    for p in _PREFIXES:
        name = name.removeprefix(p)
    return name


def find_routers(held: Iterable[tuple[str, torch.nn.Module]]) -> dict[str, torch.nn.Module]:
    """The routers inside ``held`` modules, by module name: a ``gate`` or ``router`` child
    of a module that also holds ``experts``."""
    found: dict[str, torch.nn.Module] = {}
    for _, root in held:
        for name, module in root.named_modules():
            children = dict(module.named_children())
            if "experts" not in children:
                continue
            for child in _ROUTER_CHILD:
                if child in children:
                    full = f"{name}.{child}" if name else child
                    found.setdefault(_short(full), children[child])
    return found


def _experts_of(router: torch.nn.Module) -> tuple[int | None, int | None]:
    """(experts, top-k) as the router states them, when it does."""
    e = getattr(router, "num_experts", None) or getattr(router, "n_routed_experts", None)
    k = getattr(router, "top_k", None) or getattr(router, "num_experts_per_tok", None)
    return (e if isinstance(e, int) else None, k if isinstance(k, int) else None)


class RouterHooks:
    """Forward hooks on routers (module docstring); `detach` removes them."""

    def __init__(self, routers: Mapping[str, torch.nn.Module]) -> None:
        self.routers = dict(routers)
        self.recording = False
        self.routed: dict[str, Tensor] = {}
        self.margins: dict[str, Tensor] = {}
        self.given: dict[str, Tensor] = {}
        self.replayed = 0
        self.broken: list[str] = []
        self.replayable: set[str] = set()
        self._handles = [m.register_forward_hook(self._hook(n)) for n, m in self.routers.items()]

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def take(self) -> dict[str, Tensor]:
        """The selections recorded since the last call."""
        got, self.routed = self.routed, {}
        return got

    def take_margins(self) -> dict[str, Tensor]:
        """The margins recorded since the last call (float32 ``[tokens]`` by router)."""
        got, self.margins = self.margins, {}
        return got

    def replay(self, selections: Mapping[str, Tensor] | None) -> None:
        self.given = dict(selections or {})
        self.replayed = 0

    def _hook(self, name: str) -> Any:
        def hook(module: torch.nn.Module, _inputs: Any, output: Any) -> Any:
            outs = output if isinstance(output, tuple) else (output,)
            index = next(
                (t for t in outs if isinstance(t, Tensor) and not t.is_floating_point()), None
            )
            logits = outs[0] if isinstance(outs[0], Tensor) else None
            if index is not None and len(outs) == 3:
                self.replayable.add(name)
            if self.recording:
                experts, k = _experts_of(module)
                if index is not None:
                    self.routed[name] = index.detach()
                    k = index.shape[-1]
                if logits is not None and logits.is_floating_point() and k is not None:
                    flat = logits.detach().reshape(-1, logits.shape[-1])
                    if experts is None or flat.shape[-1] == experts:
                        if index is None:
                            self.routed[name] = flat.topk(k).indices
                        if k < flat.shape[-1]:
                            self.margins[name] = margin(flat, k)
            given = self.given.get(name)
            if given is None or name in self.broken or index is None or len(outs) != 3:
                return None
            return self._replayed(module, name, outs, given.to(index.device, index.dtype))

        return hook

    def _replayed(
        self, module: torch.nn.Module, name: str, outs: tuple[Any, ...], given: Tensor
    ) -> Any:
        logits, own_w, own = outs
        given = given.reshape(own.shape)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights = probs.gather(-1, given)
        if getattr(module, "norm_topk_prob", False):
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(own_w.dtype)
        same = (given == own).all(dim=-1)
        if bool(same.any()) and not torch.allclose(weights[same], own_w[same]):
            # The formula is not this router's: leave it to its own choice.
            self.broken.append(name)
            return None
        self.replayed += 1
        return (logits, weights, given)


def margin(logits: Tensor, k: int) -> Tensor:
    """Per token: the k-th highest router probability less the (k+1)-th (float32, on the
    CPU): how far the top-k selection is from flipping."""
    top = (
        torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        .topk(k + 1, dim=-1)
        .values
    )
    return (top[:, k - 1] - top[:, k]).to("cpu", torch.float32)


def holds_experts(held: Iterable[tuple[str, torch.nn.Module]]) -> bool:
    """Whether any held module has a child named ``experts`` (a mixture of experts)."""
    return any(
        "experts" in dict(m.named_children()) for _, root in held for _, m in root.named_modules()
    )
