"""Importers on real files and crafted ones: ART's format-2 spool with a planning
error, a report whose fields contradict each other, a phase with an invisible
character, a JUnit test whose id equals the claim's selection pattern."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import git
import pytest

from tests.ledger.helpers import run
from tests.ledger.importers.test_import import _import, ready  # noqa: F401  (fixture)

SPOOL = Path(__file__).resolve().parents[1] / "fixtures" / "art_spool"
CLAIM = "admission.no-oom-after-admit"
GIB = 1024**3


def _report(i: str, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SPOOL / "0003-under-estimate.json").read_text())
    doc.update(id=i, **over)
    return doc


def _spool(tmp_path: Path, *reports: dict[str, Any]) -> Path:
    d = tmp_path / "spool"
    d.mkdir(exist_ok=True)
    for r in reports:
        (d / f"{r['id']}.json").write_text(json.dumps(r, sort_keys=True))
    return d


def _refused(capsys: pytest.CaptureFixture[str], repo: git.Repo, path: Path) -> str:
    r = run(
        capsys, "import", "admission-events", str(path), "--claim", CLAIM, "--rev", "main",
        "--repo", str(repo.working_tree_dir), "--key", "runner", "--admitted", "10",
    )  # fmt: skip
    assert r.code in (1, 2) and r.out == "" and r.err.count("\n") == 1, (r.code, r.err)
    assert json.loads(run(capsys, "audit", "--json").out)["entries"] == 2  # only the keys
    return r.err


def test_a_planning_error_decision_is_inconclusive_for_its_step_and_the_rest_judged(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # ART's format-2 spool as it writes a planner that could not decide: the
    # decision's outcome is planning_error.
    planning = _report(
        "0100-planning", event="estimate_miss", decision={"outcome": "planning_error"},
        observed_peak_bytes=None, error_pct=None, phase="planning",
    )  # fmt: skip
    over = _report(
        "0101-over", event="estimate_miss", decision={"outcome": "admitted"},
        observed_peak_bytes=20 * GIB, predicted_peak_bytes=30 * GIB, error_pct=-33.3,
    )  # fmt: skip
    spool = _spool(tmp_path, planning, over)
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM, extra=("--admitted", "10"))
    recs = {r["id"]: r["finding"] for r in p["measurements"]["records"]}
    assert recs == {"0100-planning": "planning-error", "0101-over": "over-prediction"}
    assert p["outcome"] == "inconclusive" and "1 planning error" in p["reason"]
    # The rest is judged: an under-prediction beside it fails the claim, and the
    # failing report's figures are the receipt's own measurements.
    under = _report("0102-under", decision={"outcome": "admitted"})
    spool = _spool(tmp_path, under)
    [p] = _import(capsys, ready, "admission-events", spool, CLAIM, extra=("--admitted", "10"))
    m = p["measurements"]
    assert p["outcome"] == "failed" and m["counterexample"]["source"] == "0102-under.json"
    for k in ("predicted_peak_bytes", "admission_peak_bytes", "observed_peak_bytes"):
        assert m[k] == under[k], k


def test_a_report_whose_fields_contradict_is_refused_naming_it(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    crafted = _report(
        "0200-crafted", event="admission_refused", oom=True, decision={"outcome": "admitted"}
    )
    err = _refused(capsys, ready, _spool(tmp_path, crafted))
    assert "0200-crafted.json" in err and "contradictory" in err


def test_a_phase_with_an_invisible_character_is_named_not_dropped(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    oom = json.loads((SPOOL / "0001-oom-after-admit.json").read_text())
    oom.update(id="0300-hidden", phase="forward\u200b")
    spool = _spool(tmp_path, oom)
    r = run(
        capsys, "import", "admission-events", str(spool), "--claim", f"{CLAIM}=forward*",
        "--rev", "main", "--repo", str(ready.working_tree_dir), "--key", "runner",
        "--admitted", "10",
    )  # fmt: skip
    assert r.code in (1, 2) and r.out == "" and r.err.count("\n") == 1, r.err
    assert "0300-hidden.json" in r.err and "forward\\u200b" in r.err


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4" failures="1" errors="0" skipped="0">
<testcase classname="tests.test_mem" name="test_peak*" time="0.1"/>
<testcase classname="tests.test_mem" name="test_peak" time="0.1"/>
<testcase classname="tests.test_mem" name="test_peak_big" time="0.1">
<failure message="peak 9 GiB over 8 GiB">assert False</failure></testcase>
<testcase classname="tests.test_mem" name="test_peak_small" time="0.1"/>
</testsuite></testsuites>
"""


def test_an_exact_junit_id_never_masks_the_tests_its_pattern_selects(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(JUNIT)
    # A passing test whose id equals the pattern (a crafted name, "test_peak*"): the
    # failure the pattern selects still counts.
    [p] = _import(capsys, ready, "junit", xml, "suite.memory=tests.test_mem::test_peak*")
    assert p["outcome"] == "failed" and "test_peak_big" in p["reason"]
    [p] = _import(capsys, ready, "junit", xml, "suite.memory=tests.test_mem::test_peak")
    assert p["outcome"] == "passed"  # an exact id alone selects that test only


def _zero_signed_bundle(commit: str) -> dict[str, Any]:
    """A Sigstore bundle whose one signature is all zero bytes."""
    stmt = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "trainer", "digest": {"gitCommit": commit}}],
        "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
        "predicate": {"result": "PASSED", "configuration": [], "passedTests": ["t.a"]},
    }
    payload = base64.b64encode(json.dumps(stmt).encode()).decode()
    sig = base64.b64encode(bytes(64)).decode()
    return {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "dsseEnvelope": {
            "payloadType": "application/vnd.in-toto+json",
            "payload": payload,
            "signatures": [{"keyid": "", "sig": sig}],
        },
    }


def test_a_plan_can_require_a_verified_signature_and_unverified_says_so(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ledger.read import formats
    from ledger.read.render import render_status
    from tests.conftest import commit_file
    from tests.ledger.importers.test_import import PLAN

    plan = PLAN.replace(
        'name = "release.tests"\ncheck = "import-in-toto"\n',
        'name = "release.tests"\ncheck = "import-in-toto"\n'
        "params = { require_signature = true }\n\n"
        '[[claims]]\nname = "release.loose"\ncheck = "import-in-toto"\ncleanup = false\n',
    )
    assert plan != PLAN
    commit_file(ready, "qualification.toml", plan, "require signatures")
    f = tmp_path / "zero.sigstore.json"
    f.write_text(json.dumps(_zero_signed_bundle(ready.commit("main").hexsha)))
    # Required: an all-zero signature never qualifies (nothing verified it).
    [p] = _import(capsys, ready, "in-toto", f, "release.tests")
    assert p["outcome"] == "inconclusive" and "signature not verified" in p["reason"]
    assert p["check"]["parameters"]["require_signature"] is True
    # Not required: it passes, and every surface says the signature was not verified.
    [p] = _import(capsys, ready, "in-toto", f, "release.loose")
    assert p["outcome"] == "passed" and p["reason"].startswith("signature not verified")
    r = run(
        capsys, "status", "--rev", "main", "--repo", str(ready.working_tree_dir), "--json",
        "--claim", "release.tests", "--claim", "release.loose",
    )  # fmt: skip
    doc = json.loads(r.out)
    states = {c["claim"]: c["state"] for c in doc["verdict"]["claims"]}
    assert states == {"release.tests": "inconclusive", "release.loose": "qualified"}
    for text in (render_status(doc, width=10_000), formats.markdown(doc), json.dumps(doc)):
        assert "signature not verified" in text
