"""Superseded by the check's fix (`ledger.qualification.check_fixes`): a failed receipt
of regression-24view before version 4 (observer-off-control before 2) whose only
failure is a repeat difference from undeclared randomness no longer stands as a
counterexample; any other failure keeps its verdict. The frozen receipts under
tests/ledger/fixtures/dropout_24view/ are what the old check wrote for a dropout model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from ledger.evidence.keys import public_pem
from ledger.qualification.rules import COUNTEREXAMPLE, SUPERSESSION
from tests.ledger.fixtures.dropout_24view.make import CLAIM, KEY, trainer_repo
from tests.ledger.helpers import run

from .factories import receipt
from .helpers import rules_of, status, why

FROZEN = Path(__file__).resolve().parents[1] / "fixtures" / "dropout_24view"
FIX = (
    "superseded by the check's fix: regression-24view 4 judges repeats from one random "
    "state in evaluation mode"
)


class Ledger:
    """A fresh SQLite ledger knowing the fixture key, beside the trainer repository."""

    def __init__(self, tmp: Path, keys: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.db = ("--db", f"sqlite:///{tmp / 'l.db'}")
        repo = trainer_repo(tmp / "trainer")
        assert repo.head.commit.hexsha.startswith("fd5420736a25")  # the frozen receipts' commit
        self.where = ("--repo", str(tmp / "trainer"), "--rev", "HEAD")
        assert run(capsys, "init", *self.db).code == 0
        keys.mkdir(mode=0o700, exist_ok=True)
        pem = keys / f"{KEY.name}.pem"
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(
                KEY.private.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        pub = tmp / "runner.pub.pem"
        pub.write_bytes(public_pem(KEY.private.public_key()))
        added = run(
            capsys, "keys", "add", str(pub), "--name", KEY.name, "--role", "runner",
            "--host", "fixture-host", *self.db,  # the host the frozen receipts name
        )  # fmt: skip
        assert added.code == 0, added.err

    def record(self, name: str) -> str:
        r = run(self.capsys, "record", str(FROZEN / name), *self.db)
        assert r.code == 0, r.err
        return r.out.split()[0]

    def cli(self, *args: str) -> str:
        r = run(self.capsys, *args, *self.db)
        assert r.code == 0, r.err
        return r.out

    def status(self) -> dict:
        # Exit 1: not qualified (nothing here qualifies the claim on its own).
        r = run(self.capsys, "status", *self.where, "--claim", CLAIM, "--json", *self.db)
        assert r.code in (0, 1), r.err
        doc = json.loads(r.out)
        [row] = [c for c in doc["claims"] if c["scope_role"] == "required"]
        return row


@pytest.fixture
def ledger(tmp_path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> Ledger:
    return Ledger(tmp_path, key_dir, capsys)


def test_a_dropout_only_failure_is_superseded_by_the_fix(ledger: Ledger) -> None:
    rid = ledger.record("regression-24view-3-dropout.json")
    row = ledger.status()
    assert row["state"] == "inconclusive", row
    assert any(FIX in r for r in row["reasons"]), row["reasons"]
    assert not any(r.startswith(f"{COUNTEREXAMPLE}:") for r in row["reasons"])
    history = " ".join(ledger.cli("history", *ledger.where).split())
    assert "failed (superseded by the check's fix)" in history and FIX in history
    [item] = json.loads(ledger.cli("history", *ledger.where, "--json"))["entries"]
    assert item["outcome"] == "failed" and FIX in item["superseded_by_fix"]
    shown = ledger.cli("show", rid)
    assert "outcome    failed" in shown and f"verdict {FIX}" in " ".join(shown.split())


def test_a_failure_of_the_old_check_with_a_real_nll_regression_stands(ledger: Ledger) -> None:
    rid = ledger.record("regression-24view-3-dropout-nll.json")
    row = ledger.status()
    assert row["state"] == "failed" and rid in row["receipts"]
    assert not any("check's fix" in r for r in row["reasons"])
    assert "check's fix" not in ledger.cli("history", *ledger.where)
    assert "check's fix" not in ledger.cli("show", rid)


def test_a_failure_of_the_fixed_check_stands(ledger: Ledger) -> None:
    rid = ledger.record("regression-24view-4-dropout.json")
    row = ledger.status()
    assert row["state"] == "failed" and rid in row["receipts"]
    assert not any("check's fix" in r for r in row["reasons"])


def test_the_old_controls_random_state_failure_is_superseded_by_the_fix(ledger: Ledger) -> None:
    ledger.record("observer-off-control-1-random.json")
    row = ledger.status()
    assert row["state"] == "inconclusive", row
    assert any("superseded by the check's fix: observer-off-control 2" in r for r in row["reasons"])


def test_ledger_supersede_still_lifts_such_a_receipt(ledger: Ledger) -> None:
    old = ledger.record("regression-24view-3-dropout.json")
    stands = ledger.record("regression-24view-3-dropout-nll.json")
    assert ledger.status()["state"] == "failed"
    r = run(ledger.capsys, "supersede", old, "--reason", "dropout", "--key", KEY.name, *ledger.db)
    assert r.code == 0 and "you signed it" in r.err, r.err
    r = run(ledger.capsys, "supersede", stands, "--reason", "ok", "--key", KEY.name, *ledger.db)
    assert r.code == 0, r.err
    row = ledger.status()
    assert row["state"] != "failed", row
    supersessions = [x for x in row["reasons"] if x.startswith(f"{SUPERSESSION}:")]
    assert any(f"{old[7:19]} superseded by" in x for x in supersessions)
    assert any(f"{stands[7:19]} superseded by" in x for x in supersessions)
    entries = json.loads(ledger.cli("history", *ledger.where, "--json"))["entries"]
    assert [e["superseded"] for e in entries[:2]] == [True, True]


# -- what counts as only a repeat difference, on the engine alone --------------

ROWS = [
    {"name": "logits", "elements": 8, "max_abs_diff": 0.5, "elements_differing": 8, "nonfinite": 0},
    {"name": "loss", "elements": 1, "max_abs_diff": 0.0, "elements_differing": 0, "nonfinite": 0},
]
REPEAT = "logits did not repeat: max abs diff 0.5 > 0.0 (8 of 8 elements differ)"


def _v3(reason: str = REPEAT, rows: list[dict] | None = None, **over: object) -> object:
    kw: dict = {
        "check": "regression-24view",
        "params": {"pooled_atol": 0.0},
        "outcome": "failed",
        "reason": reason,
        "measurements": {"outputs": ROWS if rows is None else rows, "rule": "reference"},
    }
    kw.update(over)
    r = receipt(**kw)
    p = r.predicate.model_copy(
        update={"check": r.predicate.check.model_copy(update={"version": "3"})}
    )
    return type(r)(r.id, r.seq, p, r.signer, r.signer_role)


def _row(*receipts: object) -> object:
    return status(list(receipts), check="regression-24view")  # type: ignore[arg-type]


def test_the_engine_supersedes_only_a_failure_of_repeats_alone() -> None:
    row = _row(_v3())
    assert row.state == "inconclusive" and FIX in why(row)
    # Another sentence in the reason (an output one run did not declare), a non-finite
    # output, or a failed NLL family: the receipt failed for more, and stands.
    more = f"{REPEAT}; output 'aux' declared by one run only"
    nan = [{**ROWS[0], "nonfinite": 3}, ROWS[1]]
    nll = {"outputs": ROWS, "families": [{"family": "nll", "state": "failed"}]}
    for r in (_v3(more), _v3(rows=nan), _v3(measurements=nll), _v3(rows=[ROWS[1]])):
        got = _row(r)
        assert got.state == "failed" and "check's fix" not in why(got), why(got)


def test_a_pass_after_a_superseded_failure_qualifies() -> None:
    old = _v3(seq=1)
    new = receipt(seq=2, check="regression-24view")
    row = _row(old, new)
    assert row.state == "qualified", why(row)
    assert SUPERSESSION in rules_of(row) and FIX in why(row)


def test_an_old_control_that_saw_the_observer_change_memory_stands() -> None:
    diffs = [
        {"key": "outputs[0].sha256_run1", "on": "a", "off": "b"},
        {"key": "forward1_cold_increment_bytes", "on": 1, "off": 2},
    ]
    control = receipt(
        check="observer-off-control",
        params={"check": "regression-24view", "inner_check_version": "3"},
        outcome="failed",
        reason="the observer changed 2 of 12 compared values",
        measurements={"differences": diffs, "on_outcome": "failed", "off_outcome": "failed"},
    )
    row = status([control], check="observer-off-control")
    assert row.state == "failed" and "check's fix" not in why(row)
