"""Verifiers enforce a C2SP tlog-policy: `verify` and `log witness` refuse a
checkpoint without the quorum; `export --proof` writes a C2SP tlog-proof."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.evidence.errors import InputError, VerificationError
from ledger.transparency.policy import parse_policy
from ledger.transparency.proof import parse_proof
from ledger.transparency.vkey import LOG_ED25519, WITNESS_ED25519, VKey
from tests.ledger.helpers import run
from tests.ledger.transparency import independent
from tests.ledger.transparency.conftest import Ledger, Witnesses, ok


def _vk(name: str, kind: int) -> str:
    return VKey(name, kind, Ed25519PrivateKey.generate().public_key()).text()


def test_policy_grammar_by_the_spec() -> None:
    x = [_vk(f"x{i}.example", WITNESS_ED25519) for i in range(3)]
    y = [_vk(f"y{i}.example", WITNESS_ED25519) for i in range(3)]
    text = "\n".join(
        [
            "# the spec's example, two levels of groups",
            f"  log {_vk('log.example/1', LOG_ED25519)} https://log.example/",
            *(f"witness X{i + 1}\t{k}" for i, k in enumerate(x)),
            "group X-witnesses 2 X1 X2 X3",
            *(f"witness Y{i + 1} {k}" for i, k in enumerate(y)),
            "group Y-witnesses any Y1 Y2 Y3",
            "group X-and-Y all X-witnesses Y-witnesses",
            "quorum X-and-Y",
        ]
    )
    p = parse_policy(text.encode())
    assert p.quorum == "X-and-Y" and len(p.logs) == 1 and len(p.witnesses) == 6
    assert p.witnessed("X-and-Y", {"X1", "X3", "Y2"})
    assert not p.witnessed("X-and-Y", {"X1", "Y2"})
    assert not p.witnessed("X-and-Y", {"X1", "X2", "X3"})
    assert parse_policy(b"quorum none\n").witnessed("none", set())


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "no quorum line"),
        ("quorum w\n", "not a witness or group defined above"),
        ("witness w {w}\nquorum w\nquorum w\n", "a second quorum line"),
        ("witness w {w}\nwitness v {w}\nquorum w\n", "duplicate key"),
        ("witness w {w}\ngroup g 2 w\nquorum g\n", "threshold"),
        ("witness w {w}\ngroup g 0 w\nquorum g\n", "threshold"),
        ("witness w {w}\ngroup g any w w\nquorum g\n", "listed twice"),
        ("witness w {w}\ngroup g any none\nquorum g\n", "not a witness or group"),
        ("witness none {w}\nquorum none\n", "reserved"),
        ("witness w {log}\nquorum w\n", "expected 0x04"),
        ("log {w}\nquorum none\n", "expected 0x01"),
        ("witness w {w}\x0b\nquorum w\n", "control characters"),
        ("frobnicate\nquorum none\n", "unknown keyword"),
    ],
)
def test_policy_refusals(body: str, reason: str) -> None:
    text = body.format(w=_vk("w.example", WITNESS_ED25519), log=_vk("l.example", LOG_ED25519))
    with pytest.raises(InputError, match=reason):
        parse_policy(text.encode())


def _fork(ledger: Ledger, tmp_path: Path) -> Ledger:
    """A copy of the ledger's database as it is now: the same keys, the same
    origin, to be grown apart from the honest one."""
    copy = tmp_path / "fork.db"
    with sqlite3.connect(ledger.db) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    return Ledger(str(copy), ledger.keys, tmp_path, ledger.capsys, count=100)


def test_a_forked_log_is_refused_under_a_2_of_2_policy(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path, tmp_path: Path
) -> None:
    cosign = ("log", "checkpoint", "--witnesses", str(policy_file))
    ledger.record(2)
    ok(ledger(*cosign))
    fork = _fork(ledger, tmp_path)
    [honest] = ledger.record(1)
    ok(ledger(*cosign))
    # The operator shows another history to another reviewer: same size, another entry.
    [forged] = fork.record(1)
    refused = fork(*cosign)
    assert "witness w1: HTTP 409" in refused.err and "witness w2: HTTP 409" in refused.err
    # Both refused: the command fails, naming them, and prints no note to take for witnessed.
    assert refused.code == 1 and refused.out == "", refused.err
    last = refused.err.strip().splitlines()[-1]
    assert "refused the quorum 'both' at size 5: w1 (HTTP 409" in last and "w2 (HTTP 409" in last
    assert "suggests a fork" in last
    for lg, rid, name in ((ledger, honest, "honest"), (fork, forged, "forged")):
        ok(lg("export", rid, "-o", str(tmp_path / f"{name}.json")))

    good = run(ledger.capsys, "verify", str(tmp_path / "honest.json"), "--policy", str(policy_file))
    assert good.code == 0, good.err
    assert "witnesses: quorum 'both' met" in good.out and "cosigned by w1, w2" in good.out
    bad = run(ledger.capsys, "verify", str(tmp_path / "forged.json"), "--policy", str(policy_file))
    assert bad.code == 1 and bad.err.count("\n") == 1
    assert "missing cosignatures from w1, w2" in bad.err
    # Without a policy the forged bundle holds up: the ledger key signed it.
    r = run(ledger.capsys, "verify", str(tmp_path / "forged.json"), "--trust", _pem(ledger))
    assert r.code == 0, r.err
    # In the ledgers themselves, by id.
    assert ok(ledger("verify", honest, "--policy", str(policy_file)))
    # Which witnesses, and when they cosigned: facts of the verification, in the ledger too.
    doc = json.loads(ok(ledger("verify", honest, "--policy", str(policy_file), "--json")).out)
    assert doc["facts"]["witnesses"]["quorum"] == ["w1", "w2"]
    assert doc["facts"]["witnesses"]["required"] is True
    assert doc["checkpoint"]["time_from"] == "witnesses"
    r = fork("verify", forged, "--policy", str(policy_file))
    assert r.code == 1 and "missing cosignatures from w1, w2" in r.err


def _pem(ledger: Ledger) -> str:
    p = ledger.tmp / "ledger.pem"
    p.write_text(ok(ledger("keys", "export", "ledger")).out)
    return str(p)


def test_log_witness_refuses_a_checkpoint_without_the_quorum(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path, tmp_path: Path
) -> None:
    state = str(tmp_path / "seen.json")
    ledger.record(2)
    ok(ledger("log", "checkpoint"))
    r = ledger("log", "witness", "--state", state, "--policy", str(policy_file))
    assert r.code == 1 and r.err.count("\n") == 1
    assert "missing cosignatures from w1, w2 (cosigned by none)" in r.err
    assert not Path(state).exists()
    witnesses.stop("w2")
    ok(ledger("log", "cosign", "--witnesses", str(policy_file)))
    r = ledger("log", "witness", "--state", state, "--policy", str(policy_file))
    assert r.code == 1 and "missing cosignatures from w2 (cosigned by w1)" in r.err
    witnesses.start("w2")
    ok(ledger("log", "cosign", "--witnesses", str(policy_file)))
    r = ok(ledger("log", "witness", "--state", state, "--policy", str(policy_file)))
    assert "quorum 'both' met" in r.out


# The tlog-proof grammar, from the spec: header, optional extra, index (no leading
# zeroes), zero or more base64 SHA-256 hashes, an empty line, then the checkpoint.
_B64_HASH = r"[A-Za-z0-9+/]{43}="
_GRAMMAR = re.compile(
    r"c2sp\.org/tlog-proof@v1\n"
    r"(extra [A-Za-z0-9+/]*={0,2}\n)?"
    r"index (0|[1-9][0-9]*)\n"
    rf"({_B64_HASH}\n)*"
    r"\n"
    r"(?P<checkpoint>[^\n]+\n(0|[1-9][0-9]*)\n"
    + _B64_HASH
    + r"\n([^\n]+\n)*\n(\u2014 [^\s+]+ [A-Za-z0-9+/]+=*\n)+)",
)


def test_the_tlog_proof_of_a_real_receipt_verifies_offline_with_the_policy(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path, tmp_path: Path
) -> None:
    [rid] = ledger.record(1)
    ledger.record(2)
    ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    out = tmp_path / "receipt.json"
    r = ok(ledger("export", rid, "-o", str(out), "--proof"))
    proof_file = tmp_path / "receipt.tlog-proof"
    assert f"wrote {proof_file}" in r.out
    data = proof_file.read_bytes()
    assert _GRAMMAR.fullmatch(data.decode()), data.decode()
    bundle = json.loads(out.read_bytes())
    assert data.decode().endswith(bundle["checkpoint"])
    # The independent implementation: leaf rule, RFC 6962 path, note, vkeys, quorum.
    body = bundle["entry"]["body"].encode()
    assert independent.check_proof(data, body, policy_file.read_text()) == {"w1", "w2"}
    # A changed entry, index or logging time does not verify.
    p = parse_proof(data)
    with pytest.raises(AssertionError):
        independent.check_proof(data, body + b" ", policy_file.read_text())
    moved = data.replace(b"index %d\n" % p.leaf_index, b"index %d\n" % (p.leaf_index + 1))
    with pytest.raises(AssertionError):
        independent.check_proof(moved, body, policy_file.read_text())
    # And a policy naming a third witness no one asked is not met.
    third = policy_file.read_text().replace(
        "group both all w1 w2",
        f"witness w3 {_vk('w3.example', WITNESS_ED25519)}\ngroup both all w1 w2 w3",
    )
    with pytest.raises(AssertionError, match="policy not met"):
        independent.check_proof(data, body, third)
    with pytest.raises(VerificationError, match="missing cosignatures from w3"):
        parse_policy(third.encode()).check(p.checkpoint)
