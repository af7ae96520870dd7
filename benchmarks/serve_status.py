"""Status answers per second over HTTP for a repeated question, beside a bare
Starlette endpoint under the same uvicorn settings as the ceiling.

Each server runs in its own process (`ledger serve`, and a one-route
Starlette app through `ledger.service.run`'s uvicorn config); one client
process asks sequentially over one keep-alive connection. The ledger holds R
repositories sharing PR numbers; the asked PR's answer is computed once and
then served from memory while the log size is unchanged.

    python -m benchmarks.serve_status [--repos 1000] [--requests 2000]
        [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from ledger.write.ingest import init_ledger, record, register_key
from tests.ledger.factories import envelope

PG_URL = os.environ.get(
    "LEDGER_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ledger_test"
)
ROOT = Path(__file__).resolve().parents[1]
PR = 42
BARE = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from ledger.service.run import _config

async def status(request):
    return JSONResponse({"qualified": True, "claims": []}, headers={"Cache-Control": "no-store"})

app = Starlette(routes=[Route("/v1/status", status)])
uvicorn.Server(_config(app, "127.0.0.1", int(sys.argv[1]), True)).run()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"no server at {url}")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rate(url: str, params: dict[str, str], n: int, pid: int) -> tuple[float, float]:
    """(answers per wall second, answers per CPU second of the server process)."""
    with httpx.Client(timeout=30) as c:
        c.get(url, params=params).raise_for_status()  # the first answer is computed
        cpu0, t0 = _cpu_s(pid), time.perf_counter()
        for _ in range(n):
            c.get(url, params=params).raise_for_status()
        wall, cpu = time.perf_counter() - t0, _cpu_s(pid) - cpu0
        return n / wall, n / max(cpu, 1e-9)


def _ledger(url: str, keys: KeyDir, repos: int) -> None:
    init_ledger(url, keys)
    store = Store.open(url)
    runner = keys.create("runner")
    register_key(store, "runner", "runner", runner.public)
    envs = []
    for j in range(repos):
        head = hashlib.sha1(f"h{j}".encode(), usedforsecurity=False).hexdigest()
        src = {"repo": f"github.com/org/r{j:04d}", "commit": head, "tree": head}
        for claim in ("admission.no-oom-after-admit", "cleanup.complete"):
            envs.append(envelope(runner, claim=claim, source={**src, "dirty": False, "pr": PR}))
    for i in range(0, len(envs), 500):
        record(store, envs[i : i + 500])
    store.engine.dispose()


def _serve(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repos", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows: list[tuple[str, tuple[float, float]]] = []
    port = _port()
    bare = _serve([sys.executable, "-c", BARE, str(port)], env)
    try:
        _wait(f"http://127.0.0.1:{port}/v1/status")
        rows.append(
            (
                "bare Starlette endpoint (ceiling)",
                _rate(f"http://127.0.0.1:{port}/v1/status", {}, args.requests, bare.pid),
            )
        )
    finally:
        bare.terminate()
        bare.wait()
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    for b in backends:
        tmp = Path(tempfile.mkdtemp(prefix="ledger-serve-bench-"))
        keys = KeyDir(tmp / "keys")
        schema = None
        if b == "sqlite":
            url = f"sqlite:///{tmp / 'ledger.db'}"
        else:
            schema = (
                "bench_" + hashlib.sha1(str(tmp).encode(), usedforsecurity=False).hexdigest()[:8]
            )
            admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as c:
                c.execute(text(f"CREATE SCHEMA {schema}"))
            url = f"{PG_URL}?options=-csearch_path%3D{schema}"
        _ledger(url, keys, args.repos)
        port = _port()
        cmd = [sys.executable, "-m", "ledger", "serve", "--port", str(port), "--db", url]
        srv = _serve(cmd, {**env, "LEDGER_KEYS": str(keys.path)})
        try:
            base = f"http://127.0.0.1:{port}"
            _wait(base + "/healthz")
            q = {"repo": f"github.com/org/r{args.repos // 2:04d}", "pr": str(PR)}
            rows.append(
                (
                    f"{b}: GET /v1/status, answer kept",
                    _rate(base + "/v1/status", q, args.requests, srv.pid),
                )
            )
            rows.append(
                (
                    f"{b}: GET /healthz (one size lookup)",
                    _rate(base + "/healthz", {}, args.requests, srv.pid),
                )
            )
        finally:
            srv.terminate()
            srv.wait()
            if schema:
                with admin.connect() as c:
                    c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    print(
        f"\n{args.requests} sequential requests over one keep-alive connection;"
        f" {args.repos} repositories share PR #{PR} (2 receipts each)"
    )
    ceiling, ceiling_cpu = rows[0][1]
    print(
        f"{'endpoint':<44} {'answers/s':>10} {'/ ceiling':>10}"
        f" {'per server CPU-s':>17} {'/ ceiling':>10}"
    )
    for name, (rate, per_cpu) in rows:
        print(
            f"{name:<44} {rate:>10.0f} {rate / ceiling:>10.2f}"
            f" {per_cpu:>17.0f} {per_cpu / ceiling_cpu:>10.2f}"
        )
    print(
        "(answers per CPU second of the server process hold on a busy machine; wall rates do not)"
    )
    print("target: at least 500 status answers/s for a repeated question")


if __name__ == "__main__":
    main()
