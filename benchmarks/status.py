"""Latency of `ledger status --pr N --json` on a ledger of 1,000,000 receipts
from K repositories that share pull-request numbers.

Builds the ledger once per backend (SQLite file, PostgreSQL schema) from real
signed envelopes, written in bulk through the same row builders as ingest.
The asked repository is one of K; for each of 1, 10, 100, ... K it has a PR
whose number that many repositories share (12 receipts each, spread through
the log), and the rest are receipts of all K repositories with PR numbers
that collide too. It prints the median latency of the status query per
sharing level (in-process CLI call: git resolution, plan load, evidence
query, evaluation, JSON) beside a plain indexed lookup of one receipt row
measured in the same run.

    python benchmarks/status.py [--n 1000000] [--repos 1000] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import itertools
import json
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
from sqlalchemy import create_engine, event, select, text

from ledger._internal.merkle import entry_leaf
from ledger.cli import main
from ledger.evidence.canonical import canonical_bytes, receipt_id
from ledger.evidence.dsse import pae, parse_envelope
from ledger.evidence.keys import KeyDir
from ledger.evidence.models import IN_TOTO_PAYLOAD_TYPE, QUALIFICATION_PREDICATE, STATEMENT_TYPE
from ledger.identity.repoid import canonical_repo
from ledger.store.store import RECEIPT, Store
from ledger.verify.envelope import verify_envelope
from ledger.write.ingest import receipt_index, register_key

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
"""The PR number shared by the most repositories; TARGET_PR + 1 by a tenth of them, ..."""
PER_PR = 12
ASKED = "repo"
"""The asked repository's id: its checkout has no remote; its plan names it."""
_KEY: Ed25519PrivateKey | None = None


def _hex(seed: str) -> str:
    return hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


def _init(pem: bytes) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    global _KEY
    k = load_pem_private_key(pem, None)
    assert isinstance(k, Ed25519PrivateKey)
    _KEY = k


Job = tuple[int, int, str, str, str, int | None, str]


_SCOPE = {"device_kind": "cuda", "gpu_model": "NVIDIA H200", "dtype": "bfloat16"}
# Markers replaced per receipt in a statement's canonical bytes: the template is
# canonical (keys sorted, no escapes in the values swapped in), so is each result.
_MARK = {"repo": "@REPO@", "commit": "@COMMIT@", "tree": "@TREE@"}
_PR, _PREDICTED = 7777777771, 7777777772
_TEMPLATES: dict[str, bytes] = {}


def _statement(claim: str, repo: str, commit: str, tree: str, pr: int, i: int) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repo, "digest": {"gitCommit": commit, "gitTree": tree}}],
        "predicateType": QUALIFICATION_PREDICATE,
        "predicate": {
            "claim": claim,
            "check": {"name": claim.split(".")[0], "version": "1", "parameters": {}},
            "scope": _SCOPE,
            "source": {
                "repo": repo,
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


def _payload(claim: str, repo: str, commit: str, tree: str, pr: int, i: int) -> bytes:
    """canonical_bytes(_statement(...)), by substitution into the claim's template."""
    t = _TEMPLATES.get(claim)
    if t is None:
        m = _MARK
        t = canonical_bytes(
            _statement(claim, m["repo"], m["commit"], m["tree"], _PR, _PREDICTED - 1000)
        )
        _TEMPLATES[claim] = t
    out = (
        t.replace(b"@REPO@", repo.encode())
        .replace(b"@COMMIT@", commit.encode())
        .replace(b"@TREE@", tree.encode())
        .replace(str(_PR).encode(), str(pr).encode())
        .replace(str(_PREDICTED).encode(), str(1000 + i).encode())
        .replace(str(_PREDICTED - 100).encode(), str(900 + i).encode())
    )
    return out


_LOGGED_AT = "2026-11-30T00:00:00Z"
LOG_COLS = ("seq", "kind", "entry_id", "body", "leaf_hash", "logged_at")
RECEIPT_COLS = (
    "seq", "id", "claim", "check_name", "repo", "repo_id", "commit", "tree", "pr",
    "package_digest", "outcome", "observer", "dirty", "signer",
)  # fmt: skip
FACET_COLS = ("seq", "key", "value")
Rows = tuple[tuple[Any, ...], tuple[Any, ...], list[tuple[Any, ...]]]


def _receipt(args: Job) -> tuple[str, str]:
    """One signed envelope: (id, canonical envelope body)."""
    i, c, repo, commit, tree, pr, keyid = args
    assert _KEY is not None and pr is not None
    claim = CLAIMS[c % len(CLAIMS)]
    payload = _payload(claim, repo, commit, tree, pr, i)
    sig = base64.b64encode(_KEY.sign(pae(IN_TOTO_PAYLOAD_TYPE, payload))).decode()
    # canonical_bytes of the envelope, its keys in RFC 8785 order (checked in build()).
    body = (
        f'{{"payload":"{base64.b64encode(payload).decode()}",'
        f'"payloadType":"{IN_TOTO_PAYLOAD_TYPE}",'
        f'"signatures":[{{"keyid":"{keyid}","sig":"{sig}"}}]}}'
    )
    return receipt_id(payload), body


def _rows(args: tuple[int, Job]) -> Rows:
    """The rows ingest writes for one receipt at log position ``seq``: its log entry
    (with the leaf hash), its receipt index row and its scope facets."""
    seq, job = args
    _, c, repo, commit, tree, pr, keyid = job
    rid, body = _receipt(job)
    claim = CLAIMS[c % len(CLAIMS)]
    leaf = entry_leaf(seq, _LOGGED_AT, body.encode()).hex()
    log = (seq, "receipt", rid, body, leaf, _LOGGED_AT)
    rec = (
        seq, rid, claim, claim.split(".")[0], repo, canonical_repo(repo), commit, tree, pr,
        None, "passed", "off", False, keyid,
    )  # fmt: skip
    return log, rec, [(seq, k, str(v)) for k, v in sorted(_SCOPE.items())]


def _check_template(keyid: str, keys: dict[str, Any]) -> None:
    """The substituted bytes are the canonical bytes of the statement they stand for."""
    args = ("regression.24view-repeatable", "github.com/org/r0007", "a" * 40, "b" * 40, 898, 5)
    want = canonical_bytes(_statement(*args))
    assert _payload(*args) == want, "template drifted from canonical_bytes"
    env = json.loads(_receipt((5, 1, *args[1:5], keyid))[1])
    assert canonical_bytes(env).decode() == _receipt((5, 1, *args[1:5], keyid))[1]
    # The rows are the ones ingest's own row builder makes for that envelope, verified.
    _, rec, facets = _rows((7, (5, 1, *args[1:5], keyid)))
    v = verify_envelope(parse_envelope(_receipt((5, 1, *args[1:5], keyid))[1].encode()), keys)
    row, want_facets = receipt_index(7, v)
    assert dict(zip(RECEIPT_COLS, rec, strict=True)) == row, "receipt row drifted from ingest's"
    assert facets == [tuple(f[c] for c in FACET_COLS) for f in want_facets], "facets drifted"


def repo_name(j: int) -> str:
    return ASKED if j == 0 else f"github.com/org/r{j:04d}"


def levels(repos: int) -> list[int]:
    """How many repositories share each asked PR number: 1, 10, 100, ... repos."""
    out = [1]
    while out[-1] * 10 < repos:
        out.append(out[-1] * 10)
    return sorted({*out, repos})


def asked_pr(level: int, repos: int) -> int:
    return TARGET_PR + levels(repos)[::-1].index(level)


def _jobs(n: int, repos: int, heads: dict[int, tuple[str, str]], keyid: str) -> Iterator[Job]:
    """Shared-PR receipts spread evenly through n; the rest fill in between."""
    shared: dict[int, tuple[int, str, str, str, int]] = {}
    for level in levels(repos):
        pr = asked_pr(level, repos)
        for j in range(level):
            for k in range(PER_PR):
                commit, tree = heads[pr] if j == 0 else (_hex(f"h{pr}.{j}"), _hex(f"t{pr}.{j}"))
                shared[len(shared)] = (k, repo_name(j), commit, tree, pr)
    stride = max(n // max(len(shared), 1), 1)
    for i in range(n):
        k, rest = divmod(i, stride)
        if rest == 0 and k in shared:
            c, repo, commit, tree, pr = shared[k]
            yield i, c, repo, commit, tree, pr, keyid
        else:
            repo = repo_name(i % repos)
            yield i, i, repo, _hex(f"c{i}"), _hex(f"t{i}"), 1000 + i % 50_000, keyid


def _sqlite_bulk(dbapi_conn: Any, _record: Any) -> None:
    """The build's SQLite connections: no fsync, and a page cache large enough for the
    unique indexes of ten million rows (2 GB)."""
    dbapi_conn.execute("PRAGMA synchronous = OFF")
    dbapi_conn.execute("PRAGMA cache_size = -2000000")


BUILT = ("log_entry", "receipt", "scope_facet")


def _secondary_indexes(conn: Any) -> list[tuple[str, str]]:
    """(name, DDL) of the built tables' indexes that no constraint owns, exactly as the
    ledger's migrations created them."""
    names = ", ".join(f"'{t}'" for t in BUILT)
    if conn.dialect.name == "postgresql":
        q = f"""SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            WHERE t.relnamespace = current_schema()::regnamespace AND t.relname IN ({names})
            AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"""
    else:
        q = f"""SELECT name, sql FROM sqlite_master
            WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({names})"""
    return [(r[0], r[1]) for r in conn.exec_driver_sql(q)]


def _insert(conn: Any, table: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Rows straight through the driver: COPY on PostgreSQL, executemany on SQLite."""
    raw = conn.connection.driver_connection
    names = ", ".join(f'"{c}"' for c in cols)
    if conn.dialect.name == "postgresql":
        with raw.cursor() as cur, cur.copy(f'COPY "{table}" ({names}) FROM STDIN') as cp:
            for r in rows:
                cp.write_row(r)
    else:
        marks = ", ".join("?" * len(cols))
        raw.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', rows)


def build(url: str, n: int, repos: int, repo: git.Repo, keys: KeyDir) -> Store:
    """n signed receipts written as ingest writes them (its rows, checked against its
    row builder), in bulk: the signing and the row building in worker processes, the
    rows through the driver, and the secondary indexes built once at the end (as the
    migrations define them) rather than grown row by row; the unique ones grow."""
    store = Store.create(url)
    local = (
        keys.create("bench-runner")
        if not keys.file("bench-runner").exists()
        else keys.load("bench-runner")
    )
    register_key(store, "bench-runner", "runner", local.public)
    if store.engine.dialect.name == "sqlite":
        store.engine.dispose()  # the next connections take the build's settings
        event.listen(store.engine, "connect", _sqlite_bulk)
    pem = local.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    _init(pem)
    _check_template(local.keyid, store.keys())
    heads = {}
    for level in levels(repos):
        pr = asked_pr(level, repos)
        c = repo.commit(f"refs/pull/{pr}/head")
        heads[pr] = (c.hexsha, c.tree.hexsha)
    t0 = time.perf_counter_ns()
    with store.engine.begin() as conn:
        indexes = _secondary_indexes(conn)
        for name, _ in indexes:
            conn.exec_driver_sql(f'DROP INDEX "{name}"')
    seq0 = store.size()
    jobs = enumerate(_jobs(n, repos, heads, local.keyid), start=seq0)
    done = 0
    windows = iter(lambda: list(itertools.islice(jobs, 100_000)), [])
    with Pool(os.cpu_count() or 1, initializer=_init, initargs=(pem,)) as pool:
        # A window at a time, the next one signed while this one is inserted: signers
        # faster than the inserts would otherwise pile every receipt up in memory.
        pending = pool.map_async(_rows, next(windows, []), chunksize=2000)
        while rows := pending.get():
            ahead = next(windows, [])
            pending = pool.map_async(_rows, ahead, chunksize=2000)
            with store.engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    # The build's own transactions do not wait for the disk; what is
                    # measured afterwards runs with the ledger's settings.
                    conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                _insert(conn, "log_entry", LOG_COLS, [r[0] for r in rows])
                _insert(conn, "receipt", RECEIPT_COLS, [r[1] for r in rows])
                _insert(conn, "scope_facet", FACET_COLS, [f for r in rows for f in r[2]])
            done += len(rows)
            rate = done / ((time.perf_counter_ns() - t0) / 1e9)
            print(f"\r  {done:>10,} / {n:,} receipts ({rate:,.0f}/s)", end="", file=sys.stderr,
                  flush=True)  # fmt: skip
    t1 = time.perf_counter_ns()
    with store.engine.begin() as conn:
        for _, ddl in indexes:
            conn.exec_driver_sql(ddl)
        conn.exec_driver_sql("ANALYZE")
    t2 = time.perf_counter_ns()
    assert store.size() == seq0 + n
    print(
        f"\r  built {n:,} receipts in {(t2 - t0) / 1e9:.1f} s"
        f" ({len(indexes)} secondary indexes and ANALYZE: {(t2 - t1) / 1e9:.1f} s)",
        file=sys.stderr,
    )
    return store


def median_ns(fn: Any, reps: int) -> int:
    fn()  # warm: caches, prepared plans, git's cat-file process
    samples = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t)
    return int(statistics.median(samples))


def measure(
    url: str, repo: git.Repo, reps: int, repos: int
) -> tuple[dict[int, int], int, dict[int, dict[str, Any]]]:
    """Median status latency per sharing level, the indexed lookup, the answers."""

    out = io.StringIO()

    def status(pr: int) -> None:
        out.seek(0)
        out.truncate()
        with contextlib.redirect_stdout(out):
            code = main(
                [
                    "status",
                    "--db",
                    url,
                    "--pr",
                    str(pr),
                    "--repo",
                    str(repo.working_tree_dir),
                    "--offline",
                    "--json",
                ]
            )
        assert code in (0, 1), code

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
    docs = {}
    for level in levels(repos):
        status(asked_pr(level, repos))  # warm, and the answer
        docs[level] = json.loads(out.getvalue())
    # Round-robin over the levels: a busy machine slows them all alike.
    samples: dict[int, list[int]] = {level: [] for level in levels(repos)}
    for _ in range(reps):
        for level in levels(repos):
            t = time.perf_counter_ns()
            status(asked_pr(level, repos))
            samples[level].append(time.perf_counter_ns() - t)
    eng.dispose()
    return {k: int(statistics.median(v)) for k, v in samples.items()}, base, docs


def make_repo(root: Path, repos: int) -> git.Repo:
    r = git.Repo.init(root, initial_branch="main")
    (root / "model").mkdir()
    (root / "model" / "planner.py").write_text("budget = 1\n")
    # No remote: the plan names the repository (else it is its root commit).
    plan = f'[project]\nrepo = "{ASKED}"\n\n' + "".join(
        f'[[claims]]\nname = "{c}"\ncheck = "{c.split(".")[0]}"\ncleanup = true\n\n' for c in CLAIMS
    )
    (root / "qualification.toml").write_text(plan)
    r.index.add(["model/planner.py", "qualification.toml"])
    a = git.Actor("Bench", "bench@example.com")
    base = r.index.commit("base", author=a, committer=a)
    # One head per asked PR (its own commit and tree), each on top of main.
    for level in levels(repos):
        pr = asked_pr(level, repos)
        (root / "model" / "planner.py").write_text(f"budget = {pr}\n")
        r.index.add(["model/planner.py"])
        head = r.index.commit(f"pr {pr}", parent_commits=[base], author=a, committer=a)
        r.git.update_ref(f"refs/pull/{pr}/head", head.hexsha)
        r.head.reset(base, index=True, working_tree=True)
    return r


def main_() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument(
        "--repos", type=int, default=1000, help="repositories in the ledger (PR numbers shared)"
    )
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    repo = make_repo(tmp / "repo", args.repos)
    keys = KeyDir(tmp / "keys")
    os.environ["LEDGER_KEYS"] = str(keys.path)
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    print(
        f"ledger of {args.n:,} receipts, {args.repos:,} repositories;"
        f" median of {args.reps} runs (in-process CLI call, --offline)"
    )
    print(
        f"{'backend':<11} {'PR shared by':>12} {'status --pr --json':>19} {'indexed lookup':>15}"
        f" {'ratio':>7} {'kept':>5}  states",
        flush=True,
    )
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
        print(f"{b}: building {args.n:,} receipts of {args.repos:,} repositories", file=sys.stderr)
        build(url, args.n, args.repos, repo, keys)
        times, base, docs = measure(url, repo, args.reps, args.repos)
        # Each backend's rows as soon as they are measured.
        for level, st in times.items():
            doc = docs[level]
            kept = len({r for c in doc["claims"] for r in c["receipts"]})
            states = ",".join(sorted({c["state"] for c in doc["claims"]}))
            print(
                f"{b:<11} {level:>12,} {st / 1e6:>16.2f} ms {base / 1e6:>12.3f} ms"
                f" {st / base:>7.1f} {kept:>5}  {states}"
            )
        spread = max(times.values()) / min(times.values())
        print(f"{b:<11} slowest / fastest sharing level: {spread:.2f}", flush=True)
        if schema:
            with admin.connect() as c:
                c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        else:
            (tmp / "bench.db").unlink()
    print("targets: status at most 50 ms; flat within 20 % from 1 to 1,000 repositories")


if __name__ == "__main__":
    main_()
