"""The fork server never forks from a threaded process: torch is imported with one
OpenMP thread (no idle pool whose state or held lock a child would inherit), so the
server is one thread when it forks, with transformers and peft loaded and a model
prepared; each claim still computes on the machine's threads. The one thread a fork
may leave behind is jemalloc's background purger (`FORK_SAFE_THREADS`: jemalloc's own
atfork handlers hold every lock it takes across the fork); any other thread refuses
every fork, and the server names who started it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.execution.local_run import unforkable
from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.fork.forkparent import ForkServer
from runners.fork.forksafety import FORK_SAFE_THREADS
from runners.harness.child import env

ROOT = Path(__file__).resolve().parents[3]
OMP = "tests.runners.fork.omp_workload:make_workload"
THREAD = "tests.runners.fork.thread_workload:make_workload"
JEMALLOC = next(
    (
        p
        for p in (
            "/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        )
        if os.path.exists(p)
    ),
    None,
)
TINY = {"d_model": 32, "n_layers": 1, "n_experts": 4, "d_ff": 32, "vocab": 64}


def _tasks(pid: int) -> list[str]:
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            out.append(f.read().strip())
    return out


def test_the_server_is_one_thread_when_it_forks() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: torch starts no thread pool anyway")
    modules = [m for m in ("transformers", "peft") if _importable(m)]
    child_env = {k: v for k, v in env().items() if k != "OMP_NUM_THREADS"}
    s = ForkServer.launch(
        [(str(ROOT), OMP)], child_env, modules=modules, prepare=[(str(ROOT), OMP, TINY)]
    ).wait()
    try:
        assert s.ready["prepared"] == [OMP]  # a parallel region ran in the server
        assert not s.ready["modules_failed"]
        # Seen by the server itself at ready, and from outside while it serves.
        assert len(_tasks(s.proc.pid)) == 1, _tasks(s.proc.pid)
        assert len(s.ready["threads"]) == 1, s.ready["threads"]
        assert s.ready["claim_threads"] >= 1
        _claim(s, OMP)  # passes (asserted there)
        assert len(_tasks(s.proc.pid)) == 1  # a claim's threads stay in the claim
    finally:
        s.close()


def _claim(s: ForkServer, ref: str) -> tuple[str, dict[str, int]]:
    """The cleanup claim on ``ref`` through server ``s``: its outcome (asserted passed)
    and its timeline."""
    [r] = run_claim_isolated(
        ClaimRequest(
            Claim(
                claim="t.cleanup",
                check="cleanup",
                params={"batch": 1, "seq": 8},
                workload_ref=ref,
                workload_params=TINY,
                device="cpu",
                observer_off=False,
                timeout_s=120,
            ),
            repo_root=ROOT,
            base_root=None,
            artifact_dir=None,
        ),
        progress=lambda _m: None,
        fork_server=s,
    )
    assert r.outcome == "passed", r.reason
    return r.outcome, r.measurements["claim_timeline_ns"]


@pytest.mark.skipif(
    JEMALLOC is None, reason="libjemalloc2 is not installed (.ci/lib.sh installs it)"
)
def test_jemallocs_background_thread_does_not_refuse_forks() -> None:
    # A Python preloaded with jemalloc and background_thread:true, as on the H200 hosts:
    # its purger thread runs from the first allocation, before torch is imported.
    assert JEMALLOC is not None
    jemalloc = {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "background_thread:true"}
    s = ForkServer.launch([(str(ROOT), OMP)], {**env(), **jemalloc}).wait()
    try:
        assert "jemalloc_bg_thd" in s.ready["threads"], s.ready["threads"]
        assert "jemalloc_bg_thd" in FORK_SAFE_THREADS
        assert s.ready["fork_refused"] is None
        assert unforkable(s.ready) is None
        _, line = _claim(s, OMP)
        assert "forked" in line  # forked from the server, not a fresh interpreter
    finally:
        s.close()


def test_any_other_thread_refuses_every_fork_and_is_named() -> None:
    s = ForkServer.launch([(str(ROOT), THREAD)], env()).wait()
    try:
        why = unforkable(s.ready)
        assert why is not None
        assert "poller" in why
        source = (ROOT / "tests/runners/fork/thread_workload.py").read_text().splitlines()
        at = next(i for i, ln in enumerate(source, 1) if ln.startswith("threading.Thread("))
        assert f"thread_workload.py:{at} in <module>" in why  # who started it, and where
        # Still judged: the claim runs in a fresh interpreter instead.
        _, line = _claim(s, THREAD)
        assert "forked" not in line
    finally:
        s.close()


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_a_thread_named_like_jemallocs_counts_only_beside_jemalloc() -> None:
    # Without jemalloc mapped (this interpreter), the name alone allows nothing.
    from runners.fork import forksafety

    holds = [p for p in forksafety._mapped_files() if forksafety._holds(p, b"jemalloc_bg_thd")]
    assert forksafety._fork_safe("jemalloc_bg_thd") is bool(holds)
    assert forksafety._fork_safe("poller") is False


@pytest.mark.skipif(
    JEMALLOC is None, reason="libjemalloc2 is not installed (.ci/lib.sh installs it)"
)
def test_jemalloc_is_found_by_its_code_not_by_its_file_name(tmp_path: Path) -> None:
    # Linked into a library of another name (as a Rust extension links it statically):
    # the marker is found in the mapped file, whatever it is called.
    assert JEMALLOC is not None
    renamed = tmp_path / "_native_ext.cpython-311-x86_64-linux-gnu.so"
    renamed.write_bytes(Path(JEMALLOC).read_bytes())
    code = (
        "import sys; from runners.fork import forksafety as f; "
        "print(f._fork_safe('jemalloc_bg_thd'), "
        "any('jemalloc' in p for p in f._mapped_files() if p != sys.argv[1]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(renamed)],
        env={**os.environ, "LD_PRELOAD": str(renamed)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "False"]
