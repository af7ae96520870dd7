"""A sandbox's pids cgroup and a claim's below it hold on either hierarchy.

cgroup v1's ``pids`` hierarchy, or a unified one (cgroup v2) whose parent hands this
process's cgroup the pids controller: there the sandbox's cgroup is made beside this
process's (which holds processes, so none of its children may take a controller),
the sandbox's own processes wait in a leaf of it and its claims' cgroups lie beside
the leaf. The same steps on each: the launcher's `limit_pids`, a claim's cgroup made
below (`ClaimPids.make`), a process of the sandbox moved there as the fork client
moves a claim, which then forks until refused at the claim's limit while the sandbox
keeps processes for the claim beside it, and finds itself in its claim's cgroup from
inside (`selftest.claim_pids`). A hierarchy this host does not offer Ledger is skipped,
with what it does offer (`scripts/device/cgroup_v2_probe.py` prints it on any host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.sandbox import pids
from ledger.sandbox.claimpids import ClaimPids
from ledger.sandbox.launcher import PIDS_LEAF, PIDS_PREFIX
from scripts.device.cgroup_v2_probe import offered

SANDBOX_MOST = 64

# The sandbox's first process: enters its pids cgroup as the launcher does, then, word
# by word: forks the claim's process (which waits to be moved, then forks until refused
# and holds what it forked), starts as many as it can itself (the claim beside), and at
# the end lets every process go and reaps it, so that the cgroups are empty when it exits.
SANDBOX = """
import json, os, sys
from ledger.sandbox.launcher import limit_pids
from ledger.sandbox.selftest import claim_pids

limit_pids(sys.argv[1], int(sys.argv[2]))


def fork_until_refused(most):
    r, w = os.pipe()
    held, why = 0, "never refused"
    try:
        while held < most:
            if os.fork() == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            held += 1
    except OSError as e:
        why = e.strerror
    os.close(r)
    return held, why, w


def let_go(w, held):
    os.close(w)
    for _ in range(held):
        os.wait()


def say(doc):
    sys.stdout.write(json.dumps(doc) + "\\n")
    sys.stdout.flush()


beside = None
for word in sys.stdin:
    word = word.strip()
    if word == "claim":
        go_r, go_w = os.pipe()
        end_r, end_w = os.pipe()
        claim = os.fork()
        if claim == 0:
            os.close(go_w)
            os.close(end_w)
            os.read(go_r, 1)  # moved into the claim's cgroup by now
            seen, why = claim_pids()
            held, refused, w = fork_until_refused(4 * int(sys.argv[2]))
            say({"seen": seen, "why": why, "held": held, "refused": refused})
            os.read(end_r, 1)
            let_go(w, held)
            os._exit(0)
        os.close(go_r)
        os.close(end_r)
        say({"claim": claim})
    elif word == "go":
        os.write(go_w, b"x")
    elif word == "beside":
        held, why, w = fork_until_refused(8)
        beside = (w, held)
        say({"beside": held, "why": why})
    elif word == "end":
        let_go(*beside)
        os.write(end_w, b"x")
        os.waitpid(claim, 0)
        break
"""


@pytest.fixture
def root() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("needs root (a pids cgroup is root's)")
    yield


@pytest.mark.parametrize("version", [1, 2])
def test_a_claims_cgroup_below_its_sandboxs_holds_on_this_hierarchy(
    version: int, root: None, tmp_path: Path
) -> None:
    under = pids.controller(version)
    if under is None:
        pytest.skip(f"no cgroup v{version} pids controller Ledger may write here: {offered()}")
    assert pids.kind(under) == f"cgroup v{version}"
    proc = subprocess.Popen(
        [sys.executable, "-c", SANDBOX, under, str(SANDBOX_MOST)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    assert proc.stdin is not None and proc.stdout is not None
    box = Path(under) / f"{PIDS_PREFIX}{proc.pid}"
    claim = None
    try:
        worker = int(_said(proc, "claim")["claim"])
        # Counted in the sandbox's own cgroup (v2: its leaf), held to its limit.
        assert pids.sandbox_of(pids.folder_of(proc.pid)) == box
        assert pids.unplaced(pids.folder_of(worker))
        if version == 2:
            assert pids.folder_of(proc.pid) == box / PIDS_LEAF
        assert pids.held(proc.pid) == SANDBOX_MOST
        claim = ClaimPids.make(proc.pid, 2)
        assert claim is not None and claim.path.parent == box
        assert claim.most == SANDBOX_MOST // 2
        # As the fork client moves a forked claim's process before it starts.
        (claim.path / "cgroup.procs").write_text(str(worker))
        assert pids.folder_of(worker) == claim.path and not pids.unplaced(claim.path)
        hog = _said(proc, "go")
        # From inside, the claim's process finds itself in its claim's cgroup.
        assert hog["why"] is None and str(hog["seen"]).endswith(claim.path.name), hog
        assert hog["refused"] == "Resource temporarily unavailable", hog
        assert int(str(hog["held"])) < SANDBOX_MOST // 2, hog
        # The claim beside still starts its eight.
        assert _said(proc, "beside") == {"beside": 8, "why": "never refused"}
        proc.stdin.write("end\n")
        proc.stdin.close()
        assert proc.wait() == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if claim is not None:
            claim.close()
    # Every process of it reaped: removed with what is below it.
    pids.release(under, proc.pid)
    assert not box.exists()


def _said(proc: subprocess.Popen[str], word: str) -> dict[str, object]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()
    doc: dict[str, object] = json.loads(proc.stdout.readline())
    return doc
