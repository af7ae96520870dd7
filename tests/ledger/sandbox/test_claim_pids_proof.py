"""A forked claim proves its own process limit from inside before its code runs.

The claim process reads which pids cgroup it is counted in
(`ledger.sandbox.selftest.claim_pids`) and tells its client over the connection no
code of the claim's holds; the receipt says what it found. A claim its client did not
move into the cgroup made for it (here: a client that skips the move, as a write that
silently did nothing would) finds itself in the sandbox's own cgroup: not proved, it
runs none of its code forked, and starts afresh in a sandbox of its own, whose limit
holds it; its receipt says the limit per claim was not proved, and claims none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.sandbox import find_bwrap, pids
from ledger.sandbox.launcher import CLAIM_PIDS_PREFIX
from ledger.sandbox.selftest import CLAIM_PREFIX, claim_pids
from runners.contract import forkwire
from tests.ledger.helpers import run
from tests.ledger.probe_repo import PROBE, claim, make_probe_repo, notes

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or (find_bwrap() is None and os.environ.get("CI") != "true"),
    reason="needs root (a pids cgroup is root's) and bubblewrap",
)


def test_the_self_test_names_the_claims_prefix_and_reads_this_process() -> None:
    assert CLAIM_PREFIX == CLAIM_PIDS_PREFIX
    seen, why = claim_pids()
    # This test's own process is in no claim's cgroup.
    assert why is not None and not seen.endswith(CLAIM_PREFIX), (seen, why)


def _environment(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, str]:
    shown = json.loads(run(capsys, "show", rid, "--json").out)
    return dict(shown["statement"]["predicate"]["runner"]["environment"])


@needs_root
def test_a_claim_counted_in_its_own_cgroup_says_it_proved_it(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if pids.controller() is None:
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    repo = make_probe_repo(tmp_path / "repo", claim("a.passes"))
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed", r.err
    env = _environment(capsys, rec["id"])
    most = env["sandbox_claim_pids"].split()[1]
    proof = env["sandbox_claim_pids_proof"]
    assert proof.startswith(
        "proved from inside before its code ran: the claim process was counted in pids "
        f"cgroup {CLAIM_PIDS_PREFIX}"
    ), proof
    assert proof.endswith(f", pids.max {most} as the host read it"), proof


@needs_root
def test_a_claim_not_moved_into_its_cgroup_is_not_proved_and_runs_none_of_its_code_forked(
    tmp_path: Path,
    ledger_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if pids.controller() is None:
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    # Every claim's client is the one that skips the move.
    monkeypatch.setattr(forkwire, "CLIENT_MODULE", "tests.ledger.sandbox.unmoved_client")
    repo = make_probe_repo(tmp_path / "repo", claim("a.passes"))
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed", r.err
    # Refused from inside before any of its code ran; then run in a sandbox of its own.
    assert "its process limit per claim does not hold" in r.err, r.err[-3000:]
    assert "started afresh" in r.err
    env = _environment(capsys, rec["id"])
    assert "sandbox_claim_pids" not in env, env
    proof = env["sandbox_claim_pids_proof"]
    assert proof.startswith(
        "not proved: its process limit per claim does not hold: counted in pids cgroup /,"
        " not a claim's own"
    ), proof
    assert proof.endswith("; it ran none of its code forked"), proof


ESCAPE = (
    PROBE
    + """
import shutil
import subprocess
import tempfile


class Escape(Probe):
    def setup(self, device, seed):
        if self.mode == "escape":
            # The claim's own code asks the fork server for a process, through a client
            # that names no placer: once counted in the sandbox's own cgroup, beside
            # every claim's limit.
            servers = json.loads(os.environ.get("LEDGER_FORK_SERVERS") or "{}")
            env = {k: v for k, v in os.environ.items() if k != "LEDGER_CLAIM_PLACER"}
            here = tempfile.mkdtemp()
            req = os.path.join(here, "escape.json")
            with open(req, "w") as f:
                f.write("{}")
            done = subprocess.run(
                [sys.executable, "-m", "runners.fork.forkclient", next(iter(servers.values())),
                 "tests.ledger.sandbox.pids_seen", req, req + ".out"],
                env=env, capture_output=True, text=True,
            )
            shutil.rmtree(here)
            _note(event="escape", out=done.stdout.strip(), rc=done.returncode)
        super().setup(device, seed)


def make_workload(mode="plain"):
    return Escape(mode)
"""
)


@needs_root
def test_claim_code_that_asks_the_fork_server_itself_gets_no_process_beside_its_limit(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if pids.controller() is None:
        pytest.skip("no cgroup v1 pids controller here: the receipt says there is no limit")
    repo = make_probe_repo(tmp_path / "repo", claim("a.escape", "escape"), source=ESCAPE)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed", r.err
    [escape] = [n for n in notes(r.err) if n.get("event") == "escape"]
    # Refused from inside (counted in no claim's cgroup), it ran in its own client,
    # a process of the claim's: counted in the claim's cgroup.
    assert escape["rc"] == 0, escape
    assert str(escape["out"]).startswith(f"pids cgroup /{CLAIM_PIDS_PREFIX}"), escape
