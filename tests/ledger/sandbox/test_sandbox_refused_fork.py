"""A pull request that makes the fork server refuse to fork must not get its code run
outside the sandbox.

The fork client runs beside the qualifier, outside the sandbox; the fork server
inside it forks each claim. A workload module that starts a thread when imported (in
the server, which imports it once) makes every fork unsafe, so the server refuses.
The client once ran the claim itself then, unsandboxed: the pull request's `setup`
read the runner's private key. Now a server that said at ready it will not fork is
not asked, and each claim starts afresh inside the sandbox; a server that refuses
after ready has its claim started afresh too (tests/runners/fork/test_fork_refusal_restart.py),
and its client never runs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ledger.sandbox import find_bwrap
from runners.fork import forkclient
from tests.ledger.helpers import run
from tests.ledger.probe_repo import PROBE, claim, make_probe_repo

pytestmark = pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)

ATTACK = (
    PROBE
    + """
import glob
import threading

# Started at import: the fork server that imports this module may not fork.
threading.Thread(target=threading.Event().wait, name="poller", daemon=True).start()


class Attack(Probe):
    def setup(self, device, seed):
        stolen = []
        for path in glob.glob(@KEYS@ + "/*.pem"):
            try:
                stolen.append(open(path).read().splitlines()[0])
            except OSError:
                pass
        procs = len([p for p in os.listdir("/proc") if p.isdigit()])
        print("\\x1eprogress attack " + json.dumps({"stolen": stolen, "procs": procs}),
              file=sys.stderr, flush=True)
        super().setup(device, seed)


def make_workload(mode="plain"):
    return Attack(mode)
"""
)


def _seen(err: str) -> list[dict[str, object]]:
    return [json.loads(x.split("attack ", 1)[1]) for x in err.splitlines() if "attack {" in x]


def test_a_refused_fork_never_runs_the_claim_outside_the_sandbox(
    tmp_path: Path, ledger_env: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert list(key_dir.glob("*.pem"))
    attack = ATTACK.replace("@KEYS@", repr(str(key_dir)))
    repo = make_probe_repo(tmp_path / "repo", claim("cleanup.all-released"), source=attack)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--json")
    assert "claims cannot be forked from it" in r.err and "poller" in r.err, r.err
    seen = _seen(r.err)
    assert seen, r.err  # the workload's setup ran ...
    assert all(s["stolen"] == [] for s in seen), seen  # ... and read no key
    assert all(isinstance(s["procs"], int) and s["procs"] < 10 for s in seen), seen
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed"
    # Not forked: it ran in a sandbox of its own, held to that sandbox's process limit
    # alone, and its receipt names no limit per forked claim.
    shown = json.loads(run(capsys, "show", rec["id"], "--json").out)
    env = shown["statement"]["predicate"]["runner"]["environment"]
    assert "sandbox_pids" in env and "sandbox_claim_pids" not in env, env
    # The control: unsandboxed, the same setup reads the key (the probe works).
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--sandbox", "none")
    assert any(s["stolen"] for s in _seen(r.err)), r.err


def test_a_strict_client_that_is_refused_says_so_and_runs_nothing(tmp_path: Path) -> None:
    # A server socket that refuses every fork, as a fork server does after ready when
    # a thread appeared in it.
    import socket
    import subprocess
    import sys
    import threading

    sock_path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)

    def refuse() -> None:
        conn, _ = server.accept()
        _, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        conn.sendall(b'{"refused": "the fork server runs 2 threads (poller)"}\n')
        for fd in fds:
            os.close(fd)
        conn.close()

    t = threading.Thread(target=refuse)
    t.start()
    marker = tmp_path / "ran"
    module = tmp_path / "would_run.py"
    module.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    result = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "runners.fork.forkclient", str(sock_path), "would_run", "req",
         str(result)],
        env={**os.environ, forkclient.STRICT_VAR: "1", "PYTHONPATH": f"{tmp_path}:{os.getcwd()}"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    t.join()
    assert done.returncode == forkclient.REFUSED, done.stderr
    assert not marker.exists()
    assert "poller" in Path(f"{result}.refused").read_text()
