"""The floor for reading: a question is one typed value with one encoding, the evidence
under it is read in one go (from a server, one request however many receipts), and a
ledger is opened once with its recorder and its reader, so nothing asks a recorder what
it is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.errors import RefusedError
from ledger.evidence.keys import KeyDir
from ledger.execution import baseline
from ledger.identity.revision import Revision
from ledger.plans.governing import Identity
from ledger.read.handle import open_ledger
from ledger.read.question import Question
from ledger.read.reader import LocalReader, RemoteReader
from ledger.remote import client
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.ingest import record
from tests.ledger.factories import COMMIT, envelope
from tests.ledger.helpers import run

ROOT = Path(__file__).resolve().parents[3]


def test_no_module_asks_a_recorder_what_it_is() -> None:
    """Execution, the fleet and the CLI read through the opened ledger's reader: no
    `getattr(recorder, "store" | "url" | "token" | "kept")` is left anywhere."""
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "ledger").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"getattr\(\s*recorder\b", line)
    ]
    assert found == []


def _revision(**over: Any) -> Revision:
    fields: dict[str, Any] = {
        "repo": "https://example.test/team/model",
        "commit": "a" * 40,
        "tree": "b" * 40,
        "pr": 7,
        "package_digest": "c" * 64,
        "package_paths": ("model/**",),
    }
    return Revision(**{**fields, **over})


def test_a_question_reads_back_from_its_one_encoding() -> None:
    q = Question.of(Identity(_revision(), None, ("judged here",)), ["a.claim"], {"gpu_count": 2})
    doc = q.to_json()
    assert Question.from_json(doc) == q
    assert doc["claims"] == ["a.claim"] and doc["scope"] == {"gpu_count": 2}
    # What the server reads back is the asker's subject and plan, as the read side judges.
    assert Question.from_json(doc).identity() == Identity(q.subject, None, ("judged here",))
    # A base commit's question names no plan and no tree: the receipts of the commit.
    base = Question.about("r", "d" * 40, ["a.claim"]).to_json()
    assert base["subject"]["commit"] == "d" * 40 and base["plan"] is None


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"subject": {"repo": "r", "commit": "c", "tree": "t", "x": 1}}, "subject: expected"),
        ({"subject": {"repo": 1, "commit": "c", "tree": "t"}}, "subject: repo"),
        ({"subject": {"repo": "r", "commit": "c", "tree": "t"}, "notes": "x"}, "notes: expected"),
        ({"subject": {"repo": "r", "commit": "c", "tree": "t"}, "claims": [1]}, "claims: expected"),
        ({"subject": {"repo": "r", "commit": "c", "tree": "t"}, "scope": {"a": True}}, "scope:"),
        ({"subject": {"repo": "r", "commit": "c", "tree": "t"}, "plan": {"x": 1}}, "plan:"),
    ],
)
def test_a_question_that_does_not_read_is_refused_in_one_line(
    doc: dict[str, Any], reason: str
) -> None:
    with pytest.raises(RefusedError, match=reason) as e:
        Question.from_json(doc)
    assert "\n" not in e.value.reason()


@pytest.fixture
def ledger_db(
    db_url: str,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("LEDGER_ARTIFACTS", str(tmp_path / "artifacts"))
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args).code == 0
    return db_url


def test_a_servers_evidence_for_a_baseline_is_one_request(
    ledger_db: str, key_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base's receipts a baseline weighs come from a server in one answer, the same
    receipts as the store's own reader finds, never one request per receipt."""
    keys = KeyDir(key_dir)
    runner = keys.load("runner")
    store = Store.open(ledger_db)
    claim = "admission.no-oom-after-admit"
    outcomes = ["failed", "passed", "failed", "passed", "failed"]
    envs = [
        envelope(
            runner,
            outcome=o,
            claim=claim,
            measurements={"predicted_bytes": 100, "measured_bytes": 90 + i},
            **({} if o == "passed" else {"reason": f"run {i}"}),
        )
        for i, o in enumerate(outcomes)
    ]
    record(store, envs)
    srv = start(ledger_db, keys)
    asked: list[str] = []
    real = client._request

    def counted(url: str, path: str, **kw: Any) -> Any:
        asked.append(path)
        return real(url, path, **kw)

    try:
        monkeypatch.setattr(client, "_request", counted)
        served = baseline._receipts(RemoteReader(srv.url), "example", COMMIT, [claim])
        assert asked == ["/v1/evidence"]
        here = baseline._receipts(LocalReader(store=store), "example", COMMIT, [claim])
        assert [r.id for r in served] == [r.id for r in here] and len(here) == len(envs)
        assert [r.predicate.outcome for r in served] == outcomes
        assert all(r.signer_role == "runner" and r.problem is None for r in served)
    finally:
        srv.stop()
        store.dispose()


def test_a_ledger_is_opened_once_with_its_recorder_and_its_reader(ledger_db: str) -> None:
    opened = open_ledger(ledger_db, None)
    reader = opened.reader
    assert isinstance(reader, LocalReader)
    assert reader.store is opened.recorder.store  # type: ignore[attr-defined]
    assert opened.kept == 0 and opened.kept_line() is None
    served = open_ledger(None, "http://127.0.0.1:9", check_server=False)
    assert isinstance(served.reader, RemoteReader) and served.reader.remote
    assert served.where == "http://127.0.0.1:9"
    reader.store.dispose()
