"""A qualify claim's artifacts are read by the parent beneath the claim's artifact
folder, never followed: a link, a hard link, a FIFO, a link on the way or an
oversized file is named in the receipt as refused and never read; a pass that lost
an artifact is inconclusive, a failure stays a failure."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ledger.evidence.keys import KeyDir
from ledger.execution.receipts import record_results
from ledger.identity.revision import Revision
from ledger.write.record import open_recorder
from runners.contract.result import Artifact, CheckResult, infra_error
from tests.ledger.helpers import run

BIG = 300 * 1024 * 1024
SYMLINK = "a symbolic link (not followed)"


@pytest.fixture
def ledger_db(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return tmp_path / "l.db"


def _result(outcome: str, art: Path, names: list[str], **measurements: Any) -> CheckResult:
    r = infra_error(
        claim="memory.no-oom",
        check="admission",
        version="1",
        params={},
        reason="x",
        scope={"device_kind": "cpu"},
        started_ns=1,
        finished_ns=2,
    )
    arts = [Artifact(name=n, path=str(art / n)) for n in names]
    return dataclasses.replace(
        r,
        outcome=outcome,  # type: ignore[arg-type]
        reason=None if outcome == "passed" else "it failed",
        measurements=dict(measurements),
        artifacts=arts,
    )


def _record(capsys: pytest.CaptureFixture[str], art: Path, r: CheckResult) -> dict[str, Any]:
    rev = Revision(repo="github.com/org/repo", commit="a" * 40, tree="b" * 40)
    key = KeyDir.default().load("runner")
    [rec] = record_results(open_recorder(None, None), key, rev, [r], art)
    shown = run(capsys, "show", rec.id, "--json")
    pred: dict[str, Any] = json.loads(shown.out)["statement"]["predicate"]
    return pred


def test_a_claims_planted_artifacts_are_refused_and_the_outcome_stands(
    ledger_db: Path,
    tmp_path: Path,
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = (key_dir / "runner.pem").read_bytes()
    art = tmp_path / "claim" / "artifacts"
    art.mkdir(parents=True)
    (art / "trace.json").write_text("{}")
    (art / "k.pem").symlink_to(key_dir / "runner.pem")
    (art / "data.bin").write_text("x")
    os.link(art / "data.bin", art / "hard.bin")
    os.mkfifo(art / "pipe")
    with (art / "big.bin").open("wb") as f:
        f.truncate(BIG)  # sparse: the size is real, the disk is not spent
    (art / "keys").symlink_to(key_dir)
    names = ["trace.json", "k.pem", "hard.bin", "pipe", "big.bin", "keys/runner.pem"]
    forged = {"refused_outputs": [], "steps": 3}  # the child cannot speak for the parent
    p = _record(capsys, art, _result("passed", art, names, **forged))
    assert [a["name"] for a in p["artifacts"]] == ["trace.json"]
    refused = {r["path"]: r["why"] for r in p["measurements"]["refused_outputs"]}
    assert refused == {
        str(art / "k.pem"): SYMLINK,
        str(art / "hard.bin"): "a hard link (2 links)",
        str(art / "pipe"): "a FIFO",
        str(art / "big.bin"): f"{BIG} bytes, over the 268435456-byte limit",
        str(art / "keys"): SYMLINK,
    }
    assert p["outcome"] == "inconclusive" and str(art / "k.pem") in p["reason"]
    assert p["measurements"]["steps"] == 3
    stored = [f.read_bytes() for f in (tmp_path / "artifacts").glob("*/*")]
    assert stored == [b"{}"] and secret not in stored
    # A failure stays a failure, whatever it left behind.
    p = _record(capsys, art, _result("failed", art, names))
    assert p["outcome"] == "failed" and p["reason"] == "it failed"
    assert len(p["measurements"]["refused_outputs"]) == 5


def test_a_claims_honest_artifacts_pass_untouched(
    ledger_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    art = tmp_path / "claim" / "artifacts"
    (art / "sub").mkdir(parents=True)
    (art / "sub" / "snapshot.pickle").write_bytes(b"\x80\x04N.")
    p = _record(capsys, art, _result("passed", art, ["sub/snapshot.pickle"]))
    assert p["outcome"] == "passed" and "refused_outputs" not in p["measurements"]
    [a] = p["artifacts"]
    assert a["name"] == "sub/snapshot.pickle" and a["size"] == 4
