"""One receipt's own surfaces say whose failure it is, as `status` labels its blocker:
`ledger show`, the web receipt page, and a supersession whose reason contradicts the
label (said as a warning, still recorded). A real SQLite ledger with two runner keys;
the second signs a failed receipt of the base, which does not flip the label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.run import start
from ledger.store.store import Store
from ledger.write.ingest import record
from tests.ledger.factories import envelope
from tests.ledger.helpers import run

BASE, HEAD = "b" * 40, "c" * 40
CLAIM = "admission.no-oom-after-admit"


def _over(commit: str, outcome: str) -> dict[str, Any]:
    src: dict[str, Any] = {"repo": "example", "commit": commit, "tree": "2" * 40, "dirty": False}
    if commit == HEAD:
        src |= {"pr": 3, "base": BASE}
    over: dict[str, Any] = {
        "source": src,
        "outcome": outcome,
        "runner": {
            "host": "gpu-host",
            "started": "2026-11-30T00:00:00Z",
            "finished": "2026-11-30T00:00:01Z",
            "ledger_version": "0.1.0",
            "environment": {"base_branch": "release"} if commit == HEAD else {},
        },
    }
    if outcome != "passed":
        over["reason"] = "peak 9 GiB > admitted 8 GiB"
    return over


@pytest.fixture
def ledger(ledger_env: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The head's failed receipt; the base passes by the same runner key; another
    runner key then signs a newer failed receipt of the base. Returns the head's id."""
    assert run(capsys, "keys", "new", "other", "--role", "runner", "--host", "gpu-host").code == 0
    add = ("keys", "host", "add", "runner", "gpu-host", "--reason", "the GPU host")
    assert run(capsys, *add).code == 0
    keys = KeyDir(key_dir)
    mine, other = keys.load("runner"), keys.load("other")
    store = Store.open(f"sqlite:///{ledger_env / 'l.db'}")
    [base] = record(store, [envelope(mine, **_over(BASE, "passed"))])
    [head] = record(store, [envelope(mine, **_over(HEAD, "failed"))])
    record(store, [envelope(other, **_over(BASE, "failed"))])
    assert base.id != head.id
    return head.id


def test_show_and_the_receipt_page_carry_the_label(
    ledger: str, ledger_env: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run(capsys, "show", ledger)
    assert shown.code == 0, shown.err
    flat = " ".join(shown.out.split())
    assert "baseline introduced by this pull request: the base bbbbbbbbbbbb passes" in flat
    assert flat.count("; the base is the branch point on release") == 1
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", KeyDir(key_dir))
    try:
        page = httpx.get(f"{srv.url}/receipt/{ledger}", headers={"Accept": "text/html"})
        assert page.status_code == 200, page.text
        assert '<div class="baseline" data-label="introduced"><strong>Baseline</strong>: ' in (
            page.text
        )
    finally:
        srv.stop()


def test_a_supersession_whose_reason_contradicts_the_label_says_so(
    ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run(capsys, "supersede", ledger, "--reason", "flaky host", "--key", "runner")
    # Said, and still recorded: the reason is a person's word, the label the ledger's.
    assert got.code == 0, got.err
    assert got.err.startswith("recorded sha256:")
    flat = " ".join(got.err.split())
    assert "warning: the reason 'flaky host' contradicts the baseline, which says: " in flat
    assert "introduced by this pull request" in flat
    # A reason that does not blame the host or chance is not warned about.
    again = run(
        capsys, "supersede", ledger, "--reason", "fixed in 4f2a", "--dry-run", "--key", "runner"
    )
    assert again.code == 0 and "warning:" not in again.err, again.err
