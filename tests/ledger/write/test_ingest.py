"""Verify on ingest: every bad input is refused with one line, exit 1, nothing written."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.evidence.dsse import MAX_ENVELOPE_BYTES
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.store.store import Store
from tests.ledger.factories import dump, envelope
from tests.ledger.helpers import run


@pytest.fixture
def ledger_env(
    db_url: str, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Store, LocalKey, LocalKey]:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner1", "--role", "runner").code == 0
    assert run(capsys, "keys", "new", "rev1", "--role", "reviewer").code == 0
    kd = KeyDir(key_dir)
    return Store.open(db_url), kd.load("runner1"), kd.load("rev1")


def _mut(raw: bytes, fn: Callable[[dict[str, object]], None]) -> bytes:
    d = json.loads(raw)
    fn(d)
    return json.dumps(d).encode()


def _flip_sig(d: dict[str, object]) -> None:
    sigs = d["signatures"]
    assert isinstance(sigs, list)
    sig = bytearray(base64.b64decode(sigs[0]["sig"]))
    sig[0] ^= 1
    sigs[0]["sig"] = base64.b64encode(bytes(sig)).decode()


def _flip_payload(d: dict[str, object]) -> None:
    payload = bytearray(base64.b64decode(str(d["payload"])))
    i = payload.index(b"admission")
    payload[i] = ord("A")
    d["payload"] = base64.b64encode(bytes(payload)).decode()


CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "malformed-json": (lambda raw: raw[:-5], "malformed JSON"),
    "bad-base64": (
        lambda raw: _mut(raw, lambda d: d.update(payload="@@not base64@@")),
        "bad base64",
    ),
    "wrong-payload-type": (
        lambda raw: _mut(raw, lambda d: d.update(payloadType="text/plain")),
        "wrong payloadType",
    ),
    "bad-signature": (lambda raw: _mut(raw, _flip_sig), "invalid signature"),
    "tampered-payload": (lambda raw: _mut(raw, _flip_payload), "invalid signature"),
    "no-signatures": (lambda raw: _mut(raw, lambda d: d.update(signatures=[])), "signatures"),
    "oversized": (
        lambda raw: raw + b" " * (MAX_ENVELOPE_BYTES + 1 - len(raw)),
        f"over the {MAX_ENVELOPE_BYTES}-byte limit",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_and_nothing_written(
    ledger_env: tuple[Store, LocalKey, LocalKey],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    store, runner, _ = ledger_env
    good = envelope(runner)
    mutate, reason = CASES[case]
    f = tmp_path / "env.json"
    f.write_bytes(mutate(good))
    before = dump(store)
    r = run(capsys, "record", str(f))
    assert r.code == 1
    assert reason in r.err and r.err.count("\n") == 1, r.err
    assert dump(store) == before


def test_unknown_key_refused(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _, _ = ledger_env
    stranger = KeyDir(tmp_path / "elsewhere").create("stranger")
    f = tmp_path / "env.json"
    f.write_bytes(envelope(stranger))
    before = dump(store)
    r = run(capsys, "record", str(f))
    assert (r.code, "unknown key" in r.err) == (1, True), r.err
    assert dump(store) == before


def test_wrong_role_refused(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _, reviewer = ledger_env
    f = tmp_path / "env.json"
    f.write_bytes(envelope(reviewer))
    before = dump(store)
    r = run(capsys, "record", str(f))
    assert r.code == 1 and "must be signed by a runner key" in r.err, r.err
    assert dump(store) == before


def test_revoked_key_refused(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, runner, _ = ledger_env
    assert run(capsys, "keys", "revoke", runner.keyid[:16], "--reason", "laptop lost").code == 0
    f = tmp_path / "env.json"
    f.write_bytes(envelope(runner))
    store = Store.open(store.url)
    before = dump(store)
    r = run(capsys, "record", str(f))
    assert r.code == 1 and "revoked: laptop lost" in r.err, r.err
    assert dump(store) == before


def test_duplicate_is_a_no_op_that_says_so(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, runner, _ = ledger_env
    f = tmp_path / "env.json"
    f.write_bytes(envelope(runner))
    first = run(capsys, "record", str(f))
    assert first.code == 0 and "recorded as entry" in first.out
    before = dump(store)
    again = run(capsys, "record", str(f))
    assert again.code == 0 and "already recorded (no change)" in again.out
    assert dump(store) == before


def test_batch_is_all_or_nothing(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, runner, _ = ledger_env
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(envelope(runner))
    bad.write_bytes(b"{")
    before = dump(store)
    r = run(capsys, "record", str(good), str(bad))
    assert r.code == 1 and r.err.startswith("ledger: input 2: malformed JSON")
    assert dump(store) == before


def test_review_rules(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, runner, _reviewer = ledger_env
    f = tmp_path / "env.json"
    f.write_bytes(envelope(runner))
    rid = run(capsys, "record", str(f)).out.split()[0]
    before = dump(store)
    own = run(capsys, "review", rid, "--concur", "--key", "runner1")
    assert own.code == 1 and "cannot review a receipt it signed itself" in own.err
    assert dump(store) == before
    ok = run(capsys, "review", rid[:19], "--dispute", "--note", "OOM seen", "--key", "rev1")
    assert ok.code == 0
    shown = run(capsys, "show", rid, "--json")
    doc = json.loads(shown.out)
    assert [r["verdict"] for r in doc["reviews"]] == ["dispute"]


def test_id_prefix_lookup(
    ledger_env: tuple[Store, LocalKey, LocalKey], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, runner, _ = ledger_env
    f = tmp_path / "env.json"
    f.write_bytes(envelope(runner))
    rid = run(capsys, "record", str(f)).out.split()[0]
    hexpart = rid.removeprefix("sha256:")
    assert json.loads(run(capsys, "show", hexpart[:12], "--json").out)["id"] == rid
    short = run(capsys, "show", hexpart[:11])
    assert short.code == 1 and "not a receipt id" in short.err
    missing = run(capsys, "show", "0" * 12)
    assert missing.code == 1 and "no receipt" in missing.err
