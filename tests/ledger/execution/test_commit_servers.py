"""A Ray worker's fork servers: one commit's at a time, its workload prepared once, real
servers in the real sandbox (no Ray needed: the worker's state is driven directly)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import git

from ledger.execution.claimrun import ClaimRun
from ledger.execution.ray_executor import bundle_revision
from ledger.execution.ray_worker import _Worker
from ledger.sandbox import resolve
from tests.ledger.probe_repo import claim, make_probe_repo


def test_a_worker_serves_one_commit_at_a_time_with_its_workload_prepared(
    tmp_path: Path,
) -> None:
    from ledger.execution.checkouts import Checkouts

    repo = make_probe_repo(tmp_path / "repo", claim("x"))
    r = git.Repo(repo)
    base = r.head.commit
    (repo / "more.py").write_text("X = 1\n")
    r.index.add(["more.py"])
    head = r.index.commit("more")
    bundle = bundle_revision(r, [head.hexsha, base.hexsha])
    box = resolve("auto")
    # Short, as a worker's own folder is: a socket's path has room for 107 bytes.
    home = Path(tempfile.mkdtemp(prefix="lw-"))
    (home / "code").mkdir()
    (home / "work").mkdir()
    worker = _Worker((box.mode, ()), home, Checkouts(home / "code" / "shipped"))
    run = ClaimRun(index=1, claim="x", check="cleanup", workload_ref="probe_wl:make_workload",
                   workload_params={"mode": "plain"}, timeout_s=60, device="cpu")  # fmt: skip
    try:
        # The base commit's claim: its server imports the plan's preload list and
        # prepares the workload, once.
        first = worker.checkouts.get(bundle, [base.hexsha], base.tree.hexsha).roots[base.hexsha]
        # What the worker does meanwhile (its own imports) runs once the server is
        # launched (its process is there), before it is waited for.
        seen: list[list[int]] = []
        one, launched = worker.servers_for(
            [first], run, ["wave"], box, meanwhile=lambda: seen.append(_fork_servers())
        )
        server = one.of(first)
        assert launched and server is not None
        assert len(seen) == 1 and seen[0], seen
        assert server.ready["prepared"] == ["probe_wl:make_workload"]
        assert "wave" in server.ready["modules"]
        again, launched = worker.servers_for(
            [first], run, ["wave"], box, meanwhile=lambda: seen.append(_fork_servers())
        )
        assert again is one and not launched  # the next claim of that commit reuses it
        assert len(seen) == 1  # ... and has nothing to do meanwhile
        # A claim of another commit (which compares against its base): the first commit's
        # server is stopped and its folder removed before the new ones start, and both
        # of the new commit's trees get a server, writing one folder, named to the claim.
        shipped = worker.checkouts.get(bundle, [head.hexsha, base.hexsha], head.tree.hexsha)
        roots = [shipped.roots[head.hexsha], shipped.roots[base.hexsha]]
        two, launched = worker.servers_for(roots, run, [], box)
        assert launched and two is not one
        assert server.proc.poll() is not None and not one.work.exists()
        assert set(two.sockets()) == {str(p) for p in roots}
        assert json.loads(two.env()["LEDGER_FORK_SERVERS"]) == dict(two.sockets())
        assert all(two.work in Path(s).parents for s in two.sockets().values())
        procs = [s.proc for s in two.servers.values() if s is not None]
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    finally:
        worker.close()
    assert all(p.poll() is not None for p in procs) and not home.exists()


def _fork_servers() -> list[int]:
    """This process's descendants launched to run a fork server: the server, or its
    sandbox's processes (bubblewrap's, until the server's interpreter starts in it)."""
    import os

    from runners.harness.processes import descendants

    out = []
    for pid in descendants(os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"runners.fork.forkserver" in argv:
            out.append(pid)
    return out
