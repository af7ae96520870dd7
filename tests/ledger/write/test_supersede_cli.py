"""`ledger supersede ID --reason TEXT`: inherits claim, scope and revision; says what
it will and will not lift before it signs; lifts a counterexample only from its
signer (another runner's supersession stays pending review)."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.qualification.supersession import SUPERSESSION_PENDING
from tests.ledger.helpers import run


def test_supersede_by_another_runner_is_pending_and_by_the_signer_lifts(
    repo: git.Repo, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    where = ("--repo", str(repo.working_tree_dir))
    assert run(capsys, "init", *db).code == 0
    for name in ("host-a", "host-b"):
        assert run(capsys, "keys", "new", name, "--role", "runner", *db).code == 0
    claim = ("--claim", "admission.no-oom-after-admit", "--unplanned", "--rev", "HEAD")
    failed = run(
        capsys,
        "attest",
        *claim,
        *where,
        "--outcome",
        "failed",
        "--reason",
        "OOM",
        "--scope",
        "device_kind=cpu",
        "--key",
        "host-a",
        *db,
    )
    assert failed.code == 0, failed.err
    fid = failed.out.strip()
    dry = run(capsys, "supersede", fid, "--reason", "flaky", "--key", "host-b", "--dry-run", *db)
    assert dry.code == 0 and "nothing signed" in dry.err
    assert SUPERSESSION_PENDING in dry.err and "it would not:" in dry.err
    other = run(capsys, "supersede", fid, "--reason", "flaky", "--key", "host-b", *db)
    assert other.code == 0, other.err
    shown = json.loads(run(capsys, "show", other.out.strip(), "--json", *db).out)
    p = shown["statement"]["predicate"]
    assert (p["claim"], p["scope"], p["supersedes"][0]["id"]) == (
        "admission.no-oom-after-admit",
        {"device_kind": "cpu"},
        fid,
    )
    status = ("status", *where, "--rev", "HEAD", "--claim", "admission.no-oom-after-admit")
    st = json.loads(run(capsys, *status, "--json", *db).out)
    assert st["claims"][0]["state"] == "failed"
    assert any(SUPERSESSION_PENDING in r for r in st["claims"][0]["reasons"])
    hist = run(capsys, "history", *where, "--rev", "HEAD", *db)
    assert SUPERSESSION_PENDING in hist.out
    own = run(capsys, "supersede", fid, "--reason", "ballast leaked", "--key", "host-a", *db)
    assert own.code == 0 and "you signed it" in own.err
    st = json.loads(run(capsys, *status, "--json", *db).out)
    assert st["claims"][0]["state"] != "failed"
    assert any("superseded by" in r for r in st["claims"][0]["reasons"])


def test_supersede_refuses_a_review(capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ledger.evidence.errors import InputError
    from ledger.evidence.keys import LocalKey
    from ledger.write.supersede import plan_supersession

    key = LocalKey("k", Ed25519PrivateKey.generate())
    with pytest.raises(InputError, match="only receipts"):
        plan_supersession({"id": "sha256:" + "a" * 64, "kind": "review"}, key, "x")
