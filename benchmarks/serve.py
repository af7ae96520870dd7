"""`ledger serve` figures: receipts/s over HTTP (1 and 8 clients) beside
in-process `record`, status requests/s over HTTP beside in-process status,
and the PR page's render time on a ledger of N receipts.

    python benchmarks/serve.py [--receipts N] [--page-receipts N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ledger.evidence.keys import KeyDir, LocalKey
from ledger.evidence.statement import sign_statement
from ledger.read.query import query_status
from ledger.read.subject import identity_from_log
from ledger.remote import client
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.ingest import init_ledger, record, register_key
from tests.ledger.factories import statement


def _envelopes(key: LocalKey, n: int, tag: str, first_pr: int = 1) -> list[bytes]:
    """n receipts, 100 per PR (one head each, ten claims of ten receipts)."""
    out = []
    for i in range(n):
        pr = first_pr + i // 100
        head = f"{pr:040x}"
        src = {"repo": "bench", "commit": head, "tree": head, "dirty": False, "pr": pr}
        stmt = statement(claim=f"{tag}.{i % 10}", source=src)
        out.append(sign_statement(stmt, key))
    return out


def _ledger(root: Path) -> tuple[str, KeyDir, LocalKey]:
    url = f"sqlite:///{root / 'ledger.db'}"
    keys = KeyDir(root / "keys")
    init_ledger(url, keys)
    runner = keys.create("runner")
    register_key(Store.open(url), "runner", "runner", runner.public)
    return url, keys, runner


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--receipts", type=int, default=400)
    ap.add_argument("--page-receipts", type=int, default=100_000)
    args = ap.parse_args()
    n = args.receipts
    with tempfile.TemporaryDirectory() as tmp:
        url, keys, runner = _ledger(Path(tmp))
        store = Store.open(url)
        envs = _envelopes(runner, n, "local")
        t0 = time.perf_counter()
        for e in envs:
            record(store, [e])
        local = n / (time.perf_counter() - t0)
        srv = start(url, keys)
        try:
            envs = _envelopes(runner, n, "http1", first_pr=10_001)
            t0 = time.perf_counter()
            for e in envs:
                client.post_envelopes(srv.url, [e])
            one = n / (time.perf_counter() - t0)
            envs = _envelopes(runner, n, "http8", first_pr=20_001)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda e: client.post_envelopes(srv.url, [e]), envs))
            eight = n / (time.perf_counter() - t0)
            ident = identity_from_log(store, "bench", 1, None)
            m = 50
            t0 = time.perf_counter()
            for _ in range(m):
                query_status(store, ident, claims=None, scope={})
            st_local = m / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            with httpx.Client() as c:
                for _ in range(m):
                    q = {"repo": "bench", "pr": "1"}
                    c.get(srv.url + "/v1/status", params=q).raise_for_status()
            st_http = m / (time.perf_counter() - t0)
        finally:
            srv.stop()
        print(f"record, in process:      {local:8.1f} receipts/s ({n} receipts)")
        print(f"record, HTTP, 1 client:  {one:8.1f} receipts/s")
        print(f"record, HTTP, 8 clients: {eight:8.1f} receipts/s")
        where = f"a PR of 100 receipts in a ledger of {3 * n}"
        print(f"status, in process:      {st_local:8.1f} answers/s ({where})")
        print(f"status, HTTP:            {st_http:8.1f} answers/s (the same PR, GET /v1/status)")
    with tempfile.TemporaryDirectory() as tmp:
        url, keys, runner = _ledger(Path(tmp))
        store = Store.open(url)
        big = args.page_receipts
        batch = 500
        for i in range(0, big, batch):
            record(store, _envelopes(runner, min(batch, big - i), "p", first_pr=1 + i // 100))
        srv = start(url, keys)
        try:
            t0 = time.perf_counter()
            r = httpx.get(srv.url + "/pr", params={"repo": "bench", "pr": "1"}, timeout=600)
            r.raise_for_status()
            took = time.perf_counter() - t0
            print(f"PR page at {big} receipts: {took:8.2f} s (its PR holds 100 of them)")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
