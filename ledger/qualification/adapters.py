"""The versions of the ready adapters (`runners.adapt.library`), read without torch.

A plan that names a ready adapter has no workload file of its own: what runs is the
adapter's code interpreting the plan's `workload_params`. The package identity covers
that definition (`ledger.qualification.workload_source.definition`), and with it the
version of the adapter that interprets it, so evidence recorded under one adapter's
behaviour never carries to another's. Kept here, below the runners' torch code, so
`ledger status` reads it without importing them.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["READY_ADAPTERS", "UNRECORDED", "adapter_version", "unrecorded_version"]

READY_ADAPTERS: Mapping[str, str] = {
    # The version changes whenever what the adapter computes from the same params
    # changes (a mode, a default, a dtype rule, what a view runs): evidence recorded
    # under the earlier behaviour then no longer carries. "2": no-grad views run in
    # evaluation mode. "3": with no estimator named (or "builtin"), the built-in
    # estimator predicts memory, calibrated on the device (docs/estimator.md), where
    # admission was inconclusive and the 24-view regression recorded no decision.
    "runners.adapt.library:causal_lm": "3",
    "runners.adapt.library:module": "3",
}
"""Entry point -> version of each ready adapter."""


def adapter_version(ref: str | None) -> str | None:
    """The version of the ready adapter `ref` names; None: not a ready adapter."""
    return READY_ADAPTERS.get(ref or "")


UNRECORDED = "1"
"""The version every ready adapter had before the package identity named one: what a
receipt recorded then ran under, whatever its commit's plan reads like today."""


def unrecorded_version(ref: str | None) -> str | None:
    """`UNRECORDED` for a ready adapter (None: not one): the version a receipt whose
    package identity names no workload definition was recorded under."""
    return UNRECORDED if (ref or "") in READY_ADAPTERS else None
