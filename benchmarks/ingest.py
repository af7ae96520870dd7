"""Ingest throughput: `record` of N pre-signed receipts into SQLite and PostgreSQL,
beside the in-memory verification rate of the same envelopes.

    python benchmarks/ingest.py [--n 2000]

The figure is the ratio record rate / verify rate: how much of the ingest
cost is the database rather than the verification every input must pass.
PostgreSQL: LEDGER_BENCH_PG_URL (default the test server); the run creates a
private schema per measurement and drops it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import cryptography
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import create_engine, text

from ledger.evidence import dsse
from ledger.evidence.keys import KeyInfo, LocalKey
from ledger.evidence.models import Source
from ledger.evidence.statement import Facts, build_statement, sign_statement
from ledger.store.store import Store
from ledger.verify import verify_envelope
from ledger.write.ingest import record, register_key

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/ledger_test"


def envelopes(n: int, key: LocalKey) -> list[bytes]:
    """N distinct signed receipts of typical size: commit, claim and numbers vary."""
    claims = [
        "admission.no-oom-after-admit",
        "regression.24-view",
        "backward.full-prefix",
        "grad.compare",
        "cleanup.complete",
        "observer.off-control",
        "mesh.handoff",
    ]
    out = []
    for i in range(n):
        commit = hashlib.sha1(b"commit %d" % i, usedforsecurity=False).hexdigest()
        tree = hashlib.sha1(b"tree %d" % i, usedforsecurity=False).hexdigest()
        source = Source(
            repo="github.com/example/trainer",
            commit=commit,
            tree=tree,
            parents=[commit],
            dirty=False,
        )
        facts = Facts(
            claim=claims[i % len(claims)],
            check=claims[i % len(claims)],
            check_version="1",
            parameters={"views": 24, "seed": i},
            scope={
                "device_kind": "cuda",
                "gpu_model": "NVIDIA H200",
                "gpu_count": 2,
                "dtype": "bfloat16",
                "tp": 1,
                "ep": 2,
                "workload": "moe-lora",
            },
            outcome="passed",
            reason=None,
            measurements={
                "predicted_bytes": 70_000_000_000 + i,
                "measured_bytes": 68_000_000_000 + i,
                "warm_ns": 1_000_000 + i,
            },
            observer="off",
            cleanup=None,
            artifacts=(),
            supersedes=(),
            host="gpu-host-1",
            gpu_uuids=("GPU-0", "GPU-1"),
        )
        out.append(sign_statement(build_statement(source, facts), key))
    return out


@dataclass(frozen=True, slots=True)
class Row:
    what: str
    n: int
    ns: int

    @property
    def rate(self) -> float:
        return self.n / (self.ns / 1e9)


def timed(what: str, n: int, fn: Callable[[], None], repeat: int = 1) -> Row:
    """Best of `repeat` runs (fresh state is the caller's business)."""
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        dt = time.perf_counter_ns() - t0
        best = dt if best is None else min(best, dt)
    assert best is not None
    return Row(what, n, best)


def raw_rows(raws: Sequence[bytes], key: LocalKey) -> tuple[Row, Row]:
    """(crypto only, full in-memory verification) over the same envelopes."""
    store_keys = {key.keyid: KeyInfo(key.keyid, key.name, "runner", key.public, 0)}
    parsed = [dsse.parse_envelope(r) for r in raws]
    pre = [(dsse.decode_payload(e), base64.b64decode(e.signatures[0].sig)) for e in parsed]
    pae = [(p, s, dsse.pae(e.payloadType, p)) for (p, s), e in zip(pre, parsed, strict=True)]
    public = key.public

    def crypto() -> None:
        for payload, sig, message in pae:
            hashlib.sha256(payload).digest()
            public.verify(sig, message)

    def full() -> None:
        for r in raws:
            verify_envelope(dsse.parse_envelope(r), store_keys, at_seq=1)

    return (
        timed("verify: sha256 + Ed25519 only", len(raws), crypto, repeat=3),
        timed("verify: parse + verify_envelope", len(raws), full, repeat=3),
    )


@contextmanager
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ledger-bench-") as d:
        yield f"sqlite:///{Path(d) / 'ledger.db'}"


@contextmanager
def pg_url(base: str) -> Iterator[str]:
    schema = "bench_" + secrets.token_hex(6)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as c:
            c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def record_rows(
    backend: str,
    url_of: Callable[[], AbstractContextManager[str]],
    raws: Sequence[bytes],
    key: LocalKey,
) -> list[Row]:
    rows = []
    for mode in ("per-call", "batch"):
        with url_of() as url:
            store = Store.create(url)
            register_key(store, key.name, "runner", key.public)

            def one_per_call(store: Store = store) -> None:
                for r in raws:
                    record(store, [r])

            def one_batch(store: Store = store) -> None:
                record(store, raws)

            fn = one_per_call if mode == "per-call" else one_batch
            label = "1 envelope per call" if mode == "per-call" else f"1 call of {len(raws)}"
            rows.append(timed(f"record {backend}: {label}", len(raws), fn))
            assert store.size() == len(raws) + 1, "not every receipt was recorded"
            store.engine.dispose()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=2000, help="envelopes per measurement")
    args = ap.parse_args(argv)
    n: int = args.n
    pg = os.environ.get("LEDGER_BENCH_PG_URL", DEFAULT_PG_URL)

    key = LocalKey("bench-runner", Ed25519PrivateKey.generate())
    t0 = time.perf_counter_ns()
    raws = envelopes(n, key)
    sign_s = (time.perf_counter_ns() - t0) / 1e9
    size = sum(len(r) for r in raws) // n

    crypto, full = raw_rows(raws, key)
    rows = [crypto, full]
    rows += record_rows("sqlite", sqlite_url, raws, key)
    skipped = None
    try:
        rows += record_rows("postgresql", lambda: pg_url(pg), raws, key)
    except Exception as e:  # unreachable server or missing driver: report, don't die
        skipped = f"{type(e).__name__}: {str(e).splitlines()[0]}"

    print(
        f"ingest: N={n} distinct pre-signed receipts, {size} bytes each on average "
        f"(signed in {sign_s:.1f} s, not timed)"
    )
    print(
        f"python {platform.python_version()}, cryptography {cryptography.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs"
    )
    print()
    print(f"{'measurement':<42} {'seconds':>8} {'receipts/s':>11} {'/ verify':>9} {'/ crypto':>9}")
    for r in rows:
        print(
            f"{r.what:<42} {r.ns / 1e9:>8.3f} {r.rate:>11.0f} "
            f"{r.rate / full.rate:>9.3f} {r.rate / crypto.rate:>9.3f}"
        )
    if skipped:
        print(f"record postgresql: skipped ({skipped})")
    print()
    print("verify: sha256 + Ed25519 only = SHA-256 of the payload and one Ed25519 verify of")
    print("  its PAE per envelope; base64 decoding and PAE building done before timing.")
    print("verify: parse + verify_envelope = all of ingest's in-memory checks per envelope:")
    print("  JSON parse + Envelope model + payloadType check (dsse.parse_envelope), base64")
    print("  decode, PAE, Ed25519 verify, statement JSON parse + pydantic model, key role and")
    print("  revocation check, SHA-256 receipt id (ledger.verify.verify_envelope). Best of 3 runs.")
    print("record: ledger.write.ingest.record(store, raws) on a fresh database holding only the")
    print("  runner key: the same verification plus reference checks, the append lock,")
    print("  inserts of entry + index rows + scope facets, and the commit. One run each.")
    print("/ verify = record rate / (parse + verify_envelope) rate: the figure.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
