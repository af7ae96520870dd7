"""What abusive clients cost `ledger serve`: other clients' latency while one
client holds 300 idle or trickling sockets (guarded, beside the same server
with the per-client cap and header deadline lifted), and what a crafted memory
snapshot costs (first view in the worker, cached views, the bounded reader).

    python benchmarks/abuse.py [--sockets 300] [--requests 20]
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import socket
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from ledger.evidence.keys import KeyDir
from ledger.service.run import Running, start
from ledger.service.web.snapshot import SNAPSHOT_DEADLINE_S, read_snapshot, timeline_of
from ledger.write.ingest import init_ledger

ATTACKER = "127.0.0.2"


def _hold(port: int, n: int, trickle: bool) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        s.bind((ATTACKER, 0))
        try:
            s.connect(("127.0.0.1", port))
            if trickle:
                s.sendall(b"G")
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def _still_open(socks: list[socket.socket]) -> int:
    n = 0
    for s in socks:
        s.setblocking(False)  # a peek, never a wait
        try:
            got = s.recv(1, socket.MSG_PEEK)
            n += bool(got)
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def _latency(url: str, k: int) -> tuple[float, float, int]:
    """(median ms, max ms, answers not 200 within 2 s) of k /healthz from another client."""
    times, bad = [], 0
    for _ in range(k):
        t0 = time.perf_counter()
        try:
            r = httpx.get(url + "/healthz", timeout=2)
            bad += r.status_code != 200
        except httpx.HTTPError:
            bad += 1
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times), bad


def _run(srv: Running, label: str, n: int, k: int) -> None:
    port = int(srv.url.rsplit(":", 1)[1])
    for how in ("none", "idle", "trickle"):
        socks = [] if how == "none" else _hold(port, n, how == "trickle")
        time.sleep(0.2)  # the cap acts at once; the header deadline (1 s here) later
        held = _still_open(socks)
        med, top, bad = _latency(srv.url, k)
        opened = n if socks else 0
        row = f"{label:<10} {how:<8} {opened:>7} {held:>5} {med:>9.1f} {top:>8.1f} {bad:>7}"
        time.sleep(1.5)
        print(f"{row} {_still_open(socks):>10}", flush=True)
        for s in socks:
            s.close()


def _snapshot_figures() -> None:
    frames = [{"filename": "x.py", "line": 1, "name": "f"}] * 10_000
    ev = {"action": "alloc", "addr": 1, "size": 1, "frames": frames}
    crafted = pickle.dumps({"device_traces": [[ev] * 20_000]})
    long = pickle.dumps(
        {"device_traces": [[{"action": "alloc", "addr": 1, "size": 1}] * 2_000_000]}
    )
    print(f"\n{'snapshot':<42} {'bytes':>9} {'seconds':>9}")
    for name, data in (("shared frame lists", crafted), ("2M shared events", long)):
        t0 = time.perf_counter()
        try:
            read_snapshot(data)
        except Exception as e:  # figures only
            print(e)
        print(f"{name + ': bounded reader':<42} {len(data):>9} {time.perf_counter() - t0:>9.3f}")
        digest = hashlib.sha256(data).hexdigest()
        for view in ("first view (worker)", "second view (cached)"):
            t0 = time.perf_counter()
            try:
                timeline_of(digest, data)
                result = "read"
            except Exception:
                result = "stopped"
            took = time.perf_counter() - t0
            print(f"{name + ': ' + view:<42} {len(data):>9} {took:>9.3f}  {result}")
    print(f"(worker deadline {SNAPSHOT_DEADLINE_S:g} s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockets", type=int, default=300)
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        init_ledger(url, KeyDir(Path(tmp) / "keys"))
        head = ("server", "sockets", "opened", "held", "p50 ms", "max ms", "not-200", "held +1.5s")
        print("{:<10} {:<8} {:>7} {:>5} {:>9} {:>8} {:>7} {:>10}".format(*head), flush=True)
        guarded = start(url, header_timeout_s=1.0)
        try:
            _run(guarded, "guarded", args.sockets, args.requests)
        finally:
            guarded.stop()
        # Baseline: the same server with no per-client cap and no header deadline.
        open_ = start(url, header_timeout_s=3600.0, max_per_client=10**6)
        try:
            _run(open_, "unguarded", args.sockets, args.requests)
        finally:
            open_.stop()
    _snapshot_figures()


if __name__ == "__main__":
    main()
