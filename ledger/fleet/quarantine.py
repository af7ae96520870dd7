"""Quarantine: `qualify --gpus all` leaves out the devices whose fault rate (the
Wilson lower bound, `ledger fleet`) exceeds the runner's bound, and says so.

The bound is the runner's setting ``LEDGER_QUARANTINE_ABOVE`` (e.g. ``0.05``), else
the plan's ``quarantine_above`` (which also makes status count a quarantined GPU's
receipts only with a clean health snapshot). The fleet's receipts
are read once per run from the ledger the run records into: the local store's, or
the server's (`GET /v1/fleet`); where they cannot be read the run says that
quarantine was not applied, and why. `decide` is the one decision, for this host's
devices (`skip_quarantined`) and for each node of a Ray cluster
(`ledger.execution.ray_quarantine`).

A circuit breaker (as NVIDIA's NVSentinel has for cordoning nodes): quarantine
never takes more than a share of a host's devices, or of the fleet's, at once
(``LEDGER_QUARANTINE_MAX_SHARE``, default 0.5). Past it, what looks like sick
devices is more likely a fault of the fleet's (a driver, a rack, a bad release of
the health reader), and skipping them would stop the qualification for no device's
fault: the run then reports the devices above the bound and skips none.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ledger.evidence.errors import Error, UsageError
from ledger.fleet.report import QUARANTINE_ENV, quarantined

if TYPE_CHECKING:
    from ledger.hardware.gpus import Device

__all__ = [
    "MAX_SHARE_ENV",
    "Decision",
    "FleetReader",
    "add_fact",
    "bound",
    "decide",
    "max_share",
    "not_applied",
    "server_fleet",
    "skip_quarantined",
]

MAX_SHARE_ENV = "LEDGER_QUARANTINE_MAX_SHARE"
DEFAULT_MAX_SHARE = 0.5


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


def max_share(env: Mapping[str, str]) -> float:
    """The circuit breaker's share: the most of a host's or the fleet's devices that
    quarantine takes at once."""
    raw = env.get(MAX_SHARE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_SHARE
    try:
        x = float(raw)
    except ValueError:
        x = math.nan
    if not 0 < x <= 1:
        raise UsageError(f"{MAX_SHARE_ENV}={raw!r}: want a share above 0 and at most 1, e.g. 0.5")
    return x


class FleetReader(Protocol):
    """What quarantine reads the fleet through: the reader of the ledger the run records
    into (`ledger.read.reader.Reader`, handed down with its recorder), here or a
    server's."""

    remote: bool

    def fleet(self, quarantine_above: float | None = None) -> dict[str, Any]: ...


def _fleet(reader: FleetReader, above: float) -> tuple[dict[str, Any] | None, str | None]:
    """The fleet report of the ledger the run records into, read once: the local
    store's, or the server's; else None and why."""
    try:
        return reader.fleet(above), None
    except Error as e:
        # Said, never silent: a GPU host without the read role runs on every device.
        whose = "the server's" if reader.remote else "the ledger's"
        return None, f"{whose} fleet could not be read ({e})"


def server_fleet(
    url: str, above: float, token: str | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """The server's fleet report (`GET /v1/fleet`, a token with the read role), read
    once; else None and why."""
    from ledger.evidence.errors import Error
    from ledger.remote.client import fetch_fleet

    try:
        return fetch_fleet(url, above, token), None
    except Error as e:
        # Said, never silent: a GPU host without the read role runs on every device.
        return None, f"the server's fleet could not be read ({e})"


def not_applied(why: str) -> tuple[str, str]:
    """The fact, and the line, of a run whose fleet could not be read."""
    return "quarantine_not_applied", f"quarantine: {why}; not applied"


def add_fact(facts: dict[str, str], key: str, line: str) -> None:
    """``line`` kept under ``key`` for the run's receipts, after what it holds already."""
    facts[key] = f"{facts[key]}; {line}" if key in facts else line


@dataclass(frozen=True)
class Decision:
    """What quarantine does to one host's devices: those kept, and each ``quarantine_*``
    fact with its line, in the order they are said."""

    kept: list[Device]
    notes: list[tuple[str, str]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Each device skipped, by UUID, with the line that says why."""


def decide(
    devices: Sequence[Device],
    every: Sequence[Device],
    report: Mapping[str, Any],
    above: float,
    share: float,
    host: str | None = None,
) -> Decision:
    """``devices`` less those whose fault-rate lower bound in ``report`` exceeds
    ``above`` where they are ``every`` GPU of the host (a host's devices named one by
    one run, said to be quarantined), within the circuit breaker's ``share`` of the
    host's and the fleet's devices. ``host`` names a host other than this one (a Ray
    node)."""
    sick = quarantined(report, above)
    if not sick:
        return Decision(list(devices))
    on = "" if host is None else f" on {host}"
    notes: list[tuple[str, str]] = []
    here = [d for d in every if d.uuid in sick]
    fleet_n = len(report.get("devices") or [])
    for what, n, of in (
        ("this host's" if host is None else f"{host}'s", len(here), len(every)),
        ("the fleet's", len(sick), fleet_n),
    ):
        if of and n / of > share:
            # Tripped: report, skip nothing (see the module's docstring).
            for d in devices:
                if d.uuid in sick:
                    notes.append((
                        "quarantine_reported",
                        f"{d.label}{on} ({d.uuid}) above the quarantine bound: fault rate >= "
                        f"{sick[d.uuid]:.3g} > {above:.3g}: runs",
                    ))  # fmt: skip
            notes.append((
                "quarantine_breaker",
                f"quarantine: circuit breaker: {n} of {of} of {what} devices are above the "
                f"bound, more than the share {share:.3g} ({MAX_SHARE_ENV}) quarantine may "
                "take at once: reported, none skipped",
            ))  # fmt: skip
            return Decision(list(devices), notes)
    whole = {d.uuid for d in devices} == {d.uuid for d in every}
    kept, skipped = [], {}
    for d in devices:
        if d.uuid not in sick:
            kept.append(d)
            continue
        why = f"fault rate >= {sick[d.uuid]:.3g} > {above:.3g}"
        if whole:
            skipped[str(d.uuid)] = f"{d.label}{on} ({d.uuid}) quarantined: {why}: skipped"
            notes.append(("quarantine_skipped", skipped[str(d.uuid)]))
        else:
            kept.append(d)
            notes.append((
                "quarantine_reported",
                f"{d.label}{on} ({d.uuid}) quarantined: {why}: runs, as --gpus names it",
            ))  # fmt: skip
    return Decision(kept, notes, skipped)


def skip_quarantined(
    devices: Sequence[Device],
    every: Sequence[Device],
    reader: FleetReader,
    above: float | None,
    say: Callable[[str], None],
    facts: dict[str, str] | None = None,
) -> list[Device]:
    """``devices`` less those quarantine skips (`decide`), from the fleet of the ledger
    the run records into (``--gpus all``). What quarantine did (each device with its
    figure and the bound, the breaker, or why it was not applied) is said and, in
    ``facts``, kept for the run's receipts (`quarantine_*` keys of their environment)."""
    got: dict[str, str] = {} if facts is None else facts
    if above is None or not any(d.uuid for d in devices):
        return list(devices)
    share = max_share(os.environ)
    report, why_not = _fleet(reader, above)
    notes = [not_applied(str(why_not))] if report is None else []
    decision = Decision(list(devices), notes)
    if report is not None:
        decision = decide(devices, every, report, above, share)
    for key, line in decision.notes:
        say(line)
        add_fact(got, key, line)
    if not decision.kept:
        raise UsageError("--gpus all: every GPU of this host is quarantined (ledger fleet)")
    return decision.kept
