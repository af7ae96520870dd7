"""Checkpoints as C2SP signed notes: format, signatures, and refusal of anything malformed."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger._internal.checkpoint import (
    Checkpoint,
    CheckpointError,
    NoteSignature,
    format_body,
    key_hint,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)
from ledger.store.store import Store
from tests.ledger.helpers import run

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes([7]) * 32)
NAME = "ledger.example"
ORIGIN = "ledger.example/log"
SIZE = 42
ROOT = hashlib.sha256(b"a root").digest()
ROOT_B64 = base64.b64encode(ROOT).decode()
BODY = f"{ORIGIN}\n{SIZE}\n{ROOT_B64}\n".encode()


def raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def sig_line(name: str, key: Ed25519PrivateKey, body: bytes) -> bytes:
    """A signature line built straight from the signed-note spec."""
    hint = hashlib.sha256(name.encode() + b"\n\x01" + raw(key.public_key())).digest()[:4]
    blob = base64.b64encode(hint + key.sign(body)).decode()
    return f"— {name} {blob}\n".encode()


def note() -> bytes:
    return sign_checkpoint(ORIGIN, SIZE, ROOT, key_name=NAME, private_key=KEY)


def verify(data: bytes, name: str = NAME, key: Ed25519PrivateKey = KEY) -> Checkpoint:
    return verify_checkpoint(data, key_name=name, public_key=key.public_key())


# --- format and round trip -------------------------------------------------------


def test_body_format() -> None:
    assert format_body(ORIGIN, SIZE, ROOT) == BODY
    assert format_body(ORIGIN, 0, ROOT).split(b"\n")[1] == b"0"


def test_sign_produces_body_blank_line_and_one_signature_line() -> None:
    assert note() == BODY + b"\n" + sig_line(NAME, KEY, BODY)


def test_round_trip() -> None:
    data = note()
    checkpoint = verify(data)
    assert (checkpoint.origin, checkpoint.size, checkpoint.root) == (ORIGIN, SIZE, ROOT)
    assert checkpoint.extensions == ()
    assert checkpoint.body == BODY
    [signature] = checkpoint.signatures
    assert signature == NoteSignature(NAME, key_hint(NAME, KEY.public_key()), signature.signature)
    KEY.public_key().verify(signature.signature, BODY)
    assert parse_checkpoint(data) == checkpoint


def test_checkpoint_is_frozen() -> None:
    checkpoint = parse_checkpoint(note())
    with pytest.raises(AttributeError):
        checkpoint.size = 1  # type: ignore[misc]


@pytest.mark.parametrize("size", [0, 1, 2**64 - 1])
def test_size_limits_round_trip(size: int) -> None:
    data = sign_checkpoint(ORIGIN, size, ROOT, key_name=NAME, private_key=KEY)
    assert verify(data).size == size


def test_signing_refuses_bad_arguments() -> None:
    def sign(origin: str = ORIGIN, size: int = SIZE, root: bytes = ROOT, name: str = NAME) -> bytes:
        return sign_checkpoint(origin, size, root, key_name=name, private_key=KEY)

    for kwargs in [
        {"origin": ""},
        {"origin": "two\nlines"},
        {"size": -1},
        {"size": 2**64},
        {"root": ROOT[:31]},
        {"name": ""},
        {"name": "has space"},
        {"name": "has+plus"},
    ]:
        with pytest.raises(ValueError):
            sign(**kwargs)  # type: ignore[arg-type]


def test_extension_lines_are_kept_and_signed() -> None:
    body = format_body(ORIGIN, SIZE, ROOT, extensions=["ext one", "ext two"])
    assert body == BODY + b"ext one\next two\n"
    checkpoint = verify(body + b"\n" + sig_line(NAME, KEY, body))
    assert checkpoint.extensions == ("ext one", "ext two")
    assert checkpoint.body == body
    with pytest.raises(CheckpointError, match="does not verify"):
        verify(body + b"\n" + sig_line(NAME, KEY, BODY))


def test_cosignatures_by_other_keys_are_ignored() -> None:
    data = note() + sig_line("witness.example", OTHER_KEY, BODY)
    assert verify(data).size == SIZE
    assert len(verify(data, "witness.example", OTHER_KEY).signatures) == 2


# --- reference data --------------------------------------------------------------


def test_key_hint_matches_go_sumdb_note() -> None:
    # golang.org/x/mod/sumdb/note test key:
    # PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz
    seed = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
    key = Ed25519PrivateKey.from_private_bytes(seed)
    assert (
        raw(key.public_key())
        == base64.b64decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")[1:]
    )
    assert key_hint("PeterNeumann", key.public_key()).hex() == "c74f20a3"
    text = (
        b"If you think cryptography is the answer to your problem,\n"
        b"then you don't know what your problem is.\n"
    )
    want = (
        "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXg"
        "KvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    )
    hint = key_hint("PeterNeumann", key.public_key())
    assert f"— PeterNeumann {base64.b64encode(hint + key.sign(text)).decode()}\n" == want


# A checkpoint of the Go checksum database, from transparency-dev/formats' tests.
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = (
    "go.sum database tree\n"
    "6476701\n"
    "mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n"
    "\n"
    "— sum.golang.org Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfv"
    "imWEPWL+o3GeoWwOoAw=\n"
).encode()


def test_verifies_a_go_sumdb_checkpoint() -> None:
    name, hint_hex, key_b64 = SUMDB_VKEY.split("+", 2)
    public_key = Ed25519PublicKey.from_public_bytes(base64.b64decode(key_b64)[1:])
    assert key_hint(name, public_key).hex() == hint_hex
    checkpoint = verify_checkpoint(SUMDB_NOTE, key_name=name, public_key=public_key)
    assert (checkpoint.origin, checkpoint.size) == ("go.sum database tree", 6476701)
    assert base64.b64encode(checkpoint.root) == b"mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk="
    with pytest.raises(CheckpointError, match="does not verify"):
        verify_checkpoint(
            SUMDB_NOTE.replace(b"6476701", b"6476702"), key_name=name, public_key=public_key
        )


# --- tampering and wrong keys ------------------------------------------------------


def test_every_bit_flip_anywhere_is_refused() -> None:
    data = note()
    for i in range(len(data)):
        for bit in (0x01, 0x20):
            tampered = data[:i] + bytes([data[i] ^ bit]) + data[i + 1 :]
            with pytest.raises(CheckpointError):
                verify(tampered)


def test_tampered_body_fails_the_signature() -> None:
    data = note()
    for old, new in [(b"42", b"43"), (ORIGIN.encode(), b"ledger.example/lag")]:
        with pytest.raises(CheckpointError, match="does not verify"):
            verify(data.replace(old, new, 1))
    other_root = base64.b64encode(hashlib.sha256(b"another root").digest())
    with pytest.raises(CheckpointError, match="does not verify"):
        verify(data.replace(ROOT_B64.encode(), other_root))


def test_tampered_signature_bytes_fail() -> None:
    data = note()
    prefix, blob = data.rsplit(b" ", 1)
    sig = bytearray(base64.b64decode(blob))
    sig[4 + 10] ^= 0x01
    with pytest.raises(CheckpointError, match="does not verify"):
        verify(prefix + b" " + base64.b64encode(bytes(sig)) + b"\n")
    sig = bytearray(base64.b64decode(blob))
    sig[0] ^= 0x01
    with pytest.raises(CheckpointError, match="different key"):
        verify(prefix + b" " + base64.b64encode(bytes(sig)) + b"\n")


def test_wrong_key_is_refused() -> None:
    with pytest.raises(CheckpointError, match=re.escape("different key named 'ledger.example'")):
        verify(note(), NAME, OTHER_KEY)


def test_wrong_name_is_refused() -> None:
    with pytest.raises(CheckpointError, match=re.escape("no signature by 'other.example'")):
        verify(note(), "other.example", KEY)
    with pytest.raises(CheckpointError, match="invalid key name"):
        verify(note(), "bad name", KEY)


def test_signature_under_a_name_with_another_key_is_refused() -> None:
    forged = BODY + b"\n" + sig_line(NAME, OTHER_KEY, BODY)
    with pytest.raises(CheckpointError, match="different key"):
        verify(forged)


def test_every_line_of_the_key_must_verify() -> None:
    # A second line carrying this key's name and hint but a bad signature.
    hint = key_hint(NAME, KEY.public_key())
    bogus = f"— {NAME} {base64.b64encode(hint + bytes(64)).decode()}\n".encode()
    with pytest.raises(CheckpointError, match="does not verify"):
        verify(note() + bogus)
    short = f"— {NAME} {base64.b64encode(hint + bytes(10)).decode()}\n".encode()
    with pytest.raises(CheckpointError, match="10 bytes, not 64"):
        verify(note() + short)


# --- malformed notes ---------------------------------------------------------------

SIG = sig_line(NAME, KEY, BODY)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (BODY + SIG, "lacks the blank line"),
        (BODY, "lacks the blank line"),
        (BODY + b"\n", "no signature lines"),
        (BODY + b"\n" + SIG[:-1], "does not end with a newline"),
        (f"{ORIGIN}\n4x2\n{ROOT_B64}\n\n".encode() + SIG, "'4x2' is not a decimal integer"),
        (f"{ORIGIN}\n-1\n{ROOT_B64}\n\n".encode() + SIG, "is not a decimal integer"),
        (f"{ORIGIN}\n042\n{ROOT_B64}\n\n".encode() + SIG, "is not a decimal integer"),
        (f"{ORIGIN}\n 42\n{ROOT_B64}\n\n".encode() + SIG, "is not a decimal integer"),
        (f"{ORIGIN}\n\n{ROOT_B64}\n\n".encode() + SIG, "is not a decimal integer"),
        (f"{ORIGIN}\n{2**64}\n{ROOT_B64}\n\n".encode() + SIG, "exceeds 2\\*\\*64-1"),
        (f"{ORIGIN}\n42\n!!not base64!!\n\n".encode() + SIG, "bad base64"),
        (f"{ORIGIN}\n42\n{ROOT_B64[:-1]}\n\n".encode() + SIG, "bad base64"),
        (f"{ORIGIN}\n42\n{ROOT_B64[:-2]}B=\n\n".encode() + SIG, "non-canonical base64"),
        (f"{ORIGIN}\n42\n{base64.b64encode(ROOT[:31]).decode()}\n\n".encode() + SIG, "31 bytes"),
        (f"{ORIGIN}\n42\n\n".encode() + SIG, "needs origin, size and root"),
        (f"\n42\n{ROOT_B64}\n\n".encode() + SIG, "origin is empty"),
        (BODY + b"\next\n\n" + SIG, "empty line"),
        (BODY.replace(b"\n", b"\r\n") + b"\r\n" + SIG, "control characters"),
        (BODY + b"\n" + SIG.replace("—".encode(), b"-"), "does not start with"),
        (BODY + b"\n" + SIG.replace(b" ", b"", 1), "does not start with"),
        (BODY + b"\n" + f"— {NAME}\n".encode(), "no signature after the name"),
        (BODY + b"\n" + f"— {NAME} \n".encode(), "no signature after the name"),
        (BODY + b"\n" + SIG.replace(NAME.encode(), b"a+b"), "invalid key name 'a\\+b'"),
        (BODY + b"\n" + f"— {NAME} AAAA\n".encode(), "too short"),
        (BODY + b"\n" + f"— {NAME} AAAAAA==\n".encode(), "too short"),
        (BODY + b"\n" + SIG + b"\n", "no signature lines"),
        (BODY + b"\n" + SIG * 101, "more than 100 signatures"),
        (b"\xff" + BODY + b"\n" + SIG, "not UTF-8"),
    ],
)
def test_malformed_notes_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CheckpointError, match=reason):
        parse_checkpoint(data)
    with pytest.raises(CheckpointError, match=reason):
        verify(data)


def test_reasons_are_one_line() -> None:
    try:
        parse_checkpoint(BODY + b"\n" + SIG.replace(NAME.encode(), b"a\x0bb"))
    except CheckpointError as exc:
        assert "\n" not in str(exc)
    else:
        raise AssertionError("control character accepted")


# -- rotation, forks and replays ----------------------------------------------------


def _record(capsys: pytest.CaptureFixture[str], db: str, tmp: Path, key: Any, n: int) -> str:
    from tests.ledger.factories import envelope as make_envelope

    f = tmp / f"env-{n}.json"
    f.write_bytes(make_envelope(key, claim=f"claim.{n}"))
    r = run(capsys, "record", str(f), "--db", db)
    assert r.code == 0, r.err
    return r.out.split()[0]


def test_rotated_ledger_key_keeps_old_checkpoints_verifying(
    db_url: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.evidence.keys import KeyDir
    from ledger.transparency.audit import audit

    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args, "--db", db_url).code == 0
    runner = KeyDir(key_dir).load("runner")
    first = _record(capsys, db_url, tmp_path, runner, 1)
    old_cp = run(capsys, "log", "checkpoint", "--db", db_url).out
    old_pem = tmp_path / "old.pem"
    old_pem.write_text(run(capsys, "keys", "export", "ledger", "--db", db_url).out)
    r = run(capsys, "keys", "rotate-ledger", "--db", db_url)
    assert r.code == 0, r.err
    second = _record(capsys, db_url, tmp_path, runner, 2)
    new_cp = run(capsys, "log", "checkpoint", "--db", db_url)
    assert new_cp.code == 0, new_cp.err
    # Signed by the new ledger key (under the log's origin), not the old one.
    from ledger._internal.checkpoint import verify_by_key

    origin = new_cp.out.split("\n")[0]
    # No extension lines since the timestamp line went (a default tlog-witness refuses them).
    assert f"\n— {origin} " in new_cp.out and "timestamp " not in new_cp.out
    verify_by_key(new_cp.out.encode(), KeyDir(key_dir).load("ledger-2").public)
    with pytest.raises(CheckpointError):
        verify_by_key(new_cp.out.encode(), KeyDir(key_dir).load("ledger").public)
    old_size, new_size = int(old_cp.split("\n")[1]), int(new_cp.out.split("\n")[1])
    for args in (
        ("log", "proof", first),
        ("log", "proof", second),
        ("log", "consistency", str(old_size), str(new_size)),
    ):
        got = run(capsys, *args, "--db", db_url)
        assert got.code == 0, (args, got.err)
    new_pem = tmp_path / "new.pem"
    new_pem.write_text(run(capsys, "keys", "export", "ledger-2", "--db", db_url).out)
    for rid in (first, second):
        out = tmp_path / f"{rid[7:19]}.bundle.json"
        assert run(capsys, "export", rid, "-o", str(out), "--db", db_url).code == 0
        v = run(capsys, "verify", str(out), "--trust", str(new_pem))
        assert v.code == 0, v.err
    store = Store.open(db_url)
    rep = audit(store)
    assert rep.ok, rep.problems
    store.engine.dispose()


def test_two_diverging_copies_are_caught(
    key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.evidence.keys import KeyDir

    a = tmp_path / "a.db"
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args, "--db", str(a)).code == 0
    runner = KeyDir(key_dir).load("runner")
    receipt = _record(capsys, str(a), tmp_path, runner, 1)
    assert run(capsys, "log", "checkpoint", "--db", str(a)).code == 0
    bundle = tmp_path / "bundle.json"
    assert run(capsys, "export", receipt, "-o", str(bundle), "--db", str(a)).code == 0
    b = tmp_path / "b.db"
    copy_db(a, b)
    # The copies diverge: each logs a different receipt and signs its own root.
    _record(capsys, str(a), tmp_path, runner, 2)
    _record(capsys, str(b), tmp_path, runner, 3)
    cp_a = tmp_path / "a.cp"
    cp_b = tmp_path / "b.cp"
    cp_a.write_text(run(capsys, "log", "checkpoint", "--db", str(a)).out)
    cp_b.write_text(run(capsys, "log", "checkpoint", "--db", str(b)).out)
    assert cp_a.read_text().split("\n")[1] == cp_b.read_text().split("\n")[1]  # same size

    state = tmp_path / "witness.json"
    w = run(capsys, "log", "witness", "--state", str(state), "--db", str(a))
    assert w.code == 0, w.err
    fork = run(capsys, "log", "witness", "--state", str(state), "--db", str(b))
    assert fork.code == 1 and "fork" in fork.err, fork.err
    assert fork.err.count(" root ") >= 2  # both roots printed
    # A's checkpoint is no prefix of B's log.
    c = run(capsys, "log", "consistency", "--from", str(cp_a), "--db", str(b))
    assert c.code == 1 and "fork" in c.err, c.err
    ok = run(capsys, "log", "consistency", "--from", str(cp_a), "--db", str(a), "--json")
    assert ok.code == 0, ok.err
    # The bundle's checkpoint (size 3) is a prefix of A's, not of B's.
    pem = tmp_path / "ledger.pem"
    pem.write_text(run(capsys, "keys", "export", "ledger", "--db", str(a)).out)
    proof_a = tmp_path / "proof-a.json"
    size = json.loads(bundle.read_text())["checkpoint"].split("\n")[1]
    doc = json.loads(
        run(
            capsys,
            "log",
            "consistency",
            "--from",
            str(bundle_cp(bundle, tmp_path)),
            "--db",
            str(a),
            "--json",
        ).out
    )
    assert str(doc["old"]) == size
    proof_a.write_text(json.dumps(doc))
    v = run(capsys, "verify", str(bundle), "--trust", str(pem), "--checkpoint", str(proof_a))
    # Consistent; but what was logged after the bundle's checkpoint (a revocation) is
    # unseen, so the key's status after it is unknown, and said (ledger.verify.facts).
    assert "log: consistent with the trusted checkpoint" in v.out, v.out
    assert v.code == 1 and "key status: unknown after checkpoint 3" in v.err, v.err
    v = run(capsys, "verify", str(bundle), "--trust", str(pem), "--checkpoint", str(cp_b))
    assert v.code == 1, v.err
    # A rollback: B witnessed, then the older checkpoint of size 3 again.
    replay_state = tmp_path / "replay.json"
    assert run(capsys, "log", "witness", "--state", str(replay_state), "--db", str(b)).code == 0
    replay_state.write_text(json.dumps({"checkpoint": cp_b.read_text()}))
    copy_db(a, b)  # B rolled back to A... which has another root at the same size
    assert run(capsys, "log", "witness", "--state", str(replay_state), "--db", str(b)).code == 1


def bundle_cp(bundle: Path, tmp: Path) -> Path:
    out = tmp / "bundle.cp"
    out.write_text(json.loads(bundle.read_text())["checkpoint"])
    return out


def copy_db(src: Path, dst: Path) -> None:
    """A consistent copy of a WAL-mode SQLite ledger (the file alone may lag its WAL)."""
    import sqlite3

    with sqlite3.connect(src) as s, sqlite3.connect(dst) as d:
        s.backup(d)
