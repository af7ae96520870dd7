"""`status --server --trust` checks the server: the client keeps the log up to a signed
checkpoint, syncing from the last one it saw, and the one judge decides on it. A server
that flips a state, drops a counterexample or serves a forked log is refused in one
line (exit 1), and so is an entry whose signature does not verify under a tree that
holds; the honest server's answer passes, with what it did not decide labelled as its
word (real SQLite and PostgreSQL behind the server)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import git
import pytest

import ledger.service.questions as questions
from ledger.evidence.keys import KeyDir
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import Run, run

PLAN = """
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
cleanup = false

[[claims]]
name = "determinism.bitwise"
check = "determinism"
cleanup = false
"""

FAILED = "determinism.bitwise"


def _attest(
    capsys: pytest.CaptureFixture[str],
    repo: git.Repo,
    claim: str,
    outcome: str,
    key: str = "h200",
) -> str:
    extra = [] if outcome == "passed" else ["--reason", "differs"]
    res = run(
        capsys,
        "attest",
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        key,
        "--pr",
        "3",
        "--offline",
        "--claim",
        claim,
        "--outcome",
        outcome,
        *extra,
    )
    assert res.code == 0, res.err
    return res.out.strip()


@pytest.fixture
def served(
    db_url: str,
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Running, git.Repo, Path]]:
    db = db_url  # real SQLite and PostgreSQL
    monkeypatch.setenv("LEDGER_DB", db)
    monkeypatch.setenv("LEDGER_CACHE", str(tmp_path / "cache"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    head = commit_file(r, "model/a.py", "x = 2\n", "pr")
    r.git.update_ref("refs/pull/3/head", head)
    _attest(capsys, r, "admission.no-oom-after-admit", "passed")
    _attest(capsys, r, FAILED, "failed")
    assert run(capsys, "log", "checkpoint").code == 0
    pem = tmp_path / "ledger.pem"
    pem.write_text(run(capsys, "keys", "export", "ledger").out)
    srv = start(db, KeyDir(key_dir))
    try:
        yield srv, r, pem
    finally:
        srv.stop()


def _status(
    capsys: pytest.CaptureFixture[str], srv: Running, r: git.Repo, pem: Path, *more: str
) -> Run:
    return run(
        capsys,
        "status",
        "--repo",
        str(r.working_tree_dir),
        "--pr",
        "3",
        "--offline",
        "--server",
        srv.url,
        "--trust",
        str(pem),
        *more,
    )


def _patched(monkeypatch: pytest.MonkeyPatch, change: Callable[[dict[str, Any]], None]) -> None:
    """The server's status answers changed by `change` after it judged (none kept)."""
    honest = questions.answer

    def lying(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(json.dumps(honest(*args, **kwargs)))
        if args[0] == "status":
            change(doc)
        return doc

    monkeypatch.setattr(questions, "answer", lying)
    monkeypatch.setattr(questions, "kept", lambda *a, **k: None)


def test_the_honest_answer_passes_and_says_what_is_the_servers_word(
    served: tuple[Running, git.Repo, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, r, pem = served
    first = _status(capsys, srv, r, pem, "--json")
    assert first.code == 1, first.err  # the failed claim: the answer, not a refusal
    doc = json.loads(first.out)
    checked = doc["checked"]
    assert checked["checkpoint"]["size"] > 0 and checked["fetched"] == checked["checkpoint"]["size"]
    assert any("key registry" in w for w in checked["servers_word"])
    assert any(line.startswith("checked here: recomputed") for line in doc["judged"])
    # Warm: nothing logged since, nothing fetched.
    again = json.loads(_status(capsys, srv, r, pem, "--json").out)
    assert again["checked"]["fetched"] == 0
    text = _status(capsys, srv, r, pem)
    assert "checked here: recomputed from the log up to checkpoint" in text.out
    assert "the server's word" in text.out


def test_a_flipped_state_is_refused(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served

    def flip(doc: dict[str, Any]) -> None:
        for row in doc["claims"]:
            if row["claim"] == FAILED:
                row["state"] = "qualified"

    _patched(monkeypatch, flip)
    res = _status(capsys, srv, r, pem, "--json")
    assert res.code == 1 and res.out == ""
    assert "status answer is refused" in res.err and f"claim {FAILED}" in res.err
    assert "is qualified in it, failed on the log" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_a_dropped_counterexample_is_refused(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served

    def drop(doc: dict[str, Any]) -> None:
        for row in doc["claims"]:
            if row["claim"] == FAILED:
                row["receipts"] = []

    _patched(monkeypatch, drop)
    res = _status(capsys, srv, r, pem)
    assert res.code == 1 and res.out == ""
    assert "leaves out counterexample" in res.err and f"of claim {FAILED}" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_a_forked_log_is_refused(
    served: tuple[Running, git.Repo, Path],
    tmp_path: Path,
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served
    assert _status(capsys, srv, r, pem).code == 1  # synced: the last checkpoint seen
    # The same ledger key signs another history: a second database, the same keys.
    fork = f"sqlite:///{tmp_path / 'fork.db'}"
    monkeypatch.setenv("LEDGER_DB", fork)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h100", "--role", "runner").code == 0
    for claim in ("admission.no-oom-after-admit", FAILED, FAILED):
        _attest(capsys, r, claim, "passed", key="h100")
    assert run(capsys, "log", "checkpoint").code == 0
    other = start(fork, KeyDir(key_dir))
    try:
        res = _status(capsys, other, r, pem)
    finally:
        other.stop()
    assert res.code == 1 and res.out == ""
    assert "not consistent with the last one seen here" in res.err
    assert "a forked log" in res.err
    # Nothing of the fork was kept: the honest log still extends what is held here.
    honest = _status(capsys, srv, r, pem, "--json")
    assert honest.code == 1 and json.loads(honest.out)["checked"]["fetched"] == 0


def test_trust_without_server_is_a_usage_error(
    served: tuple[Running, git.Repo, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, r, pem = served
    res = run(
        capsys,
        "status",
        "--repo",
        str(r.working_tree_dir),
        "--pr",
        "3",
        "--offline",
        "--trust",
        str(pem),
    )
    assert res.code == 2 and "go with --server" in res.err


def test_with_a_policy_only_a_checkpoint_the_witnesses_cosigned_is_held(
    served: tuple[Running, git.Repo, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.ledger.transparency.conftest import Witnesses

    srv, r, _ = served
    vkey = run(capsys, "log", "vkey").out.strip()
    ws = Witnesses(tmp_path, f"log {vkey}\n".encode())
    for n in ws.names:
        ws.start(n)
    try:
        policy = tmp_path / "policy.txt"
        policy.write_bytes(ws.policy(vkey))
        ask = ["status", "--repo", str(r.working_tree_dir), "--pr", "3", "--offline"]
        ask += ["--server", srv.url, "--policy", str(policy), "--json"]
        # The checkpoint served was signed by the ledger key alone: not the quorum.
        alone = run(capsys, *ask)
        assert alone.code == 1 and alone.out == "" and "witness" in alone.err
        assert not (tmp_path / "cache" / "logs").exists() or not any(
            (tmp_path / "cache" / "logs").iterdir()
        )
        assert run(capsys, "log", "checkpoint", "--witnesses", str(policy)).code == 0
        cosigned = run(capsys, *ask)
        assert cosigned.code == 1, cosigned.err  # the failed claim: the answer stands
        assert json.loads(cosigned.out)["checked"]["witnessed"] is True
    finally:
        for n in list(ws.servers):
            ws.stop(n)


def _blame_quarantine(doc: dict[str, Any]) -> None:
    """The failed claim put down to a GPU the fleet quarantines, and so qualified."""
    for row in doc["claims"]:
        if row["claim"] == FAILED:
            gone = row["receipts"]
            row["state"], row["receipts"] = "qualified", []
            row["reasons"] = [
                f"quarantine: {g.removeprefix('sha256:')[:12]} ran on quarantined GPU GPU-1"
                for g in gone
            ]
    doc["qualified"] = True
    doc["verdict"]["exit_code"] = 0


def test_a_quarantine_the_plan_does_not_ask_for_is_no_excuse(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served
    _patched(monkeypatch, _blame_quarantine)
    res = _status(capsys, srv, r, pem)
    assert res.code == 1 and res.out == ""
    assert "leaves out counterexample" in res.err and f"of claim {FAILED}" in res.err


def test_the_fleets_quarantine_is_the_servers_word_and_says_so(
    served: tuple[Running, git.Repo, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served
    plan = tmp_path / "quarantining.toml"
    plan.write_text("quarantine_above = 0.3\n" + PLAN)
    honest = _status(capsys, srv, r, pem, "--plan", str(plan), "--json")
    assert honest.code == 1, honest.err
    said = json.loads(honest.out)["checked"]["servers_word"]
    assert "the GPUs the fleet quarantines" in said
    _patched(monkeypatch, _blame_quarantine)
    res = _status(capsys, srv, r, pem, "--plan", str(plan))
    assert res.code == 0, res.err  # the server's word on its fleet, labelled as such
    assert "the GPUs the fleet quarantines: the server's word, not recomputed here" in res.out


def _tamper(db: str) -> int:
    """A counterexample logged again with its payload changed after it was signed (to a
    pass, the signature kept): the ledger's own log, a tree over it that holds together, as a
    server that writes behind its ingest would serve it. Returns its position."""
    import base64

    from ledger.evidence.canonical import canonical_bytes, receipt_id
    from ledger.store.store import Store, resolve_url

    store = Store.open(resolve_url(db))
    failed = next(
        e
        for e in store.entries_at(list(range(store.size())))
        if e.kind == "receipt" and e.receipt.predicate.outcome == "failed"
    )
    env = json.loads(failed.body)
    doc = json.loads(base64.b64decode(env["payload"]))
    doc["predicate"]["outcome"] = "passed"
    doc["predicate"].pop("reason", None)
    payload = canonical_bytes(doc)
    env["payload"] = base64.b64encode(payload).decode()
    with store.append_tx() as tx:
        return tx.add(kind="receipt", entry_id=receipt_id(payload), body=canonical_bytes(env))


def test_an_entry_whose_signature_does_not_verify_is_refused(
    served: tuple[Running, git.Repo, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tampered body under a tree the ledger key signed: the tree holds, the envelope's
    signature does not verify by the key the log registered, so nothing is kept."""
    srv, r, pem = served
    assert _status(capsys, srv, r, pem).code == 1  # synced: the honest log is held
    import os

    seq = _tamper(os.environ["LEDGER_DB"])
    assert run(capsys, "log", "checkpoint").code == 0
    res = _status(capsys, srv, r, pem)
    assert res.code == 1 and res.out == ""
    assert f"entry {seq}" in res.err and "signature" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1
    # Nothing of it was kept: the copy here is still at the honest checkpoint.
    again = _status(capsys, srv, r, pem, "--json")
    assert again.code == 1 and again.out == ""


def test_a_changed_reason_is_refused_and_added_notes_are_the_servers_word(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the log decides besides states and receipts (each row's rules) is compared
    too; a note the server adds (receipts it holds under another repository id) is its
    word, and labelled so."""
    srv, r, pem = served
    honest = json.loads(_status(capsys, srv, r, pem, "--json").out)
    # Its notes are the client's own here (the plan it posted, the ref it judged).
    assert not any("notes" in w for w in honest["checked"]["servers_word"]), honest["judged"]

    def note(doc: dict[str, Any]) -> None:
        doc["judged"].append("receipts of this commit under github.com/old/name: 2")

    _patched(monkeypatch, note)
    said = _status(capsys, srv, r, pem, "--json")
    assert said.code == 1 and said.out, said.err  # the failed claim: the answer stands
    assert "the notes it adds (1)" in json.loads(said.out)["checked"]["servers_word"]

    def excuse(doc: dict[str, Any]) -> None:
        for row in doc["claims"]:
            if row["claim"] == FAILED:
                row["reasons"] = [
                    x.replace("counterexample:", "infra-error:", 1) for x in row["reasons"]
                ]

    _patched(monkeypatch, excuse)
    res = _status(capsys, srv, r, pem)
    assert res.code == 1 and res.out == "" and len(res.err.strip().splitlines()) == 1
    assert f"claim {FAILED}" in res.err and "rules" in res.err, res.err


def test_a_blocker_label_the_log_does_not_bear_is_refused(
    served: tuple[Running, git.Repo, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, r, pem = served

    def relabel(doc: dict[str, Any]) -> None:
        # The failure put down to the base branch ("fails there too"): an excuse the
        # log does not bear (no receipt of the base here).
        for b in doc["verdict"]["blockers"]:
            b["attribution"] = {**(b.get("attribution") or {}), "label": "base-too"}

    _patched(monkeypatch, relabel)
    res = _status(capsys, srv, r, pem)
    assert res.code == 1 and res.out == "" and len(res.err.strip().splitlines()) == 1
    assert "labelled base-too in it" in res.err, res.err


def test_a_copy_kept_before_signatures_were_checked_is_fetched_again(
    served: tuple[Running, git.Repo, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A log kept by a release whose sync verified no signature may hold a tampered body:
    it is not read, but fetched again and checked."""
    import sqlite3

    srv, r, pem = served
    first = json.loads(_status(capsys, srv, r, pem, "--json").out)
    (kept,) = (tmp_path / "cache" / "logs").iterdir()
    with sqlite3.connect(kept) as db:
        db.execute("PRAGMA user_version = 1")
    db.close()
    again = json.loads(_status(capsys, srv, r, pem, "--json").out)
    assert again["checked"]["fetched"] == first["checked"]["checkpoint"]["size"] > 0
