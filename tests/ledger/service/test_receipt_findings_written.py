"""Receipts Ledger did not measure itself lead their page with the figures they carry:
an import says what the importer read (JUnit counts and the failing tests' names, an
in-toto result, admission reports), `ledger run` the command's exit status, leaked
processes, memory and declared outputs; `ledger show` says the same lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import httpx
import pytest

from ledger.service.run import start
from tests.conftest import commit_file
from tests.ledger.helpers import run
from tests.ledger.service.test_receipt_findings import found_text

PLAN = """\
[[claims]]
name = "suite.all"
check = "import-junit"

[[claims]]
name = "release.tests"
check = "import-in-toto"

[[claims]]
name = "admission.no-oom-after-admit"
check = "import-admission-events"

[[claims]]
name = "suite.acceptance"
check = "command"

[[claims]]
name = "harness.memory"
check = "their-harness"
"""

SUITE = """\
import pytest


def test_sum():
    assert sum([1, 2, 3]) == 6


def test_product():
    assert 2 * 3 == 7, "2 * 3 is not 7"


@pytest.mark.skip(reason="needs a GPU")
def test_peak():
    pass
"""


def _recorded(
    capsys: pytest.CaptureFixture[str], repo: git.Repo, *args: str, cmd: tuple[str, ...] = ()
) -> str:
    where = ("--rev", "main", "--repo", str(repo.working_tree_dir), "--key", "runner")
    r = run(capsys, *args, *where, *(("--", *cmd) if cmd else ()))
    assert r.out.strip(), r.err
    return r.out.strip().splitlines()[-1]


def _show(capsys: pytest.CaptureFixture[str], rid: str) -> str:
    r = run(capsys, "show", rid)
    assert r.code == 0, r.err
    return " ".join(r.out.split())


def test_imports_and_runs_lead_with_what_they_carry(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "l.db"
    monkeypatch.setenv("LEDGER_DB", str(db))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", PLAN, "plan")
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    suite = tmp_path / "suite" / "test_suite.py"
    suite.parent.mkdir()
    suite.write_text(SUITE)
    xml = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(suite),
            f"--junitxml={xml}",
        ],
        cwd=suite.parent,
        capture_output=True,
        check=False,
    )
    head = repo.head.commit.hexsha
    intoto = tmp_path / "failed.intoto.json"
    intoto.write_text(
        json.dumps(
            {
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "repo", "digest": {"gitCommit": head}}],
                "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
                "predicate": {
                    "result": "FAILED",
                    "configuration": [],
                    "passedTests": ["t.a"],
                    "warnedTests": [],
                    "failedTests": ["t.oom"],
                },
            }
        )
    )
    events = tmp_path / "oom.jsonl"
    events.write_text(
        "".join(
            json.dumps(e) + "\n"
            for e in (
                {"event": "admitted", "step": 1, "predicted_bytes": 100 << 20},
                {
                    "event": "oom",
                    "step": 1,
                    "predicted_bytes": 100 << 20,
                    "observed_peak_bytes": 250 << 20,
                },
            )
        )
    )
    out = tmp_path / "out"
    code = f"import pathlib; pathlib.Path({str(out)!r}).mkdir(); "
    code += f"pathlib.Path({str(out / 'r.txt')!r}).write_text('ok'); raise SystemExit(3)"
    figures = tmp_path / "m.json"
    figures.write_text(json.dumps({"predicted_bytes": 8 << 30, "measured_bytes": 9 << 30}))
    attest = ("attest", "--claim", "harness.memory", "--outcome")
    ids = {
        "attested": _recorded(
            capsys, repo, *attest, "failed", "--reason", "over", "--measurements", str(figures)
        ),
        "bare": _recorded(capsys, repo, *attest, "passed"),
        "junit": _recorded(capsys, repo, "import", "junit", str(xml), "--claim", "suite.all"),
        "in-toto": _recorded(
            capsys, repo, "import", "in-toto", str(intoto), "--claim", "release.tests"
        ),
        "events": _recorded(
            capsys,
            repo,
            "import",
            "admission-events",
            str(events),
            "--claim",
            "admission.no-oom-after-admit",
        ),
        "run": _recorded(
            capsys,
            repo,
            "run",
            "--claim",
            "suite.acceptance",
            "--artifact",
            str(out / "*.txt"),
            cmd=(sys.executable, "-c", code),
        ),
    }
    said = {
        "attested": [
            "The check their-harness recorded measured 9.00 GiB against predicted 8.00 GiB, "
            "measured/predicted 1.12 (as its signer recorded them)."
        ],
        "bare": [
            "The check their-harness records no measured figures: its outcome, passed, is all "
            "it says."
        ],
        "junit": [
            "The importer read 3 tests from junit.xml (not measured by Ledger): 1 passed, "
            "1 failed, 0 errors, 1 skipped, 0 xfailed.",
            "test_product",
            "2 * 3 is not 7",
        ],
        "in-toto": [
            "The importer read 1 in-toto test-result statement(s) (not measured by Ledger): "
            "result FAILED; 1 passed, 0 warned, 1 failed; the statement is unsigned.",
            "t.oom",
        ],
        "events": [
            "The importer read 2 admission reports (not measured by Ledger): 1 out of memory "
            "after admission",
            "First counterexample at oom.jsonl:2: observed peak 250 MiB against predicted "
            "100 MiB, observed/predicted 2.5.",
        ],
        "run": [
            "The command exited with status 3 after",
            "0 processes leaked; 1 declared output kept, 0 refused, 0 patterns matched nothing.",
        ],
    }
    shown = {k: _show(capsys, rid) for k, rid in ids.items()}
    srv = start(f"sqlite:///{db}", None)
    try:
        pages = {
            k: httpx.get(f"{srv.url}/receipt/{rid}", timeout=60).text for k, rid in ids.items()
        }
    finally:
        srv.stop()
    for k, lines in said.items():
        text, markup = found_text(pages[k])
        for line in lines:
            assert line in text, (k, text)
            assert line in shown[k], (k, shown[k])
        by = {"run": "command", "attested": "harness", "bare": "harness"}.get(k, "importer")
        assert f'data-by="{by}"' in markup, (k, markup[:200])
    # The failing test is marked in the findings' table on both surfaces.
    _, markup = found_text(pages["junit"])
    assert 'data-state="counterexample"' in markup
    assert "✘" in shown["junit"]
