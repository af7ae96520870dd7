"""Whose failure is it: a claim that fails on a pull request's head is judged on the
commit the pull request branched from, on the same device, and every surface labels
the blocker (introduced here; fails on the base too; fails only on one GPU). Real
claims on CPU, real git repositories, a real SQLite ledger; the GPUs of the
device-only case (tests/ledger/fleet/test_baseline_device.py) exist only as a fake
NVML (outside the product)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import git
import httpx
import pytest

from ledger.evidence.keys import KeyDir
from ledger.service.auth import new_token
from ledger.service.run import start
from tests.ledger.helpers import run
from tests.ledger.probe_repo import PROBE, make_probe_repo

PR = 7

# The probe, able to fail its forward on one device only (as a bad GPU's would).
SOURCE = PROBE.replace(
    '        if self.mode == "oom":',
    '        if self.mode == "oom" or (\n'
    '            self.mode == "oom-on-1" and os.environ.get("CUDA_VISIBLE_DEVICES") == "1"\n'
    "        ):",
)


def _claim(mode: str) -> str:
    return (
        '[[claims]]\nname = "r"\ncheck = "cleanup"\n'
        "params = { batch = 1, seq = 8 }\n"
        f'workload_params = {{ mode = "{mode}" }}\n'
    )


def _pr_repo(path: Path, base_mode: str, head_mode: str) -> tuple[Path, str, str]:
    """main with the claim's workload in ``base_mode``; PR 7's head, branched from it,
    with the head's workload definition in ``head_mode``. Returns (repo, base, head)."""
    make_probe_repo(path, _claim(base_mode), source=SOURCE)
    repo = git.Repo(path)
    base = repo.head.commit.hexsha
    plan = path / "qualification.toml"
    plan.write_text(plan.read_text().replace(f'mode = "{base_mode}"', f'mode = "{head_mode}"'))
    (path / "notes.txt").write_text("the pull request's change\n")
    repo.index.add(["qualification.toml", "notes.txt"])
    actor = git.Actor("Probe", "probe@ledger.invalid")
    head = repo.index.commit("pr", author=actor, committer=actor).hexsha
    repo.git.update_ref(f"refs/pull/{PR}/head", head)
    repo.git.reset("--hard", base)  # main stays at the base
    return path, base, head


def _qualify(capsys: pytest.CaptureFixture[str], repo: Path, *extra: str) -> Any:
    r = run(capsys, "qualify", "--pr", str(PR), "--repo", str(repo), "--json", *extra)
    return r, json.loads(r.out)


def _label(doc: dict[str, Any]) -> dict[str, Any]:
    [b] = doc["status"]["verdict"]["blockers"]
    assert b["claim"] == "r"
    return dict(b["attribution"])


def test_a_defect_the_head_introduced_is_labelled_so_and_the_base_receipt_is_reused(
    tmp_path: Path, ledger_env: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, base, _ = _pr_repo(tmp_path / "repo", "plain", "oom")
    r, doc = _qualify(capsys, repo)
    assert r.code == 1, r.err
    # The head failed; the base ran the same claim on the same device and passed.
    [ran] = doc["baseline"]
    assert (ran["claim"], ran["outcome"], ran["commit"], ran["reused"]) == (
        "r",
        "passed",
        base,
        False,
    )
    assert f"baseline: running r on the base {base[:12]}" in r.err
    a = _label(doc)
    assert a["label"] == "introduced" and a["base_commit"] == base
    assert a["base_receipt"] == ran["id"]
    assert a["text"].startswith("introduced by this pull request: the base ")
    # The label explains, it never unblocks.
    assert doc["status"]["verdict"]["blockers"][0]["state"] == "failed"

    # A second run reuses the base's receipt: nothing of the base runs again.
    r2, doc2 = _qualify(capsys, repo)
    assert r2.code == 1, r2.err
    [again] = doc2["baseline"]
    assert again["reused"] is True and again["id"] == ran["id"]
    assert "baseline: running" not in r2.err and "reused" in r2.err
    assert _label(doc2)["label"] == "introduced"

    # Every surface says it: the terminal, Markdown, JUnit, the GitHub check.
    text = run(capsys, "status", "--pr", str(PR), "--repo", str(repo)).out
    assert "baseline: introduced by this pull request" in text
    for fmt, want in (
        ("markdown", "; baseline: introduced by this pull request"),
        ("junit", "baseline: introduced by this pull request"),
        ("github-check", "baseline: introduced by this pull request"),
    ):
        out = run(capsys, "status", "--pr", str(PR), "--repo", str(repo), "--format", fmt).out
        assert want in out, fmt
    # ... and the web PR page, with the base's receipt linked.
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", KeyDir(key_dir))
    try:
        q = urlencode({"repo": doc["status"]["subject"]["repo"], "pr": PR})
        page = httpx.get(f"{srv.url}/pr?{q}", headers={"Accept": "text/html"})
        assert page.status_code == 200, page.text
        assert '<div class="baseline" data-label="introduced"><strong>Baseline</strong>: ' in (
            page.text
        )
        assert f'href="/receipt/{ran["id"]}"' in page.text
    finally:
        srv.stop()
    # Without a baseline asked, nothing of the base runs and no label is made up.
    r3, doc3 = _qualify(capsys, repo, "--no-baseline")
    assert doc3["baseline"] == [] and "baseline:" not in r3.err


def test_a_defect_already_on_the_base_is_not_laid_at_the_pull_requests_door(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, base, _ = _pr_repo(tmp_path / "repo", "oom", "oom")
    r, doc = _qualify(capsys, repo)
    assert r.code == 1, r.err
    [ran] = doc["baseline"]
    assert ran["outcome"] == "failed" and ran["commit"] == base
    a = _label(doc)
    assert a["label"] == "base-too"
    assert a["text"].startswith("fails on the base too: not introduced here")
    assert a["base_receipt"] == ran["id"]
    assert doc["status"]["verdict"]["blockers"][0]["state"] == "failed"


def test_through_a_server_the_base_is_read_back_and_reused_there(
    tmp_path: Path,
    ledger_env: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Where CI runners record: through `ledger serve`, with a runner token.
    repo, base, _ = _pr_repo(tmp_path / "repo", "plain", "oom")
    monkeypatch.setenv("LEDGER_TOKEN", new_token("gpu-host", tmp_path / "tokens", ["runner"]))
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", KeyDir(key_dir), tokens=tmp_path / "tokens")
    try:
        r, doc = _qualify(capsys, repo, "--server", srv.url)
        assert r.code == 1, r.err
        [ran] = doc["baseline"]
        assert (ran["outcome"], ran["commit"], ran["reused"]) == ("passed", base, False)
        r2, doc2 = _qualify(capsys, repo, "--server", srv.url)
        [again] = doc2["baseline"]
        assert again["reused"] is True and again["id"] == ran["id"], r2.err
        # The server's answer labels the blocker as the local one does.
        got = run(capsys, "status", "--pr", str(PR), "--repo", str(repo), "--server", srv.url)
        assert "baseline: introduced by this pull request" in got.out, got.out + got.err
    finally:
        srv.stop()
