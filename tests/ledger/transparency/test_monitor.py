"""`ledger monitor`: per key, receipts its host never made, bursts above its
habit, entries after its revocation, reviews by the same holder; a signed report."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledger.evidence.canonical import receipt_id
from ledger.evidence.dsse import decode_payload, parse_envelope
from ledger.evidence.keys import KeyDir, public_pem
from ledger.evidence.statement import build_review, sign_statement
from ledger.write.ingest import register_key
from tests.ledger.factories import envelope
from tests.ledger.helpers import run
from tests.ledger.transparency.conftest import Ledger, ok


def _id(env: bytes) -> str:
    return receipt_id(decode_payload(parse_envelope(env)))


def _entry(line: str) -> str:
    """The entry id of a finding line: `CHECK: NAME (KEYID) entry SEQ ID: DETAIL`."""
    return line.split()[5].rstrip(":")


def _follow(ledger: Ledger, *extra: str, output: str = "report.json") -> tuple[int, str, Path]:
    """`ledger monitor follow` with the test's state and monitor key; --db unless --server."""
    report = ledger.tmp / output
    args = [
        "monitor",
        "follow",
        "--state",
        str(ledger.tmp / "monitor-state.json"),
        "--key",
        "monitor",
        "-o",
        str(report),
        *extra,
    ]
    if "--server" not in extra:
        args += ["--db", ledger.db]
    r = run(ledger.capsys, *args)
    return r.code, r.out + r.err if r.code == 2 else r.out, report


@pytest.fixture
def monitored(ledger: Ledger) -> Ledger:
    KeyDir(ledger.keys).create("monitor")
    return ledger


def test_the_monitor_names_the_receipts_of_a_stolen_runner_key(
    monitored: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay of the key theft: the host signs three receipts; a copy of its
    runner key, taken elsewhere, signs six "passed" receipts the host never made."""
    ledger = monitored
    host = ledger.record(3)
    journal = ledger.keys / "journal.jsonl"
    assert {json.loads(line)["id"] for line in journal.read_text().splitlines()} >= set(host)

    thief_keys = tmp_path / "thief-keys"
    thief_keys.mkdir(mode=0o700)
    shutil.copy2(ledger.keys / "runner.pem", thief_keys / "runner.pem")
    monkeypatch.setenv("LEDGER_KEYS", str(thief_keys))
    stolen = KeyDir(thief_keys).load("runner")
    forged = []
    for n in range(6):
        f = tmp_path / f"forged-{n}.json"
        f.write_bytes(envelope(stolen, claim=f"admission.forged-{n}", outcome="passed"))
        forged.append(ok(ledger("record", str(f))).out.split()[0])
    monkeypatch.setenv("LEDGER_KEYS", str(ledger.keys))
    ledger.record(1)

    code, out, report = _follow(ledger, "--journal", f"runner={journal}")
    assert code == 1
    named = [_entry(line) for line in out.splitlines() if line.startswith("not-in-journal:")]
    assert sorted(named) == sorted(forged)
    assert out.count("\n") == 6
    # The report is signed by the monitor's key, and says the same.
    pem = tmp_path / "monitor.pem"
    pem.write_bytes(public_pem(KeyDir(ledger.keys).load("monitor").public))
    checked = ok(run(ledger.capsys, "monitor", "check", str(report), "--trust", str(pem)))
    assert "6 finding(s)" in checked.out
    assert sorted(line.split()[-1] for line in checked.out.splitlines()[1:]) == sorted(forged)
    other = tmp_path / "other.pem"
    other.write_bytes(public_pem(KeyDir(ledger.keys).load("runner").public))
    refused = run(ledger.capsys, "monitor", "check", str(report), "--trust", str(other))
    assert refused.code == 1 and refused.err.count("\n") == 1
    # From the stored position: nothing new, nothing to say.
    code, out, _ = _follow(ledger, "--journal", f"runner={journal}")
    assert code == 0 and out == ""


def test_a_burst_above_the_keys_habit_is_reported(
    monitored: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.store.store as store_module

    ledger = monitored
    clock = [datetime(2026, 11, 1, 9, 30, tzinfo=UTC)]
    monkeypatch.setattr(store_module, "utc_now", lambda: clock[0].strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    for day in range(4):  # one receipt an hour on four days: the habit
        clock[0] = datetime(2026, 11, 1 + day, 9, 30, tzinfo=UTC)
        ledger.record(1)
    code, out, _ = _follow(ledger)
    assert code == 0, out
    clock[0] = datetime(2026, 11, 6, 14, 5, tzinfo=UTC)
    burst = ledger.record(6)
    code, out, _ = _follow(ledger, "--rate-multiple", "5")
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 6 and all(line.startswith("rate: runner") for line in lines)
    assert sorted(_entry(line) for line in lines) == sorted(burst)
    assert "6 receipts in the hour from 2026-11-06T14Z, over 5 x the median 1" in lines[0]
    # The same six at a multiple of 6 are within the habit.
    (ledger.tmp / "monitor-state.json").unlink()
    code, out, _ = _follow(ledger, "--rate-multiple", "6")
    assert code == 0, out
    # Older than 30 days, the habit no longer counts.
    clock[0] = datetime(2026, 11, 6, 14, 5, tzinfo=UTC) + timedelta(days=40)
    ledger.record(1)
    code, out, _ = _follow(ledger, "--rate-multiple", "5")
    assert code == 0, out


def test_entries_after_revocation_and_reviews_by_the_same_holder(
    monitored: Ledger, tmp_path: Path
) -> None:
    ledger = monitored
    store = ledger.store()
    keys = KeyDir(ledger.keys)
    alice_runner, alice_reviewer = keys.create("alice-runner"), keys.create("alice-reviewer")
    bob = keys.create("bob-reviewer")
    register_key(
        store, "alice-runner", "runner", alice_runner.public, registered_by="alice", hosts={"h": []}
    )
    register_key(store, "alice-reviewer", "reviewer", alice_reviewer.public, registered_by="alice")
    register_key(store, "bob-reviewer", "reviewer", bob.public, registered_by="bob")
    f = tmp_path / "alice.json"
    f.write_bytes(envelope(alice_runner, claim="admission.a"))
    rid = ok(ledger("record", str(f))).out.split()[0]
    for who in (alice_reviewer, bob):
        review = tmp_path / f"review-{who.name}.json"
        review.write_bytes(sign_statement(build_review(rid, "concur", "ran it"), who))
        ok(ledger("record", str(review)))
    # The runner key is revoked; then an entry under it is written around ingest.
    ok(ledger("keys", "revoke", "runner", "--reason", "host retired"))
    late = envelope(keys.load("runner"), claim="admission.late")
    with store.append_tx() as ap:
        seq = ap.add(kind="receipt", entry_id=_id(late), body=late)

    code, out, _ = _follow(ledger)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("same-holder-review: alice-reviewer")
    assert "a key registered by the same holder 'alice'" in lines[0]
    assert lines[1].startswith("after-revocation: runner") and f"entry {seq} " in lines[1]


def test_the_monitor_follows_a_served_log_checked_against_its_signed_root(
    monitored: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP: the entries up to the served checkpoint, which must hash to its
    signed root; a server that changes a row behind the log is refused."""
    from sqlalchemy import text

    from ledger.service.run import start
    from ledger.store.store import resolve_url
    from ledger.store.triggers import drop_append_only_triggers

    ledger = monitored
    host = ledger.record(2)
    journal = ledger.keys / "journal.jsonl"
    thief_keys = tmp_path / "thief-keys"
    thief_keys.mkdir(mode=0o700)
    shutil.copy2(ledger.keys / "runner.pem", thief_keys / "runner.pem")
    forged = tmp_path / "forged.json"
    monkeypatch.setenv("LEDGER_JOURNAL", str(tmp_path / "thief-journal.jsonl"))
    forged.write_bytes(envelope(KeyDir(thief_keys).load("runner"), claim="admission.forged"))
    monkeypatch.delenv("LEDGER_JOURNAL")
    stolen = ok(ledger("record", str(forged))).out.split()[0]
    ok(ledger("log", "checkpoint"))
    pem = tmp_path / "ledger.pem"
    pem.write_bytes(public_pem(KeyDir(ledger.keys).load("ledger").public))
    server = start(resolve_url(ledger.db), None)
    try:
        via = ("--server", server.url, "--trust", str(pem), "--journal", f"runner={journal}")
        code, out, _ = _follow(ledger, *via)
        assert code == 1, out
        assert [_entry(line) for line in out.splitlines()] == [stolen]
        assert host[0] not in out
        # The server's rows changed behind the log: refused, the position kept.
        store = ledger.store()
        with store.engine.begin() as conn:
            drop_append_only_triggers(conn)
            conn.execute(text("UPDATE log_entry SET body = body || ' ' WHERE seq = 3"))
        (ledger.tmp / "monitor-state.json").unlink()
        r = run(
            ledger.capsys,
            "monitor",
            "follow",
            "--state",
            str(ledger.tmp / "monitor-state.json"),
            "--key",
            "monitor",
            "-o",
            str(tmp_path / "r2.json"),
            *via,
        )
        assert r.code == 1 and "do not hash to the signed root" in r.err
        assert not (ledger.tmp / "monitor-state.json").exists()
    finally:
        server.stop()
