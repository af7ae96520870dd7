"""The doctor's probe before anything is recorded: beside the first claims, not before them.

On a GPU host `ledger qualify` probes the workload (`runners.doctor`: on CPU, at a
tiny shape, forked from the run's fork server) so that a plan whose required claim
cannot be judged at all is refused (exit 2) with nothing written. The probe needs
CPUs only, and a claim that measures memory needs the GPU only: so the probe runs in
a thread beside the claims, which start as soon as the fork server is ready, and
every receipt waits at the `Gate` until the probe has judged. A refusal stops the
claims started meanwhile and nothing of them is recorded. Before, the probe held the
first claim back by its own seconds (7.9 s of a 0.9 B model's plan on one H100).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import UsageError
from ledger.execution.gate import Gate
from ledger.qualification.plan import ClaimSpec, Plan
from ledger.sandbox import Sandbox

if TYPE_CHECKING:
    from ledger.execution.local_run import Started

__all__ = ["PROBE_VAR", "start"]

PROBE_VAR = "LEDGER_QUALIFY_PROBE"
"""``1``: qualify probes the workload (`ledger doctor`'s probe) before anything is
recorded; ``0``: it judges from the plan alone; unset: it probes when the run uses CUDA."""


def start(
    plan: Plan,
    asked: Sequence[ClaimSpec],
    st: Started | None,
    box: Sandbox | None,
    cuda: bool,
    say: Callable[[str], None],
) -> Gate:
    """The run's gate: judged at once from the plan (instant: a refusal raises here,
    before any claim), or by the probe in a thread once the fork server is ready."""
    from ledger.conformance.probe import plan_claims

    gate = Gate()
    claims = plan_claims(plan, asked)
    want = os.environ.get(PROBE_VAR, "")
    if not claims or st is None or box is None or not (want == "1" or (cuda and want != "0")):
        if claims:
            from ledger.conformance.plan_level import judge_from_plan

            _judge(judge_from_plan(claims), say)
        gate.judged()
        return gate
    from ledger.execution import local_run

    # Waited for here, in the caller's thread (the servers' handle is not shared
    # between threads): the claims wait for the same servers anyway.
    fork = st.servers.wait()[0]
    if fork is not None and local_run.unforkable(fork.ready):
        fork = None
    how = "forked from the fork server" if fork is not None else "in a fresh interpreter"
    say(f"doctor: probing the workload at a tiny shape on CPU beside the first claims ({how})")

    def probe() -> None:
        from ledger.conformance.probe import probe as run_probe

        try:
            _judge(run_probe(st.root, claims, box, fork, st.run_dir), say)
        except BaseException as e:  # the refusal, or the probe's own failure
            gate.judged(e)
        else:
            gate.judged()

    threading.Thread(target=probe, name="ledger-doctor-probe", daemon=True).start()
    return gate


def _judge(report: dict[str, Any], say: Callable[[str], None]) -> None:
    """The doctor's one-line summary, and a refusal when a required claim cannot be
    judged at all."""
    from ledger.conformance.probe import cannot_judge

    say(report["summary"])
    bad = {str(c["claim"]) for c in cannot_judge(report, required_only=True)}
    if bad:
        said = [ln for ln in report["lines"] if ln.split(":", 1)[0] in bad]
        raise UsageError(
            f"refused before any receipt was recorded: {len(bad)} required claim(s) cannot "
            "be judged: " + "; ".join(said)
        )
