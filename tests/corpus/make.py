"""Write the corpus of today's formats (run once per release; never rewrite a
committed set): `python tests/corpus/make.py NAME` makes tests/corpus/NAME/
and adds its cases to tests/corpus/manifest.json. `--evidence` adds one
bundle of each committed evidence ledger (evidence/*/bundles) instead.

Everything is made with the product's own commands in a temporary ledger,
two witnesses on loopback and a fork of the ledger; the expected verdicts
are written beside them and checked by tests/ledger/evidence/test_corpus.py.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from ledger.cli import main  # noqa: E402
from ledger.evidence.keys import KeyDir, key_id, load_public_pem  # noqa: E402
from ledger.evidence.statement import build_review, sign_statement  # noqa: E402
from ledger.service.witness_http import WitnessServer  # noqa: E402
from ledger.transparency.vkey import LOG_ED25519, WITNESS_ED25519, VKey  # noqa: E402
from ledger.transparency.witness import Witness, parse_logs  # noqa: E402
from tests.ledger.factories import envelope  # noqa: E402

MANIFEST = HERE / "manifest.json"


def ledger(*args: str, expect: int = 0) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    if code != expect:
        raise SystemExit(f"ledger {' '.join(args)}: exit {code}: {err.getvalue()}")
    return out.getvalue()


def record(db: str, tmp: Path, env: bytes, n: int) -> str:
    f = tmp / f"env-{n}.json"
    f.write_bytes(env)
    return ledger("record", str(f), "--db", db).split()[0]


def today(name: str) -> list[dict[str, Any]]:
    out = HERE / name
    if out.exists():
        raise SystemExit(f"{out} exists: a committed corpus is never rewritten")
    tmp = Path(tempfile.mkdtemp(prefix="corpus-"))
    os.environ["LEDGER_KEYS"] = str(tmp / "keys")
    os.environ["LEDGER_JOURNAL"] = str(tmp / "journal.jsonl")
    db = str(tmp / "ledger.db")
    ledger("init", "--db", db)
    ledger("keys", "new", "runner", "--role", "runner", "--db", db)
    ledger("keys", "new", "reviewer", "--role", "reviewer", "--db", db)
    keys = KeyDir(tmp / "keys")
    runner, reviewer = keys.load("runner"), keys.load("reviewer")
    log_vkey = ledger("log", "vkey", "--db", db).strip()
    servers = []
    lines = [f"log {log_vkey}"]
    for w in ("w1", "w2"):
        wit = Witness(
            f"{w}.example/witness",
            Ed25519PrivateKey.generate(),
            parse_logs(f"log {log_vkey}\n".encode()),
            tmp / f"{w}.sqlite",
        )
        servers.append(WitnessServer(wit, "127.0.0.1", 0).start())
        lines.append(f"witness {w} {wit.vkey.text()} {servers[-1].url}")
    policy = tmp / "policy-urls.txt"
    policy.write_text("\n".join([*lines, "group both all w1 w2", "quorum both"]) + "\n")
    try:
        ids = [record(db, tmp, envelope(runner, claim=f"admission.case-{n}"), n) for n in range(3)]
        review = sign_statement(build_review(ids[0], "concur", "reran it"), reviewer)
        record(db, tmp, review, 99)
        cosigned = ledger("log", "checkpoint", "--witnesses", str(policy), "--db", db)
        out.mkdir()
        ledger("export", ids[0], "-o", str(out / "bundle.json"), "--proof", "--db", db)
        fork_db = str(tmp / "fork.db")
        with sqlite3.connect(db) as src, sqlite3.connect(fork_db) as dst:
            src.backup(dst)
        # The honest log grows and is cosigned; the fork then grows apart, and
        # the witnesses, holding the honest size, refuse it.
        record(db, tmp, envelope(runner, claim="admission.honest"), 4)
        ledger("log", "checkpoint", "--witnesses", str(policy), "--db", db)
        forged = record(fork_db, tmp, envelope(runner, claim="admission.forged"), 5)
        # Both refuse (exit 1): the fork's checkpoint stays signed, uncosigned.
        ledger("log", "checkpoint", "--witnesses", str(policy), "--db", fork_db, expect=1)
        forked = ledger("log", "checkpoint", "--db", fork_db)
        later = record(db, tmp, envelope(runner, claim="admission.later"), 6)
        # A receipt revoked by the operator (0.2.0): its bundle carries the revocation's
        # inclusion proof, and any verifier refuses it from then on.
        void = record(db, tmp, envelope(runner, claim="admission.revoked"), 7)
        ledger("revoke", void, "--reason", "the host's clock was wrong", "--db", db)
        ledger("log", "checkpoint", "--db", db)
        ledger("export", void, "-o", str(out / "bundle-revoked.json"), "--db", db)
        ledger("export", later, "-o", str(out / "bundle-uncosigned.json"), "--db", db)
        ledger("export", forged, "-o", str(out / "bundle-forked.json"), "--db", fork_db)
        (out / "ledger.pub.pem").write_text(ledger("keys", "export", "ledger", "--db", db))
        (out / "runner.pub.pem").write_text(ledger("keys", "export", "runner", "--db", db))
    finally:
        for s in servers:
            s.close()
    # Offline the policy needs no URLs.
    (out / "policy.txt").write_text(
        "\n".join(
            line.rsplit(" ", 1)[0] if line.startswith("witness") else line
            for line in policy.read_text().splitlines()
        )
        + "\n"
    )
    third = VKey("w3.example/witness", WITNESS_ED25519, Ed25519PrivateKey.generate().public_key())
    (out / "policy-three.txt").write_text(
        (out / "policy.txt")
        .read_text()
        .replace("group both all w1 w2", f"witness w3 {third.text()}\ngroup both all w1 w2 w3")
    )
    (out / "checkpoint-cosigned.note").write_text(cosigned)
    (out / "checkpoint-forked.note").write_text(forked)
    doc = json.loads((out / "bundle.json").read_bytes())
    env = json.loads(doc["entry"]["body"])
    payload = base64.b64decode(env["payload"]).replace(b"admission.case-0", b"admission.case-9")
    env["payload"] = base64.b64encode(payload).decode()
    doc["entry"]["body"] = json.dumps(env, separators=(",", ":"))
    from ledger.evidence.canonical import canonical_bytes

    (out / "bundle-tampered.json").write_bytes(canonical_bytes(doc))
    shutil.rmtree(tmp)
    n = name
    pem, pol = f"{n}/ledger.pub.pem", f"{n}/policy.txt"
    missing = "missing cosignatures from w1, w2"
    return [
        {"file": f"{n}/bundle.json", "kind": "bundle", "trust": [pem], "expect": "verified"},
        {"file": f"{n}/bundle.json", "kind": "bundle", "policy": pol, "expect": "verified"},
        {
            "file": f"{n}/bundle.json",
            "kind": "bundle",
            "policy": f"{n}/policy-three.txt",
            "expect": "refused",
            "reason": "missing cosignatures from w3 (cosigned by w1, w2)",
        },
        {
            "file": f"{n}/bundle.json",
            "kind": "bundle",
            "trust": [f"{n}/runner.pub.pem"],
            "expect": "verified",
        },
        {
            "file": f"{n}/bundle.tlog-proof",
            "kind": "tlog-proof",
            "entry": f"{n}/bundle.json",
            "policy": pol,
            "expect": "verified",
        },
        {
            "file": f"{n}/bundle.tlog-proof",
            "kind": "tlog-proof",
            "entry": f"{n}/bundle-tampered.json",
            "policy": pol,
            "expect": "refused",
            "reason": "not in the checkpointed log",
        },
        {
            "file": f"{n}/bundle-uncosigned.json",
            "kind": "bundle",
            "trust": [pem],
            "expect": "verified",
        },
        {
            "file": f"{n}/bundle-uncosigned.json",
            "kind": "bundle",
            "policy": pol,
            "expect": "refused",
            "reason": missing,
        },
        {
            "file": f"{n}/bundle-revoked.json",
            "kind": "bundle",
            "trust": [pem],
            "expect": "refused",
            "reason": "revoked",
        },
        {"file": f"{n}/bundle-forked.json", "kind": "bundle", "trust": [pem], "expect": "verified"},
        {
            "file": f"{n}/bundle-forked.json",
            "kind": "bundle",
            "policy": pol,
            "expect": "refused",
            "reason": missing,
        },
        {
            "file": f"{n}/bundle-tampered.json",
            "kind": "bundle",
            "trust": [pem],
            "expect": "refused",
            "reason": "bundle: ",
        },
        {
            "file": f"{n}/checkpoint-cosigned.note",
            "kind": "checkpoint",
            "trust": [pem],
            "policy": pol,
            "expect": "verified",
        },
        {
            "file": f"{n}/checkpoint-forked.note",
            "kind": "checkpoint",
            "trust": [pem],
            "expect": "verified",
        },
        {
            "file": f"{n}/checkpoint-forked.note",
            "kind": "checkpoint",
            "policy": pol,
            "expect": "refused",
            "reason": missing,
        },
    ]


def evidence() -> list[dict[str, Any]]:
    """One bundle of each committed evidence ledger, with its ledger key; and for the
    oldest, the policy verdict on a checkpoint signed before the origin-named form."""
    out = HERE / "evidence"
    out.mkdir(exist_ok=True)
    cases: list[dict[str, Any]] = []
    for run_dir in sorted((ROOT / "evidence").glob("*/bundles")):
        run = run_dir.parent.name
        first = sorted(run_dir.glob("*.json"))[0]
        bundle, pem = f"evidence/{run}-{first.name}", f"evidence/{run}-ledger.pub.pem"
        if (HERE / bundle).exists():
            continue
        shutil.copyfile(first, HERE / bundle)
        shutil.copyfile(run_dir.parent / "ledger.pub.pem", HERE / pem)
        cases.append({"file": bundle, "kind": "bundle", "trust": [pem], "expect": "verified"})
        if run == "h200-run1":
            origin = json.loads(first.read_text())["checkpoint"].split("\n")[0]
            pub = load_public_pem((HERE / pem).read_bytes())
            vkey = VKey(origin, LOG_ED25519, pub)
            policy = f"evidence/{run}-policy.txt"
            (HERE / policy).write_text(f"# {key_id(pub)[:12]}\nlog {vkey.text()}\nquorum none\n")
            cases.append(
                {
                    "file": bundle,
                    "kind": "bundle",
                    "policy": policy,
                    "expect": "refused",
                    "reason": "checkpoint has no signature by",
                }
            )
    return cases


if __name__ == "__main__":
    cases = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else []
    cases += evidence() if sys.argv[1:] == ["--evidence"] else today(sys.argv[1])
    MANIFEST.write_text(json.dumps(cases, indent=2) + "\n")
