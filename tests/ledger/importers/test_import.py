"""`ledger import` on files made here: JUnit XML from pytest, in-toto results, event reports."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """\
[[claims]]
name = "suite.all"
check = "import-junit"

[[claims]]
name = "suite.numerics"
check = "import-junit"

[[claims]]
name = "suite.memory"
check = "import-junit"

[[claims]]
name = "release.tests"
check = "import-in-toto"

[[claims]]
name = "admission.no-oom-after-admit"
check = "import-admission-events"

[[claims]]
name = "suite.strict"
check = "import-junit"
params = { skips = "inconclusive" }

[[claims]]
name = "suite.one"
check = "import-junit"
"""


def _exit(outcomes: list[str]) -> int:
    """0 all passed, 3 when every other receipt is an infra-error, else 1."""
    bad = [o for o in outcomes if o != "passed"]
    return 0 if not bad else 3 if all(o == "infra-error" for o in bad) else 1


SUITE = """\
import pytest


def test_numerics_sum():
    assert sum([1, 2, 3]) == 6


def test_numerics_product():
    assert 2 * 3 == 7, "2 * 3 is not 7"


@pytest.mark.skip(reason="needs a GPU")
def test_memory_peak():
    pass


def test_memory_budget():
    assert 1 < 2
"""


@pytest.fixture
def ready(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    commit_file(repo, "qualification.toml", PLAN, "plan")
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return repo


def _import(
    capsys: pytest.CaptureFixture[str],
    repo: git.Repo,
    fmt: str,
    path: Path,
    *claims: str,
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Import, and check the exit code follows the worst outcome (0 / 1 / 2)."""
    args = ["--claim", claims[0], *[x for c in claims[1:] for x in ("--also", c)]]
    r = run(
        capsys,
        "import",
        fmt,
        str(path),
        *args,
        "--rev",
        "main",
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        "runner",
        *extra,
    )
    assert r.out.split(), r.err
    out = []
    for rid in r.out.split():
        shown = run(capsys, "show", rid, "--json")
        assert shown.code == 0, shown.err
        out.append(json.loads(shown.out)["statement"]["predicate"])
    assert r.code == _exit([p["outcome"] for p in out]), r.err
    return out


def _source_attached(p: dict[str, Any], path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert [a["digest"]["sha256"] for a in p["artifacts"]] == [digest]
    assert p["measurements"]["imported"]["sha256"] == digest
    assert p["check"]["parameters"]["imported_from"] == p["measurements"]["imported"]["format"]


def test_junit_from_a_real_pytest_run(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    everything, numerics, memory, strict = _import(
        capsys,
        ready,
        "junit",
        xml,
        "suite.all",
        "suite.numerics=*numerics*",
        "suite.memory=*memory*",
        "suite.strict=*memory*",
    )
    # A failure is a counterexample, named with its message.
    assert everything["outcome"] == "failed"
    assert everything["measurements"]["tests"] == 4
    assert numerics["outcome"] == "failed" and "2 * 3 is not 7" in numerics["reason"]
    [ce] = numerics["measurements"]["counterexamples"]
    assert ce["test"].endswith("::test_numerics_product")
    # A skipped test is listed, and does not block a pass when one selected test ran,
    # unless the claim's plan says skips = "inconclusive".
    assert memory["outcome"] == "passed" and memory["measurements"]["skipped_count"] == 1
    assert memory["measurements"]["not_run"][0]["message"].endswith("needs a GPU")
    assert memory["check"]["parameters"]["skips"] == "allowed"
    assert strict["outcome"] == "inconclusive" and "skips" in strict["reason"]
    assert strict["check"]["parameters"] == {"imported_from": "junit", "skips": "inconclusive"}
    assert memory["cleanup"] is None or memory["cleanup"].get("complete") is not True
    for p in (everything, numerics, memory, strict):
        _source_attached(p, xml)
        assert p["scope"] == {"imported_from": "junit"}


def _intoto(
    result: str,
    passed: list[str],
    warned: list[str],
    failed: list[str],
    *,
    commit: str,
) -> dict[str, Any]:
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "repo", "digest": {"gitCommit": commit}}],
        "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
        "predicate": {
            "result": result,
            "configuration": [{"name": "ci.yaml", "digest": {"sha256": "cd" * 32}}],
            "url": "https://ci.example/run/7",
            "passedTests": passed,
            "warnedTests": warned,
            "failedTests": failed,
        },
    }


def test_in_toto_test_results(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = ready.head.commit.hexsha
    f = tmp_path / "passed.intoto.json"
    f.write_text(json.dumps(_intoto("PASSED", ["t.a", "t.b"], [], [], commit=head)))
    [p] = _import(capsys, ready, "in-toto", f, "release.tests")
    assert p["outcome"] == "passed" and p["measurements"]["passed_count"] == 2
    _source_attached(p, f)
    warned = tmp_path / "warned.json"
    warned.write_text(json.dumps(_intoto("WARNED", ["t.a"], ["t.flaky"], [], commit=head)))
    [p] = _import(capsys, ready, "in-toto", warned, "release.tests")
    assert p["outcome"] == "inconclusive" and "t.flaky" in p["reason"]
    # Inside a DSSE envelope, with failures as counterexamples.
    stmt = _intoto("FAILED", ["t.a"], [], ["t.oom"], commit=head)
    env = {
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64.b64encode(json.dumps(stmt).encode()).decode(),
        "signatures": [],
    }
    failed = tmp_path / "failed.dsse.json"
    failed.write_text(json.dumps(env))
    [p] = _import(capsys, ready, "in-toto", failed, "release.tests")
    assert p["outcome"] == "failed" and p["measurements"]["counterexamples"] == ["t.oom"]
    assert p["measurements"]["signature_verified"] is False


def test_in_toto_of_another_predicate_type_is_refused(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = ready.head.commit.hexsha
    doc = _intoto("PASSED", [], [], [], commit=head)
    doc["predicateType"] = "https://slsa.dev/provenance/v1"
    f = tmp_path / "prov.json"
    f.write_text(json.dumps(doc))
    r = run(
        capsys,
        "import",
        "in-toto",
        str(f),
        "--claim",
        "release.tests",
        "--rev",
        "main",
        "--repo",
        str(ready.working_tree_dir),
        "--key",
        "runner",
    )
    assert r.code == 1 and "predicateType" in r.err


def _events(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_admission_event_reports(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = "admission.no-oom-after-admit"
    ok = _events(
        tmp_path / "ok.jsonl",
        [
            {"event": "admitted", "step": 1, "predicted_bytes": 100, "admission_bytes": 200},
            {
                "event": "admission_refused",
                "step": 2,
                "predicted_bytes": 300,
                "admission_bytes": 200,
            },
            {"event": "admitted", "step": 3, "predicted_bytes": 100, "observed_peak_bytes": 90},
        ],
    )
    [p] = _import(capsys, ready, "admission-events", ok, claim)
    # A refusal is never a failure.
    assert p["outcome"] == "passed" and p["measurements"]["refused_count"] == 1
    _source_attached(p, ok)
    oom = _events(
        tmp_path / "oom.jsonl",
        [
            {"event": "admitted", "step": 1, "predicted_bytes": 100, "admission_bytes": 200},
            {"event": "oom", "step": 1, "predicted_bytes": 100, "observed_peak_bytes": 250},
            {
                "event": "estimate_miss",
                "step": 4,
                "predicted_bytes": 100,
                "observed_peak_bytes": 140,
            },
        ],
    )
    [p] = _import(capsys, ready, "admission-events", oom, claim)
    assert p["outcome"] == "failed" and "out of memory after admission" in p["reason"]
    assert len(p["measurements"]["counterexamples"]) == 2
    refused = _events(
        tmp_path / "refused.jsonl",
        [{"event": "admission_refused", "predicted_bytes": 300, "admission_bytes": 200}],
    )
    [p] = _import(capsys, ready, "admission-events", refused, claim, extra=("--admitted", "0"))
    assert p["outcome"] == "refused"
    planning = _events(
        tmp_path / "planning.jsonl",
        [{"event": "admitted"}, {"event": "planning_error", "message": "no shape fits"}],
    )
    [p] = _import(capsys, ready, "admission-events", planning, claim)
    assert p["outcome"] == "inconclusive" and "planning" in p["reason"]
    silent = _events(tmp_path / "silent.jsonl", [{"event": "heartbeat"}])
    [p] = _import(capsys, ready, "admission-events", silent, claim)
    assert p["outcome"] == "inconclusive" and p["measurements"]["unknown_kinds"] == ["heartbeat"]
