"""Run one claim in a child process, from the parent's side: launch, wait, read.

A check can leave the CUDA context unusable (after an out-of-memory at the
edge of the device, a sticky "unknown error" fails every later kernel in
the process). Running each claim in its own process keeps one check's broken
context from turning the next checks into false failures, and gives every
claim the same cold start. The child is a resource the parent owns: it is
reaped, its process group is ended on Ctrl-C, and its exit is recorded in the
cleanup proof of every result it produced. This module runs the three steps, each
in a module of its own: the launch (`claim_launch.py`), the wait (`claim_wait.py`)
and the reading of how each rank ended (`claim_read.py`); a fork the server refused
late starts the claim afresh.

    python -m runners.rank REQUEST.json RESULT.json   (the child side, `runners.rank`)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from runners.claim.authors import stamp
from runners.claim.claim_launch import launch
from runners.claim.claim_read import read
from runners.claim.claim_wait import wait
from runners.contract.request import ClaimRequest
from runners.contract.result import CheckResult, Stamped, untrusted
from runners.fork.forkparent import ForkServer
from runners.harness import child

if TYPE_CHECKING:
    from ledger.sandbox import Sandbox

__all__ = ["AFRESH", "ClaimRequest", "run_claim_isolated"]


def run_claim_isolated(
    request: ClaimRequest,
    *,
    progress: Callable[[str], None],
    fork_server: ForkServer | None = None,
    sandbox: Sandbox | None = None,
    cancel: threading.Event | None = None,
) -> list[Stamped]:
    """`runners.api.run_claim` in fresh child processes, one per rank; its results, with
    the host's facts stamped on them once, here (`ClaimRequest.stamp`: the host's
    observation, the ``sandbox`` facet, the claim's network and profile).

    All ranks form one process group: on the request's ``timeout_s`` it is killed and
    the one result is a failure "timed out after N s". A rank that dies without results
    (a crash, a signal) ends the claim: the others are stopped, and the result names
    the rank and how it ended. With ``world_size`` > 1 the ranks' results are merged
    per check (`runners.claim.ranks.merge_ranks`). With a ``fork_server`` a single-rank
    claim's process is forked from it (imports already paid) instead of started as a
    new interpreter: still a new process, in the claim's process group, inside the
    server's sandbox. Otherwise each rank starts inside ``sandbox`` (None:
    unsandboxed). ``cancel`` set stops the claim (`runners.harness.launch.Cancelled`
    after its processes are ended).

    Three steps, each once: launch (`claim_launch.launch`: the folder, the requests, the
    sandbox), wait (`claim_wait.wait`: the ranks run and are stopped) and read
    (`claim_read.read`: each rank's result file read once, into results with their exit
    proof); then the stamp.
    """
    facet = sandbox.facet if sandbox is not None else "none"
    ran = _run(request, progress, fork_server, sandbox, cancel)
    if isinstance(ran, CheckResult):
        # The host's own result: the claim never started.
        return stamp(request, [ran], facet, claims_word=False)
    results, window = ran
    return stamp(request, results, facet, window)


def _run(
    request: ClaimRequest,
    progress: Callable[[str], None],
    fork_server: ForkServer | None,
    sandbox: Sandbox | None,
    cancel: threading.Event | None,
) -> CheckResult | tuple[list[CheckResult], tuple[int, int]]:
    """The claim's results as read, and when it was launched and seen to exit; or the
    host's own infra-error where it never started."""
    if fork_server is not None and fork_server.ready.fork_refused:
        # It said at ready that it will not fork (`runners.fork.forksafety`): its client runs
        # outside the sandbox and never runs a claim itself, so start afresh inside it.
        fork_server = None
    while True:
        launched = launch(request, fork_server, sandbox)
        if isinstance(launched, CheckResult):
            return launched
        try:
            ran = wait(request, launched, progress, cancel)
            late = launched.refused(ran.group)
            if late is None:
                return read(request, launched, ran, progress, fork_server)
        finally:
            launched.close()
        # The claim's code never ran in this attempt: it starts afresh in a sandbox of
        # its own, as after a refusal at ready.
        progress(f"the fork server refused the claim ({untrusted(late)}): {AFRESH}")
        fork_server = None


AFRESH = "started afresh"
"""How a claim the fork server refused ends its progress line: it runs in a sandbox of
its own from then on."""


if __name__ == "__main__":
    # The claim process's name before it had a room of its own (`runners.rank`): a
    # client that names it is served the same request, the same way.
    from runners.rank.serve import serve

    sys.exit(child.serve(serve))
