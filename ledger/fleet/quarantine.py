"""Quarantine: `qualify --gpus all` leaves out the devices whose fault rate (the
Wilson lower bound, `ledger fleet`) exceeds the runner's bound, and says so.

The bound is the runner's setting ``LEDGER_QUARANTINE_ABOVE`` (e.g. ``0.05``), else
the plan's ``quarantine_above`` (which also makes status count a quarantined GPU's
receipts only with a clean health snapshot). The fleet's receipts
are read from the ledger the run records into; a run that records through a
server reads none and says that quarantine was not applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ledger.evidence.errors import UsageError
from ledger.fleet.report import QUARANTINE_ENV, fleet_report, quarantined, store_predicates

if TYPE_CHECKING:
    from ledger.execution.devices import Device

__all__ = ["bound", "skip_quarantined"]


def bound(env: Mapping[str, str]) -> float | None:
    """The runner's quarantine bound, or None where it sets none."""
    raw = env.get(QUARANTINE_ENV, "").strip()
    if not raw:
        return None
    try:
        x = float(raw)
    except ValueError:
        x = math.nan
    if not 0 < x < 1:
        raise UsageError(f"{QUARANTINE_ENV}={raw!r}: want a rate between 0 and 1, e.g. 0.05")
    return x


def skip_quarantined(
    devices: Sequence[Device],
    every: Sequence[Device],
    recorder: object,
    above: float | None,
    say: Callable[[str], None],
) -> list[Device]:
    """``devices`` less those whose fault-rate lower bound exceeds ``above`` where they
    are ``every`` GPU of the host (``--gpus all``); devices named one by one run, said
    to be quarantined."""
    if above is None or not any(d.uuid for d in devices):
        return list(devices)
    store = getattr(recorder, "store", None)
    if store is None:
        say("quarantine: the ledger is a server's; not applied")
        return list(devices)
    sick = quarantined(fleet_report(store_predicates(store)), above)
    if not sick:
        return list(devices)
    whole = {d.uuid for d in devices} == {d.uuid for d in every}
    kept = []
    for d in devices:
        if d.uuid not in sick:
            kept.append(d)
            continue
        why = f"fault rate >= {sick[d.uuid]:.3g} > {above:.3g}"
        if whole:
            say(f"{d.label} ({d.uuid}) quarantined: {why}: skipped")
        else:
            kept.append(d)
            say(f"{d.label} ({d.uuid}) quarantined: {why}: runs, as --gpus names it")
    if not kept:
        raise UsageError("--gpus all: every GPU of this host is quarantined (ledger fleet)")
    return kept
