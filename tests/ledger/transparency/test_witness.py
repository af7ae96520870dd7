"""`ledger witness serve` by C2SP tlog-witness, and the log collecting its cosignatures."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger._internal import merkle
from ledger._internal.checkpoint import parse_checkpoint, sign_checkpoint
from ledger.transparency.collect import request_body
from ledger.transparency.cosignature import cosigned_by
from ledger.transparency.policy import parse_policy
from ledger.transparency.vkey import parse_vkey
from ledger.transparency.witness import SIZE_TYPE
from tests.ledger.transparency.conftest import Ledger, Witnesses, ok


def post(url: str, body: bytes) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url + "/add-checkpoint", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def cosigners(note: str, policy: Path) -> set[str]:
    return parse_policy(policy.read_bytes()).check(note.encode())[1]


def test_two_witnesses_cosign_each_checkpoint(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path
) -> None:
    ledger.record(3)
    first = ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    assert "witness w1: cosigned" in first.err and "witness w2: cosigned" in first.err
    assert cosigners(first.out, policy_file) == {"w1", "w2"}
    # The next one goes with a consistency proof from the size each witness holds.
    ledger.record(4)
    second = ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    cp = parse_checkpoint(second.out.encode())
    assert cp.size == 9 and cosigners(second.out, policy_file) == {"w1", "w2"}
    # Each cosignature is a timestamped cosignature/v1 over the body, key id of type 0x04.
    for n in witnesses.names:
        assert cosigned_by(cp, witnesses.witness(n).vkey) is not None
    # Stored: the bundle of a receipt carries the cosigned checkpoint.
    store = ledger.store()
    assert len(store.cosignatures(9)) == 2


def test_add_checkpoint_answers_by_the_spec(ledger: Ledger, witnesses: Witnesses) -> None:
    """404 unknown origin, 403 bad log signature, 400 old > new or a bad body,
    409 (with the stored size, text/x.tlog.size) for a stale old size or
    another root at the same size, 422 for a bad proof, 200 with a cosignature."""
    ledger.record(3)
    store = ledger.store()
    note3 = ok(ledger("log", "checkpoint")).out.encode()
    ledger.record(2)
    note6 = ok(ledger("log", "checkpoint")).out.encode()
    leaves = store.leaf_hashes()
    url = witnesses.urls["w1"]
    cp3, cp6 = parse_checkpoint(note3), parse_checkpoint(note6)
    n3, n6 = cp3.size, cp6.size

    stranger = Ed25519PrivateKey.generate()
    unknown = sign_checkpoint(
        "other.example/log", n3, cp3.root, key_name="other.example/log", private_key=stranger
    )
    assert post(url, request_body(0, [], unknown))[0] == 404
    forged = sign_checkpoint(cp3.origin, n3, cp3.root, key_name=cp3.origin, private_key=stranger)
    assert post(url, request_body(0, [], forged))[0] == 403
    assert post(url, request_body(n3 + 1, [], note3))[0] == 400
    assert post(url, b"old 01\n\n" + note3)[0] == 400
    assert post(url, b"old 0\n" + b"AAAA\n" * 64 + b"\n" + note3)[0] == 400

    status, ctype, body = post(url, request_body(0, [], note3))
    assert status == 200 and ctype.startswith("text/plain")
    line = body.decode()
    assert line.startswith("— w1.example/witness ") and line.endswith("\n")
    blob = base64.b64decode(line.split()[-1])
    assert len(blob) == 4 + 8 + 64 and blob[:4] == witnesses.witness("w1").vkey.id

    # The stored size is n3 now: any other old size gets it back.
    assert post(url, request_body(0, [], note6)) == (409, SIZE_TYPE, b"%d\n" % n3)
    assert post(url, request_body(n3 - 1, [], note6)) == (409, SIZE_TYPE, b"%d\n" % n3)
    # Another root at the stored size.
    other_root = sign_checkpoint(
        cp3.origin,
        n3,
        merkle.root(leaves[1 : n3 + 1]),
        key_name=cp3.origin,
        private_key=_ledger_key(ledger),
    )
    assert post(url, request_body(n3, [], other_root))[0] == 409
    # A proof that does not lead from the stored root.
    good = merkle.consistency_proof(n3, n6, leaves)
    bad = [bytes(32), *good[1:]]
    assert post(url, request_body(n3, bad, note6))[0] == 422
    assert post(url, request_body(n3, good, note6))[0] == 200
    # A stale request after the newer one: refused, the size is never rolled back.
    assert post(url, request_body(0, [], note3)) == (409, SIZE_TYPE, b"%d\n" % n6)


def _ledger_key(ledger: Ledger) -> Ed25519PrivateKey:
    from ledger.evidence.keys import KeyDir

    return KeyDir(ledger.keys).load("ledger").private


def test_a_witness_down_delays_only_its_own_cosignature(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path
) -> None:
    ledger.record(2)
    witnesses.stop("w2")
    r = ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    assert "witness w1: cosigned" in r.err and "witness w2: unreachable" in r.err
    assert "— w1.example/witness " in r.out and "— w2.example/witness " not in r.out
    # Back up: the next round asks it again and it cosigns the same checkpoint.
    witnesses.start("w2")
    r = ok(ledger("log", "cosign", "--witnesses", str(policy_file)))
    assert "witness w1: cosigned before" in r.err and "witness w2: cosigned" in r.err
    assert cosigners(r.out, policy_file) == {"w1", "w2"}


def test_a_restarted_witness_answers_409_and_recovers(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path, tmp_path: Path
) -> None:
    """w1 comes back from an older copy of its state: the log's request from the
    size w1 last cosigned is answered 409 with w1's stored size, and the log
    resubmits from that size with the matching proof."""
    ledger.record(2)
    held = parse_checkpoint(
        ok(ledger("log", "checkpoint", "--witnesses", str(policy_file))).out.encode()
    ).size
    witnesses.backup("w1", tmp_path / "w1-at-2.sqlite")
    ledger.record(3)
    last = parse_checkpoint(
        ok(ledger("log", "checkpoint", "--witnesses", str(policy_file))).out.encode()
    ).size
    witnesses.stop("w1")
    (tmp_path / "w1-at-2.sqlite").replace(witnesses.state("w1"))
    witnesses.start("w1")
    ledger.record(1)
    note = ok(ledger("log", "checkpoint")).out.encode()
    # What the log sends first, from the size its record says w1 holds.
    answer = post(witnesses.urls["w1"], request_body(last, [], note))
    assert answer == (409, SIZE_TYPE, b"%d\n" % held)
    r = ok(ledger("log", "cosign", "--witnesses", str(policy_file)))
    assert "witness w1: cosigned" in r.err
    assert cosigners(r.out, policy_file) == {"w1", "w2"}


def test_witness_cli_prints_its_vkey_and_refuses_a_bad_config(
    ledger: Ledger, tmp_path: Path
) -> None:
    r = ok(ledger("log", "vkey"))
    assert parse_vkey(r.out.strip()).name.startswith("ledger/")
    from tests.ledger.helpers import run

    v = run(ledger.capsys, "witness", "vkey", "--name", "w.example/1", "--key", "wit")
    assert v.code == 0 and v.out.startswith("w.example/1+")
    again = run(ledger.capsys, "witness", "vkey", "--name", "w.example/1", "--key", "wit")
    assert again.out == v.out
    bad = tmp_path / "logs.txt"
    bad.write_text("log not-a-vkey\n")
    s = run(
        ledger.capsys,
        "witness",
        "serve",
        "--name",
        "w.example/1",
        "--key",
        "wit",
        "--logs",
        str(bad),
        "--state",
        str(tmp_path / "s.sqlite"),
    )
    assert s.code in (1, 2) and s.err.count("\n") == 1 and "witness config line 1" in s.err


@pytest.mark.parametrize("again", [False, True])
def test_cosigned_note_verifies_with_the_witness_key_only(
    ledger: Ledger, witnesses: Witnesses, again: bool
) -> None:
    """First from size 0, or again at the size it holds (same root: cosigned anew)."""
    ledger.record(3)
    note = ok(ledger("log", "checkpoint")).out.encode()
    old = parse_checkpoint(note).size if again else 0
    if again:
        assert post(witnesses.urls["w1"], request_body(0, [], note))[0] == 200
    status, _, line = post(witnesses.urls["w1"], request_body(old, [], note))
    assert status == 200
    cp = parse_checkpoint(note + line)
    assert cosigned_by(cp, witnesses.witness("w1").vkey) is not None
    assert cosigned_by(cp, witnesses.witness("w2").vkey) is None


def test_serve_has_each_checkpoint_it_signs_cosigned_and_serves_it(
    ledger: Ledger,
    witnesses: Witnesses,
    policy_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger.evidence.keys import KeyDir
    from ledger.remote import client
    from ledger.service.auth import new_token
    from ledger.service.run import start
    from ledger.store.store import resolve_url

    ledger.record(2)
    monkeypatch.setenv("LEDGER_WITNESSES", str(policy_file))
    tokens = tmp_path / "tokens"
    operator = new_token("operator", tokens, ["operator"])
    server = start(resolve_url(ledger.db), KeyDir(ledger.keys), tokens=tokens)
    try:
        signed = client.sign_checkpoint(server.url, operator)
        assert cosigners(signed.decode(), policy_file) == {"w1", "w2"}
        with urllib.request.urlopen(server.url + "/v1/checkpoint", timeout=30) as r:
            assert r.read() == signed
        # A reviewer following the server under the policy accepts it.
        state = str(tmp_path / "seen.json")
        from tests.ledger.helpers import run

        seen = run(
            ledger.capsys,
            "log",
            "witness",
            "--state",
            state,
            "--server",
            server.url,
            "--policy",
            str(policy_file),
        )
        assert seen.code == 0, seen.err
        assert "quorum 'both' met" in seen.out
    finally:
        server.stop()


def test_the_audit_checks_every_kept_cosignature(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path
) -> None:
    from sqlalchemy import text

    from ledger.store.triggers import drop_append_only_triggers

    ledger.record(2)
    ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    assert ok(ledger("audit"))
    store = ledger.store()
    with store.engine.begin() as conn:
        drop_append_only_triggers(conn)
        # w1's line moved onto w2's row: a cosignature that its row's key did not make.
        lines = dict(conn.execute(text("SELECT witness, line FROM cosignature")).all())
        w1, w2 = (witnesses.witness(n).vkey.text() for n in ("w1", "w2"))
        conn.execute(
            text("UPDATE cosignature SET line = :l WHERE witness = :w"), {"l": lines[w1], "w": w2}
        )
    r = ledger("audit")
    assert r.code == 1
    assert "cosignature of w2.example/witness on checkpoint" in r.out
    assert "does not verify over the checkpoint" in r.out


def test_witness_serve_answers_once_it_says_where(
    ledger: Ledger, tmp_path: Path, key_dir: Path
) -> None:
    """The command itself: it prints its vkey and URL when bound (the test waits on
    that line, not on time), cosigns, and stops on SIGINT."""
    import os
    import signal
    import subprocess
    import sys

    vkey = ok(ledger("log", "vkey")).out.strip()
    logs = tmp_path / "logs.txt"
    logs.write_text(f"log {vkey}\n")
    ledger.record(1)
    note = ok(ledger("log", "checkpoint")).out.encode()
    args = ["--name", "w.example/cli", "--key", "wcli", "--logs", str(logs)]
    args += ["--state", str(tmp_path / "w.sqlite"), "--port", "0"]
    env = {**os.environ, "LEDGER_KEYS": str(key_dir)}
    p = subprocess.Popen(
        [sys.executable, "-m", "ledger", "witness", "serve", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert p.stderr is not None
        ready = p.stderr.readline()
        assert ready.startswith("witness w.example/cli+"), ready
        url = ready.split(" at ")[1].strip()
        status, _, line = post(url, request_body(0, [], note))
        assert status == 200
        w_vkey = parse_vkey(ready.split()[1])
        assert cosigned_by(parse_checkpoint(note + line), w_vkey) is not None
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)


def test_after_a_ledger_key_rotation_both_keys_are_followed(
    ledger: Ledger, witnesses: Witnesses, policy_file: Path
) -> None:
    ledger.record(2)
    ok(ledger("log", "checkpoint", "--witnesses", str(policy_file)))
    old_vkey = ok(ledger("log", "vkey")).out.strip()
    ok(ledger("keys", "rotate-ledger"))
    new_vkey = ok(ledger("log", "vkey")).out.strip()
    assert parse_vkey(new_vkey).name == parse_vkey(old_vkey).name  # the origin stays
    ledger.record(1)
    # Witnesses that know only the old key refuse the new checkpoint (403): the quorum
    # is refused, exit 1, and nothing suggests a fork.
    r = ledger("log", "checkpoint", "--witnesses", str(policy_file))
    assert "witness w1: HTTP 403" in r.err
    assert r.code == 1 and "refused the quorum 'both'" in r.err and "fork" not in r.err
    witnesses.logs += f"log {new_vkey}\n".encode()
    for n in witnesses.names:
        witnesses.stop(n)
        witnesses.start(n)
    policy_file.write_text(policy_file.read_text().replace("\n", f"\nlog {new_vkey}\n", 1))
    r = ok(ledger("log", "cosign", "--witnesses", str(policy_file)))
    assert cosigners(r.out, policy_file) == {"w1", "w2"}
