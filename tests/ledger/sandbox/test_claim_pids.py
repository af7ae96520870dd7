"""One claim never starves the claim beside it of processes.

Claims forked from the fork server share its sandbox, and so the sandbox's pids
cgroup: a claim that forked until refused once took every process the claims beside
it had left. Each forked claim now has a pids cgroup of its own below the sandbox's,
entered before its code runs; the sandbox's limit still bounds them together.

Two claims side by side (``--gpus 0,1``, logical devices on this CPU host): one forks
until refused and holds what it forked; the other, once told so, starts eight
processes of its own. They meet over an abstract Unix socket (the fork server's
sandbox has one network namespace for all its claims).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.sandbox import find_bwrap, pids
from tests.ledger.helpers import run
from tests.ledger.probe_repo import PROBE, claim, make_probe_repo, notes

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or (find_bwrap() is None and os.environ.get("CI") != "true"),
    reason="needs root (a pids cgroup is root's) and bubblewrap",
)

SANDBOX_MOST = 256

SIDE_BY_SIDE = (
    PROBE
    + '''
import socket

_BESIDE = b"\\0ledger-test-claim-pids-" + @TOKEN@


def _meet():
    """The two claims' one connection, whichever starts first: the first to bind the
    name listens and waits for the other; the other connects (refused only in the moment
    between the first one's bind and listen)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(_BESIDE)
    except OSError:
        srv.close()
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(_BESIDE)
                return conn
            except ConnectionRefusedError:
                conn.close()
    srv.listen(1)
    conn, _ = srv.accept()
    return conn


def _hog():
    """Fork until refused, holding every child, until the claim beside has started its own."""
    conn = _meet()
    r, w = os.pipe()
    held, why = 0, "never refused"
    try:
        while held < 4096:
            if os.fork() == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            held += 1
    except OSError as e:
        why = e.strerror
    _note(event="hog", held=held, why=why)
    # Told the claim beside too: an arm's own notes go to its log, not the progress lines.
    conn.sendall(json.dumps({"held": held, "why": why}).encode() + b"\\n")
    conn.recv(1)  # the claim beside is done
    os.close(w)
    for _ in range(held):
        os.wait()


def _beside():
    """Once the claim beside is at its limit, start eight processes."""
    conn = _meet()
    hog = json.loads(conn.makefile("r").readline())
    r, w = os.pipe()
    started, why = 0, ""
    try:
        for _ in range(8):
            if os.fork() == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            started += 1
    except OSError as e:
        why = e.strerror
    os.close(w)
    for _ in range(started):
        os.wait()
    _note(event="beside", started=started, why=why, hog=hog)
    conn.sendall(b"y")


class SideBySide(Probe):
    def setup(self, device, seed):
        {"hog": _hog, "beside": _beside}.get(self.mode, lambda: None)()
        super().setup(device, seed)

    def forward(self, batch, *, grad):
        # In gradient-compare's base arm only (``python -m runners.checks.grad_arm
        # .../base/spec.json RESULT``; its setup is a copy of the fork server's): hog there.
        arm = os.path.basename(os.path.dirname(sys.argv[1])) if len(sys.argv) > 1 else ""
        if self.mode == "arm-hog" and "grad_arm" in sys.argv[0] and arm == "base":
            self.mode = "plain"
            _hog()
        return super().forward(batch, grad=grad)


def make_workload(mode="plain"):
    return SideBySide(mode)
'''
)


def test_a_claim_that_forks_until_refused_leaves_the_claim_beside_it_its_processes(
    tmp_path: Path,
    ledger_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if pids.controller() is None:
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    monkeypatch.setenv(pids.MOST_VAR, str(SANDBOX_MOST))
    source = SIDE_BY_SIDE.replace("@TOKEN@", repr(os.urandom(6).hex().encode()))
    plan = claim("a.hog", "hog") + claim("b.beside", "beside")
    repo = make_probe_repo(tmp_path / "repo", plan, source=source)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0,1", "--json")
    seen = {str(n["event"]): n for n in notes(r.err) if n.get("event") in ("hog", "beside")}
    # The claim beside started its eight, though the other had forked until refused.
    assert seen["beside"]["started"] == 8, seen
    assert seen["hog"]["why"] == "Resource temporarily unavailable", seen
    per_claim = SANDBOX_MOST // 2
    assert int(str(seen["hog"]["held"])) < per_claim, seen
    receipts = json.loads(r.out)["receipts"]
    assert {x["claim"]: x["outcome"] for x in receipts} == {"a.hog": "passed", "b.beside": "passed"}
    for x in receipts:
        shown = json.loads(run(capsys, "show", x["id"], "--json").out)
        env = shown["statement"]["predicate"]["runner"]["environment"]
        assert env["sandbox_claim_pids"] == (
            f"pids.max {per_claim} per claim (a child of the sandbox's pids cgroup,"
            f" whose {SANDBOX_MOST} bound the claims together; 2 at once)"
        ), env


GRADIENT_HOG = """[[claims]]
name = "a.arm-hog"
check = "gradient-compare"
params = { batch = 1, seq = 8 }
workload_params = { mode = "arm-hog" }
"""


def test_an_arm_forked_from_the_fork_server_is_held_to_its_claims_limit(
    tmp_path: Path,
    ledger_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """gradient-compare's arms fork from the fork server, whose child each is: once
    counted in the sandbox's own pids cgroup, where the arm that forked until refused
    took the processes of the claim beside it. Each is placed in its claim's now."""
    if pids.controller() is None:
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    monkeypatch.setenv(pids.MOST_VAR, str(SANDBOX_MOST))
    source = SIDE_BY_SIDE.replace("@TOKEN@", repr(os.urandom(6).hex().encode()))
    plan = GRADIENT_HOG + claim("b.beside", "beside")
    repo = make_probe_repo(tmp_path / "repo", plan, source=source)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0,1", "--json")
    arms = [x for x in r.err.splitlines() if "gradient arm " in x]
    assert arms and all("forked from its tree's fork server" in x for x in arms), r.err[-3000:]
    [beside] = [n for n in notes(r.err) if n.get("event") == "beside"]
    hog = beside["hog"]
    assert isinstance(hog, dict) and hog["why"] == "Resource temporarily unavailable", beside
    assert int(str(hog["held"])) < SANDBOX_MOST // 2, beside
    # The claim beside started its eight, though the arm had forked until refused.
    assert beside["started"] == 8, beside
    receipts = json.loads(r.out)["receipts"]
    outcomes = {x["claim"]: x["outcome"] for x in receipts}
    assert outcomes["b.beside"] == "passed", r.err[-3000:]
    [hog] = [x for x in receipts if x["claim"] == "a.arm-hog"]
    shown = json.loads(run(capsys, "show", hog["id"], "--json").out)
    env = shown["statement"]["predicate"]["runner"]["environment"]
    assert env["sandbox_claim_pids"].startswith(f"pids.max {SANDBOX_MOST // 2} per claim"), env
    # Every arm (base, candidate, reference, base_repeat) was placed in the claim's.
    proof = env["sandbox_claim_pids_proof"]
    assert proof.startswith("proved from inside before its code ran"), proof
    assert f"; {len(arms)} process(es) it started forked from a fork server placed" in proof
