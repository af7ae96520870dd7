"""What a standing Ray cluster costs `ledger qualify --executor ray`, per job and per
claim, beside a local run.

A user (or a CI job) runs `ledger qualify` as a process of its own, so each run is
a new Ray job on the cluster; Ray keeps workers per job, so every run's workers
start afresh: they import torch and the ledger, unpack the commit and start the
commit's fork servers before the first claim. This script starts one standing
local cluster (`ray start --head`, its own temporary folder, stopped by process
group at the end), a ledger server, and times, in turns, `ledger qualify`
processes with 1 and with K claims (regression-24view, the reference MoE on CPU),
locally (one claim after another) and through the cluster. Each way's cost is the
line through its two medians: per claim = (t(K) - t(1)) / (K - 1), per job =
t(1) - per claim.

    python benchmarks/ray_standing.py [--claims 3] [--repeat 2] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.example_repo import make_example_repo  # noqa: E402

CLAIM = """
[[claims]]
name = "bench.{i}"
check = "regression-24view"
params = {{ views = 24, seq = 32 }}
"""
LEDGER = [sys.executable, "-m", "ledger"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ledger(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([*LEDGER, *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


@contextlib.contextmanager
def _standing(work: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """A ledger server and a standing one-node Ray cluster (4 CPUs, 2 logical GPUs)
    whose workers hold the runner key; yields (ray address, server URL, the env a
    qualify process runs with)."""
    from ledger.evidence.keys import KeyDir
    from ledger.service.run import start

    db = f"sqlite:///{work / 'server.db'}"
    env = {**os.environ, "LEDGER_DB": db, "LEDGER_KEYS": str(work / "keys")}
    worker = {**env, "LEDGER_KEYS": str(work / "worker-keys")}
    _ledger(env, "init")
    _ledger(worker, "keys", "new", "worker", "--role", "runner")
    (work / "worker.pem").write_text(_ledger(worker, "keys", "export", "worker"))
    _ledger(env, "keys", "add", str(work / "worker.pem"), "--name", "worker", "--role", "runner")
    srv = start(db, KeyDir(work / "keys"))
    port = _free_port()
    # Workers inherit the head's environment: the worker key, an outbox of their own.
    head_env = {**worker, "LEDGER_OUTBOX": str(work / "worker-outbox")}
    temp = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))  # short: Ray's socket paths
    head = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
         f"--port={port}", "--num-cpus=4", "--num-gpus=2", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        env=head_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        _wait_up(address, env)
        yield address, srv.url, env
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)  # the group this script started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        srv.stop()


def _wait_up(address: str, env: dict[str, str]) -> None:
    """Until a driver can join the cluster (`ray status` answers), at most 2 minutes."""
    ray = str(Path(sys.executable).with_name("ray"))
    for _ in range(120):
        done = subprocess.run(
            [ray, "status", f"--address={address}"], env=env, capture_output=True, text=True
        )
        if done.returncode == 0:
            return
        time.sleep(1)  # polling an external service's start, not synchronising a test
    raise RuntimeError(f"the Ray head at {address} did not come up")


def _qualify(env: dict[str, str], repo: Path, plan: Path, extra: list[str]) -> dict[str, Any]:
    argv = [*LEDGER, "qualify", "--rev", "HEAD", "--repo", str(repo), "--plan", str(plan),
            *extra, "--json"]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    start = done.stdout.find("{")
    outcomes: list[str] = []
    with contextlib.suppress(ValueError):
        doc, _ = json.JSONDecoder().raw_decode(done.stdout[start:])
        outcomes = sorted(x["outcome"] for x in doc["receipts"])
    return {
        "wall_s": wall,
        "exit": done.returncode,
        "outcomes": outcomes,
        "workers": len(set(re.findall(r"worker pid (\d+)\)", done.stderr))),
        "unpacked": done.stderr.count("(unpacked here)"),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=3, help="K, the larger run (>= 2)")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per way and size")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    k = max(2, a.claims)
    with tempfile.TemporaryDirectory(prefix="ledger-bench-ray-") as d:
        base = Path(d)
        repo = make_example_repo(base / "repo", with_remote=False).path
        plans = {}
        for n in (1, k):
            plans[n] = base / f"plan-{n}.toml"
            plans[n].write_text(
                'workload = "model.workload:make_workload"\n'
                "[workload_params]\nd_model = 64\nn_layers = 2\n"
                + "".join(CLAIM.format(i=i) for i in range(n))
            )
        local_env = {**os.environ, "LEDGER_DB": f"sqlite:///{base / 'local.db'}",
                     "LEDGER_KEYS": str(base / "local-keys")}  # fmt: skip
        _ledger(local_env, "init")
        _ledger(local_env, "keys", "new", "runner", "--role", "runner")
        (base / "ray").mkdir()
        with _standing(base / "ray") as (address, url, ray_env):
            ray_extra = ["--executor", "ray", "--ray-address", address, "--server", url,
                         "--key", "worker"]  # fmt: skip
            ways = {"local": (local_env, []), "ray (standing cluster)": (ray_env, ray_extra)}
            # A warm-up of each: the page cache, bytecode, the cluster's own first job.
            for env, extra in ways.values():
                _qualify(env, repo, plans[1], extra)
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for r in range(max(1, a.repeat)):
                order = [(w, n) for w in ways for n in (1, k)]
                for w, n in order if r % 2 == 0 else order[::-1]:
                    env, extra = ways[w]
                    runs.setdefault((w, n), []).append(_qualify(env, repo, plans[n], extra))
                    got = runs[(w, n)][-1]
                    print(f"  round {r + 1}: {w}, {n} claim(s): {got['wall_s']:.1f} s "
                          f"(exit {got['exit']})", file=sys.stderr)  # fmt: skip
    out: dict[str, Any] = {"claims": k, "cpus": os.cpu_count(), "ways": {}}
    for w in ways:
        t1 = statistics.median(x["wall_s"] for x in runs[(w, 1)])
        tk = statistics.median(x["wall_s"] for x in runs[(w, k)])
        per_claim = (tk - t1) / (k - 1)
        out["ways"][w] = {
            "t1_s": t1,
            "tk_s": tk,
            "per_claim_s": per_claim,
            "per_job_s": t1 - per_claim,
            "runs": {str(n): runs[(w, n)] for n in (1, k)},
        }
    if a.json:
        print(json.dumps(out, indent=2))
        return out
    print(f"`ledger qualify` processes, 1 and {k} claims (regression-24view, reference MoE "
          f"on CPU), {os.cpu_count()} CPUs; median of {a.repeat}")  # fmt: skip
    print(f"{'way':24} {'1 claim s':>10} {f'{k} claims s':>11} {'per job s':>10} "
          f"{'per claim s':>12}  outcomes")  # fmt: skip
    for w, f in out["ways"].items():
        outs = sorted({o for rs in f["runs"].values() for x in rs for o in x["outcomes"]})
        print(f"{w:24} {f['t1_s']:10.1f} {f['tk_s']:11.1f} {f['per_job_s']:10.1f} "
              f"{f['per_claim_s']:12.1f}  {','.join(outs) or '-'}")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
