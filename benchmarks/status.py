"""Latency of `ledger status --pr N --json` on a ledger of 1,000,000 receipts.

Builds the ledger once per backend (SQLite file, PostgreSQL schema) from real
signed envelopes, written in bulk through the same row builders as ingest,
then prints the median latency of the status query (in-process CLI call:
git resolution, plan load, evidence query, signature re-verification,
evaluation, JSON) beside a plain indexed lookup of one receipt row measured
in the same run.

    python benchmarks/status.py [--n 1000000] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import git
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import create_engine, select, text

from ledger._internal.merkle import entry_leaf
from ledger.canonical import canonical_bytes, receipt_id
from ledger.cli import main
from ledger.dsse import pae
from ledger.ingest import register_key
from ledger.keys import KeyDir
from ledger.models import IN_TOTO_PAYLOAD_TYPE, QUALIFICATION_PREDICATE, STATEMENT_TYPE
from ledger.store.store import FACET, LOG, RECEIPT, Store

PG_URL = os.environ.get(
    "LEDGER_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ledger_test"
)
CLAIMS = [
    "admission.no-oom-after-admit",
    "regression.24view-repeatable",
    "backward.full-prefix",
    "gradients.match-base",
    "observer.off-control",
    "cleanup.complete",
]
TARGET_PR = 898
_KEY: Ed25519PrivateKey | None = None


def _hex(seed: str) -> str:
    return hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


def _init(pem: bytes) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    global _KEY
    k = load_pem_private_key(pem, None)
    assert isinstance(k, Ed25519PrivateKey)
    _KEY = k


def _receipt(args: tuple[int, int, str, str, int | None, str]) -> tuple[str, str, dict[str, Any]]:
    """One signed envelope: (id, canonical envelope body, index facts)."""
    i, c, commit, tree, pr, keyid = args
    assert _KEY is not None
    claim = CLAIMS[c % len(CLAIMS)]
    scope = {"device_kind": "cuda", "gpu_model": "NVIDIA H200", "dtype": "bfloat16"}
    stmt = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "repo", "digest": {"gitCommit": commit, "gitTree": tree}}],
        "predicateType": QUALIFICATION_PREDICATE,
        "predicate": {
            "claim": claim,
            "check": {"name": claim.split(".")[0], "version": "1", "parameters": {}},
            "scope": scope,
            "source": {
                "repo": "repo",
                "commit": commit,
                "tree": tree,
                "parents": [],
                "pr": pr,
                "base": None,
                "dirty": False,
                "package": None,
            },
            "outcome": "passed",
            "reason": None,
            "measurements": {"predicted_bytes": 1000 + i, "measured_bytes": 900 + i},
            "observer": "off",
            "cleanup": {"complete": True, "resources": [], "tolerance_bytes": 0},
            "artifacts": [],
            "runner": {
                "host": "h",
                "gpu_uuids": [],
                "started": "2026-11-30T00:00:00Z",
                "finished": "2026-11-30T00:00:01Z",
                "ledger_version": "0.1.0",
            },
            "supersedes": [],
        },
    }
    payload = canonical_bytes(stmt)
    sig = _KEY.sign(pae(IN_TOTO_PAYLOAD_TYPE, payload))
    env = {
        "payloadType": IN_TOTO_PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": keyid, "sig": base64.b64encode(sig).decode()}],
    }
    return (
        receipt_id(payload),
        canonical_bytes(env).decode(),
        {
            "claim": claim,
            "check_name": claim.split(".")[0],
            "repo": "repo",
            "commit": commit,
            "tree": tree,
            "pr": pr,
            "package_digest": None,
            "outcome": "passed",
            "observer": "off",
            "dirty": False,
            "signer": keyid,
            "scope": scope,
        },
    )


def _jobs(
    n: int, head: str, head_tree: str, keyid: str
) -> Iterator[tuple[int, int, str, str, int | None, str]]:
    stride = max(n // 12, 1)
    for i in range(n):
        k, rest = divmod(i, stride)
        if rest == 0 and k < 12:
            # The PR's own evidence (two receipts per claim), spread through the log.
            yield i, k, head, head_tree, TARGET_PR, keyid
        else:
            yield i, i, _hex(f"c{i}"), _hex(f"t{i}"), 1000 + i % 50_000, keyid


def build(url: str, n: int, repo: git.Repo, keys: KeyDir) -> Store:
    store = Store.create(url)
    local = (
        keys.create("bench-runner")
        if not keys.file("bench-runner").exists()
        else keys.load("bench-runner")
    )
    register_key(store, "bench-runner", "runner", local.public)
    pem = local.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    head = repo.commit(f"refs/pull/{TARGET_PR}/head")
    t0 = time.perf_counter_ns()
    seq = store.size()
    chunk: list[tuple[str, str, dict[str, Any]]] = []

    def flush() -> None:
        nonlocal seq
        logs: list[dict[str, Any]] = []
        recs: list[dict[str, Any]] = []
        facets: list[dict[str, Any]] = []
        for rid, body, facts in chunk:
            logs.append(
                {
                    "seq": seq,
                    "kind": "receipt",
                    "entry_id": rid,
                    "body": body,
                    "leaf_hash": entry_leaf(seq, "2026-11-30T00:00:00Z", body.encode()).hex(),
                    "logged_at": "2026-11-30T00:00:00Z",
                }
            )
            scope = facts.pop("scope")
            recs.append({"seq": seq, "id": rid, **facts})
            facets.extend({"seq": seq, "key": k, "value": str(v)} for k, v in sorted(scope.items()))
            seq += 1
        with store.engine.begin() as conn:
            conn.execute(LOG.insert(), logs)
            conn.execute(RECEIPT.insert(), recs)
            conn.execute(FACET.insert(), facets)
        chunk.clear()

    with Pool(os.cpu_count() or 1, initializer=_init, initargs=(pem,)) as pool:
        for k, item in enumerate(
            pool.imap(
                _receipt, _jobs(n, head.hexsha, head.tree.hexsha, local.keyid), chunksize=2000
            )
        ):
            chunk.append(item)
            if len(chunk) >= 20_000:
                flush()
                print(f"\r  {k + 1:>9,} / {n:,} receipts", end="", file=sys.stderr, flush=True)
        if chunk:
            flush()
    print(
        f"\r  built {n:,} receipts in {(time.perf_counter_ns() - t0) / 1e9:.1f} s", file=sys.stderr
    )
    with store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql("ANALYZE")
    return store


def median_ns(fn: Any, reps: int) -> int:
    fn()  # warm: caches, prepared plans, git's cat-file process
    samples = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t)
    return int(statistics.median(samples))


def measure(url: str, repo: git.Repo, reps: int) -> tuple[int, int, dict[str, Any]]:
    import json

    out = io.StringIO()

    def status() -> None:
        out.seek(0)
        out.truncate()
        with contextlib.redirect_stdout(out):
            code = main(
                [
                    "status",
                    "--db",
                    url,
                    "--pr",
                    str(TARGET_PR),
                    "--repo",
                    str(repo.working_tree_dir),
                    "--json",
                ]
            )
        assert code in (0, 1), code

    status()
    doc = json.loads(out.getvalue())
    eng = create_engine(url)
    with eng.connect() as conn:
        some_id = (
            conn.execute(select(RECEIPT.c.id).where(RECEIPT.c.seq == 500_000)).scalar_one_or_none()
            or conn.execute(select(RECEIPT.c.id).limit(1)).scalar_one()
        )
    q = select(RECEIPT).where(RECEIPT.c.id == some_id)

    def lookup() -> None:
        with eng.connect() as conn:
            conn.execute(q).one()

    base = median_ns(lookup, reps * 4)
    st = median_ns(status, reps)
    eng.dispose()
    return st, base, doc


def make_repo(root: Path) -> git.Repo:
    r = git.Repo.init(root, initial_branch="main")
    (root / "model").mkdir()
    (root / "model" / "planner.py").write_text("budget = 1\n")
    plan = "".join(
        f'[[claims]]\nname = "{c}"\ncheck = "{c.split(".")[0]}"\ncleanup = true\n\n' for c in CLAIMS
    )
    (root / "qualification.toml").write_text(plan)
    r.index.add(["model/planner.py", "qualification.toml"])
    a = git.Actor("Bench", "bench@example.com")
    sha = r.index.commit("base", author=a, committer=a).hexsha
    r.git.update_ref(f"refs/pull/{TARGET_PR}/head", sha)
    return r


def main_() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    repo = make_repo(tmp / "repo")
    keys = KeyDir(tmp / "keys")
    os.environ["LEDGER_KEYS"] = str(keys.path)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    rows = []
    for b in backends:
        schema = None
        if b == "sqlite":
            url = f"sqlite:///{tmp / 'bench.db'}"
        else:
            schema = (
                "bench_" + hashlib.sha1(str(tmp).encode(), usedforsecurity=False).hexdigest()[:8]
            )
            admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as c:
                c.execute(text(f"CREATE SCHEMA {schema}"))
            url = f"{PG_URL}?options=-csearch_path%3D{schema}"
        print(f"{b}: building {args.n:,} receipts", file=sys.stderr)
        build(url, args.n, repo, keys)
        st, base, doc = measure(url, repo, args.reps)
        states = sorted({c["state"] for c in doc["claims"]})
        rows.append((b, st, base, states))
        if schema:
            with admin.connect() as c:
                c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    print(f"\nledger of {args.n:,} receipts; median of {args.reps} runs (in-process CLI call)")
    print(f"{'backend':<11} {'status --pr --json':>20} {'indexed lookup':>16} {'ratio':>8}  states")
    for b, st, base, states in rows:
        ratio = st / base
        cells = f"{b:<11} {st / 1e6:>17.2f} ms {base / 1e6:>13.3f} ms {ratio:>8.1f}"
        print(f"{cells}  {','.join(states)}")
    print("target: status under 100 ms")


if __name__ == "__main__":
    main_()
