"""No traceback, the same refusal on both backends: each hostile input answers one
line and exit 1 on the CLI, HTTP 400 from the server, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import git
import httpx
import pytest

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.keys import KeyDir, LocalKey
from ledger.evidence.models import QUALIFICATION_PREDICATE, STATEMENT_TYPE
from ledger.service.run import start
from ledger.store.store import Store
from tests.ledger.factories import COMMIT, TREE, predicate_dict
from tests.ledger.helpers import run

PLACEHOLDER = 7777777


def _signed(key: LocalKey, pred: dict[str, object], patch: Callable[[bytes], bytes]) -> bytes:
    doc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "example", "digest": {"gitCommit": COMMIT, "gitTree": TREE}}],
        "predicateType": QUALIFICATION_PREDICATE,
        "predicate": pred,
    }
    if any("\ud800" in str(v) for v in pred.values()):
        # RFC 8785 cannot write a lone surrogate; JSON text can carry one escaped.
        payload = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    else:
        payload = patch(canonical_bytes(doc))
    return dsse.sign(payload, key).model_dump_json().encode()


def _artifact(media: str) -> list[dict[str, object]]:
    return [{"name": "a", "digest": {"sha256": "a" * 64}, "size": 1, "mediaType": media}]


CASES: dict[str, tuple[dict[str, object], Callable[[bytes], bytes], str]] = {
    "lone surrogate": (predicate_dict(outcome="failed", reason="x\ud800"), bytes, "RFC 8785"),
    "5000-digit integer": (
        predicate_dict(measurements={"n": PLACEHOLDER}),
        lambda b: b.replace(str(PLACEHOLDER).encode(), b"9" * 5000),
        "5000 digits",
    ),
    "pr 2^31": (
        predicate_dict(
            source={"repo": "example", "commit": COMMIT, "tree": TREE, "dirty": False, "pr": 2**31}
        ),
        bytes,
        "32-bit",
    ),
    "300-char media type": (predicate_dict(artifacts=_artifact("t/" + "x" * 298)), bytes, "limit"),
    "CRLF media type": (
        predicate_dict(artifacts=_artifact("text/plain\r\nX-Evil: 1")),
        bytes,
        "not a media type",
    ),
}


@pytest.fixture
def ledger_db(db_url: str, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert run(capsys, "init", "--db", db_url).code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner", "--db", db_url).code == 0
    return db_url


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_signed_payloads_are_refused_in_one_line(
    case: str, ledger_db: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pred, patch, why = CASES[case]
    raw = _signed(KeyDir(key_dir).load("r"), pred, patch)
    f = tmp_path / "e.json"
    f.write_bytes(raw)
    r = run(capsys, "record", str(f), "--db", ledger_db)
    assert r.code == 1 and r.err.count("\n") == 1 and why in r.err, r.err
    srv = start(ledger_db, KeyDir(key_dir))
    try:
        resp = httpx.post(srv.url + "/v1/envelopes", content=raw)
        assert resp.status_code == 400 and why in resp.json()["error"], resp.text
    finally:
        srv.stop()
    store = Store.open(ledger_db)
    assert store.size() == 2  # the ledger key and the runner key: nothing else written
    store.engine.dispose()


def test_a_body_nested_1000_deep_over_http_is_a_400(ledger_db: str, key_dir: Path) -> None:
    srv = start(ledger_db, KeyDir(key_dir))
    try:
        for path in ("/v1/envelopes", "/v1/status", "/v1/keys"):
            resp = httpx.post(srv.url + path, content=b"[" * 1000 + b"]" * 1000)
            assert resp.status_code in (400, 401) and "error" in resp.json(), resp.text
        deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
        resp = httpx.post(srv.url + "/v1/envelopes", content=deep)
        assert resp.status_code == 400 and "nested" in resp.json()["error"]
    finally:
        srv.stop()


def test_attest_scope_with_a_5000_digit_integer_is_one_line(
    ledger_db: str, repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--outcome",
        "passed",
        "--scope",
        "n=" + "9" * 5000,
        "--key",
        "r",
        "--db",
        ledger_db,
    )
    assert r.code == 1 and r.err.count("\n") == 1 and "--scope n" in r.err, r.err
