"""Status in CI formats: Markdown, JUnit XML and a GitHub check-run payload,
checked against the shapes those systems document."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import git
import pytest

from ledger.read.formats import github_check, junit, markdown
from tests.ledger.helpers import run


@pytest.fixture
def status_doc(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> dict[str, Any]:
    """A real status answer: one claim passed, one failed with a reason containing a pipe."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner").code == 0
    where = ("--rev", "HEAD", "--repo", str(repo.working_tree_dir), "--key", "r", "--unplanned")
    clean = tmp_path / "cleanup.json"
    clean.write_text('{"complete": true, "resources": []}')
    ok = run(
        capsys, "attest", "--claim", "good", "--outcome", "passed", "--cleanup", str(clean), *where
    )
    bad = run(capsys, "attest", "--claim", "bad", "--outcome", "failed", "--reason", "a|b", *where)
    assert ok.code == 0 and bad.code == 0, (ok.err, bad.err)
    r = run(
        capsys,
        "status",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--claim",
        "good",
        "--claim",
        "bad",
        "--json",
    )
    doc: dict[str, Any] = json.loads(r.out)
    assert doc["qualified"] is False
    return doc


def test_markdown_is_a_table_with_one_row_per_claim_and_scope(status_doc: dict[str, Any]) -> None:
    md = markdown(status_doc)
    lines = md.splitlines()
    v = status_doc["verdict"]
    assert lines[0].startswith("### Ledger: ") and f"**{v['headline']}**" in lines[0]
    assert v["headline"] == "not qualified: 1 of 2 required claims qualified"
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| claim")]
    assert len(rows) == len(v["claims"])
    # The blocker comes first, with the command to run next.
    blocking = lines.index("**Blocking**")
    assert lines[blocking + 2].startswith("1. **bad**: failed")
    # A claim the plan does not name: only another harness's result records it.
    assert "next: `ledger attest --claim bad --rev " in lines[blocking + 2]
    # Every row has exactly five cells: the pipe in the reason is escaped.
    for row in rows:
        assert len(row.replace("\\|", "").split("|")) == 7
    assert any("✅ qualified" in r for r in rows) and any("❌ failed" in r for r in rows)


def test_junit_counts_agree_with_the_cases(status_doc: dict[str, Any]) -> None:
    root = ET.fromstring(junit(status_doc))
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests", "-1")) == len(cases) == len(status_doc["verdict"]["claims"])
    failed = [c for c in cases if c.find("failure") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert int(suite.get("failures", "-1")) == len(failed) == 1
    assert int(suite.get("skipped", "-1")) == len(skipped)
    assert suite.get("errors") == "0"
    assert failed[0].get("classname") == "bad"
    failure = failed[0].find("failure")
    assert (
        failure is not None
        and failure.get("message", "").startswith("failed: ")
        and "a|b" in (failure.text or "")
    )
    assert all(c.get("classname") and c.get("name") for c in cases)


def test_github_check_payload_has_the_check_run_fields(status_doc: dict[str, Any]) -> None:
    payload = github_check(status_doc)
    assert payload["head_sha"] == status_doc["subject"]["commit"]
    assert payload["status"] == "completed" and payload["conclusion"] == "failure"
    out = payload["output"]
    assert out["title"] == "not qualified: 1 of 2 required claims qualified"
    assert out["summary"] == markdown(status_doc)
    [note] = out["annotations"]
    assert note["annotation_level"] == "failure" and note["title"] == "bad: failed"
    for k in ("path", "start_line", "end_line", "message"):
        assert k in note
    json.dumps(payload)  # a JSON document as-is
