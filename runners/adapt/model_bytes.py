"""What a built model is, in exact bytes: parameters by dtype and trainability, the
gradients a backward allocates, and the optimizer's state (`ModelBytes`)."""

from __future__ import annotations

import torch

from runners.workloads.calibration_record import ModelBytes

STEP_BYTES = 4
"""Adam keeps a float32 ``step`` tensor per parameter (``capturable=False``)."""


def _moments(optimizer: torch.optim.Optimizer | None) -> int:
    """Tensors of a parameter's size the optimizer keeps: Adam two (three with
    ``amsgrad``), SGD one with momentum, none without; an unknown optimizer is priced
    as Adam."""
    if optimizer is None:
        return 0
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if group.get("momentum", 0) else 0
    return 3 if group.get("amsgrad", False) else 2


def model_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> ModelBytes:
    """``model``'s parameters (each counted once, tied ones too), their gradients and
    ``optimizer``'s state, read from the objects (module docstring). Trainable means
    ``requires_grad``: a LoRA model's frozen base counts as frozen, its adapters as
    trainable."""
    by: dict[str, int] = {}
    trainable = frozen = steps = 0
    for p in model.parameters():
        n = p.numel() * p.element_size()
        dtype = str(p.dtype).removeprefix("torch.")
        key = f"{'trainable' if p.requires_grad else 'frozen'}.{dtype}"
        by[key] = by.get(key, 0) + n
        if p.requires_grad:
            trainable += n
            steps += 1
        else:
            frozen += n
    moments = _moments(optimizer)
    return ModelBytes(
        parameters=dict(sorted(by.items())),
        trainable_bytes=trainable,
        frozen_bytes=frozen,
        gradient_bytes=trainable,
        optimizer_state_bytes=moments * trainable + (STEP_BYTES * steps if moments >= 2 else 0),
    )


def optimizer_step_bytes(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *, cold: bool
) -> dict[str, int]:
    """What one optimizer step allocates above the gradients, by term: on the first step
    (``cold``) the state it makes (`model_bytes`'s ``optimizer_state_bytes``); on every
    step its temporaries, one parameter at a time: the adapters' single-tensor AdamW
    holds two of a parameter's size at once (the second moment's root and its scaled
    copy) while the previous parameter's scaled root lives until it is replaced, so
    twice the largest trainable parameter and the next largest."""
    sizes = sorted(
        (p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
        reverse=True,
    )
    terms = {"optimizer_temporaries": 2 * sum(sizes[:1]) + sum(sizes[1:2])}
    if cold:
        terms["optimizer_state"] = model_bytes(model, optimizer).optimizer_state_bytes
    return terms
