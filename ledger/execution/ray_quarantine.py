"""Quarantine under ``--executor ray``: Ray, not the ledger, gives each task its GPUs,
so the quarantined ones are taken out of Ray's hands for the run.

The driver reads the server's fleet once (`ledger.fleet.quarantine.server_fleet`, the
bound from ``LEDGER_QUARANTINE_ABOVE`` or the plan's ``quarantine_above``). Where the
fleet names a device above the bound, it asks Ray for every GPU of the cluster once,
all at the same time (a census: one task of one GPU per GPU, so Ray must give each a
different one); each census task says which GPU it holds (node, index, NVML UUID).
Each node's devices are then decided as a host's are (`ledger.fleet.quarantine.decide`:
the same figures, bound, circuit breaker and wording), and the census tasks on the
devices quarantine skips keep holding them until the run ends, while the others let
theirs go: Ray cannot give a quarantined GPU to a claim, whatever it places where.

Each claim's task also carries the quarantined UUIDs: a task that Ray placed on one all
the same (its census task died) does not run its claim there; it holds that GPU in
turn and the driver places the claim again, at most once per quarantined device. A
claim that needs more GPUs on one node than any node has outside quarantine is not run,
and that is said and recorded. What quarantine did goes into every receipt of the run
(the ``quarantine_*`` keys of the local path).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ledger.evidence.errors import UsageError
from ledger.execution.claimrun import ClaimRun
from ledger.execution.devices import Device
from ledger.fleet.quarantine import add_fact, bound, decide, max_share, not_applied, server_fleet
from ledger.fleet.report import quarantined

__all__ = ["Quarantine", "apply", "declined", "hold_gpus"]

_HOLD_POLL_S = 0.25
"""How often a holding task looks up from its sleep: Ray's cancel arrives as
KeyboardInterrupt between two sleeps."""


@dataclass
class Quarantine:
    """What quarantine does for one Ray run."""

    facts: dict[str, str] = field(default_factory=dict)
    """The ``quarantine_*`` facts every receipt of the run carries."""
    avoid: dict[str, str] = field(default_factory=dict)
    """Each quarantined UUID, with the line that skipped it."""
    widest: int | None = None
    """The most GPUs any node has outside quarantine; None where none is held."""
    holders: list[Any] = field(default_factory=list)
    """The tasks that hold the quarantined GPUs until the run ends."""

    def payload(self) -> dict[str, Any]:
        """What each claim's task is told."""
        return {"facts": dict(self.facts), "avoid": dict(self.avoid)}

    def unplaceable(self, runs: Sequence[ClaimRun], say: Callable[[str], None]) -> set[int]:
        """The indices of the claims that cannot avoid the quarantined devices: each
        said in one line and recorded in the run's facts (taken before any task is
        submitted, so every receipt carries them)."""
        if self.widest is None:
            return set()
        out = set()
        for r in runs:
            if r.gpus > self.widest:
                line = (
                    f"{r.claim}: not run: it needs {r.gpus} GPUs on one node and no node has "
                    f"{r.gpus} outside quarantine (the widest has {self.widest}), and "
                    "quarantined GPUs are held for this run"
                )
                say(f"[{r.index}/{len(runs)}] {line}")
                add_fact(self.facts, "quarantine_not_run", line)
                out.add(r.index)
        return out


def apply(
    ray: Any, server: str, plan_above: float | None, say: Callable[[str], None]
) -> Quarantine:
    """Read the server's fleet once and hold the cluster's quarantined GPUs for the run
    (see the module's docstring); say what quarantine did."""
    q = Quarantine()
    above = bound(os.environ) or plan_above
    if above is None:
        return q
    share = max_share(os.environ)
    report, why_not = server_fleet(server, above)
    if report is None:
        _note(q, say, *not_applied(str(why_not)))
        return q
    sick = quarantined(report, above)
    if not sick:
        return q
    nodes = [x for x in ray.nodes() if x.get("Alive")]
    total = sum(int(x.get("Resources", {}).get("GPU", 0)) for x in nodes)
    say(
        f"quarantine: {len(sick)} device(s) of the fleet above the bound {above:.3g}; "
        f"asking Ray for each of the cluster's {total} GPU(s) once, to hold those "
        "quarantined for the run"
    )
    held = _census(ray, total)
    try:
        _decide(q, held, report, above, share, say)
    except BaseException:
        _release(ray, [g for g, _ in held])
        raise
    keep = [g for g, at in held if at["uuid"] in q.avoid]
    _release(ray, [g for g, at in held if at["uuid"] not in q.avoid])
    q.holders.extend(keep)
    return q


def _note(q: Quarantine, say: Callable[[str], None], key: str, line: str) -> None:
    say(line)
    add_fact(q.facts, key, line)


def _census(ray: Any, total: int) -> list[tuple[Any, dict[str, Any]]]:
    """One task of one GPU per GPU of the cluster, all held at once; each with the GPU it
    holds (``node``, ``host``, ``index``, ``uuid``)."""
    task = ray.remote(hold_gpus).options(
        num_gpus=1, num_cpus=0, max_retries=0, name="ledger quarantine census"
    )
    gens = [task.remote() for _ in range(total)]
    held = []
    try:
        for gen in gens:
            held.append((gen, ray.get(next(gen))))
    except BaseException:
        _release(ray, gens)
        raise
    return held


def _decide(
    q: Quarantine,
    held: list[tuple[Any, dict[str, Any]]],
    report: dict[str, Any],
    above: float,
    share: float,
    say: Callable[[str], None],
) -> None:
    """Each node's devices decided as a host's are; the lines said once."""
    nodes: dict[str, tuple[str, list[Device]]] = {}
    for _, at in held:
        host, devices = nodes.setdefault(str(at["node"]), (str(at["host"]), []))
        devices.append(Device(str(at["index"]), at["uuid"] or None))
    if not any(d.uuid for _, ds in nodes.values() for d in ds):
        _note(q, say, *not_applied("no Ray worker could name its GPU (NVML)"))
        return
    said: set[tuple[str, str]] = set()
    widest = 0
    for host, devices in nodes.values():
        every = sorted(devices, key=lambda d: int(d.index) if d.index.isdigit() else 0)
        decision = decide(every, every, report, above, share, host=f"node {host}")
        for note in decision.notes:
            if note not in said:  # the fleet's breaker trips on every node alike
                said.add(note)
                _note(q, say, *note)
        q.avoid.update(decision.skipped)
        widest = max(widest, len(decision.kept))
    if q.avoid and not widest:
        raise UsageError("--executor ray: every GPU of the cluster is quarantined (ledger fleet)")
    q.widest = widest if q.avoid else None


def _release(ray: Any, gens: Sequence[Any]) -> None:
    """Let the GPUs go: each holding task ends at its next look-up."""
    for gen in gens:
        try:
            ray.cancel(gen)
        except Exception:  # already ended
            continue


def hold_gpus() -> Iterator[dict[str, Any]]:
    """A census task, on the GPU Ray gave it: says which it is, then holds it until the
    driver cancels the task."""
    import ray

    from ledger.fleet.health import uuids_of

    [index] = [str(g) for g in ray.get_gpu_ids()] or [""]
    named = uuids_of([index]) if index else []
    yield {
        "node": ray.get_runtime_context().get_node_id(),
        "host": socket.gethostname(),
        "index": index,
        "uuid": named[0] if named else "",
    }
    hold()


def hold() -> NoReturn:
    """Hold this task's GPUs (do nothing on them) until Ray cancels the task."""
    while True:
        time.sleep(_HOLD_POLL_S)


def declined(payload: dict[str, Any], devices: Sequence[str]) -> str:
    """Why a claim's task does not run on ``devices`` (the GPU indices Ray gave it): the
    lines of those quarantined; empty where none is."""
    avoid = dict((payload.get("quarantine") or {}).get("avoid") or {})
    if not avoid or not devices:
        return ""
    from ledger.fleet.health import uuids_of

    return "; ".join(avoid[u] for u in uuids_of(list(devices)) if u in avoid)
