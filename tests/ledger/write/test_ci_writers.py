"""Every writer names its CI job: `ledger run`, `ledger attest` and `ledger import`
under each provider's documented variables record the job that wrote the receipt,
and an import is labelled as the importer's job, never the producer's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.fleet.test_ci import BUILDKITE, GITHUB, GITLAB, PROVIDER_VARS
from tests.ledger.helpers import run

# The variables beyond the job itself: its pipeline, name, workflow and attempt.
MORE = {
    "github": {
        **GITHUB,
        "GITHUB_WORKFLOW": "qualify",
    },
    "buildkite": {
        **BUILDKITE,
        "BUILDKITE_BUILD_ID": "0190a5e0-aaaa-4bbb-8ccc-0d1e2f3a4b5c",
        "BUILDKITE_LABEL": ":nvidia: qualify",
        "BUILDKITE_PIPELINE_SLUG": "trainer",
        "BUILDKITE_RETRY_COUNT": "1",
        "NODE_NAME": "gpu-node-9",
    },
    "gitlab": {
        **GITLAB,
        "CI_PIPELINE_ID": "5566",
        "CI_JOB_NAME": "qualify",
        "CI_PROJECT_PATH": "acme/trainer",
        "NODE_NAME": "gpu-node-4",
    },
}
WANT = {
    "github": {
        "ci_provider": "github-actions",
        "ci_job_id": "9876543210.2/qualify",
        "ci_job_url": "https://github.com/acme/trainer/actions/runs/9876543210/attempts/2",
        "ci_pipeline_id": "9876543210",
        "ci_job_name": "qualify",
        "ci_workflow": "qualify",
        "ci_repository": "acme/trainer",
        "ci_retry": "1",
        "ci_runner": "h200-runner-07",
        "ci_labels": "self-hosted,gpu,h200",
        "ci_node": "gpu-node-3",
    },
    "buildkite": {
        "ci_provider": "buildkite",
        "ci_job_id": BUILDKITE["BUILDKITE_JOB_ID"],
        "ci_job_url": BUILDKITE["BUILDKITE_BUILD_URL"] + "#" + BUILDKITE["BUILDKITE_JOB_ID"],
        "ci_pipeline_id": "0190a5e0-aaaa-4bbb-8ccc-0d1e2f3a4b5c",
        "ci_job_name": ":nvidia: qualify",
        "ci_workflow": "trainer",
        "ci_retry": "1",
        "ci_runner": "h200-agent-2",
        "ci_queue": "h200",
        "ci_node": "gpu-node-9",
    },
    "gitlab": {
        "ci_provider": "gitlab-ci",
        "ci_job_id": "77112233",
        "ci_job_url": GITLAB["CI_JOB_URL"],
        "ci_pipeline_id": "5566",
        "ci_job_name": "qualify",
        "ci_repository": "acme/trainer",
        "ci_runner": "h200 shell runner",
        "ci_labels": "gpu,h200",
        "ci_job_started": "2026-12-03T10:00:00Z",
        "ci_node": "gpu-node-4",
    },
}
ALL_VARS = PROVIDER_VARS | {k for env in MORE.values() for k in env}

PLAN = """\
[[claims]]
name = "suite.acceptance"
check = "command"
"""


@pytest.fixture
def ready(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    # Whatever CI runs these tests must not leak its own job into the receipts.
    for k in ALL_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", PLAN, "plan")
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return repo


def _in_job(monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    for k in ALL_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in MORE[provider].items():
        monkeypatch.setenv(k, v)


def _predicate(capsys: pytest.CaptureFixture[str], out: str) -> dict[str, object]:
    rid = out.strip().splitlines()[-1]
    shown = run(capsys, "show", rid, "--json")
    assert shown.code == 0, shown.err
    p = json.loads(shown.out)["statement"]["predicate"]
    assert isinstance(p, dict)
    return p


def _ci(p: dict[str, object]) -> dict[str, str]:
    runner = p["runner"]
    assert isinstance(runner, dict)
    return {k: v for k, v in runner["environment"].items() if k.startswith("ci_")}


def _target(repo: git.Repo) -> tuple[str, ...]:
    return ("--rev", "main", "--repo", str(repo.working_tree_dir), "--key", "runner")


@pytest.mark.parametrize("provider", sorted(WANT))
def test_run_attest_and_import_record_the_job(
    provider: str,
    ready: git.Repo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _in_job(monkeypatch, provider)
    target = _target(ready)
    ran = run(
        capsys, "run", "--claim", "suite.acceptance", *target, "--", sys.executable, "-c", "pass"
    )
    assert ran.code == 0, ran.err
    attested = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "bench.throughput",
        "--check",
        "bench",
        "--outcome",
        "passed",
        *target,
    )
    assert attested.code == 0, attested.err
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuite name="s" tests="1"><testcase classname="t" name="test_a"/></testsuite>'
    )
    imported = run(
        capsys, "import", "junit", str(junit), "--claim", "suite.unit", "--unplanned", *target
    )
    assert imported.code == 0, imported.err
    for out in (ran.out, attested.out, imported.out):
        assert _ci(_predicate(capsys, out)) == WANT[provider]


def test_outside_ci_no_job_is_recorded(ready: git.Repo, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "bench.throughput",
        "--check",
        "bench",
        "--outcome",
        "passed",
        *_target(ready),
    )
    assert r.code == 0, r.err
    assert _ci(_predicate(capsys, r.out)) == {}


def test_an_import_is_the_importers_job_not_the_producers(
    ready: git.Repo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The statement was produced by a GitHub Actions job; a Buildkite job imports it.
    produced = "https://github.com/acme/trainer/actions/runs/1/attempts/1"
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "repo", "digest": {"gitCommit": ready.head.commit.hexsha}}],
        "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
        "predicate": {
            "result": "PASSED",
            "configuration": [{"name": "ci.yaml", "digest": {"sha256": "cd" * 32}}],
            "url": produced,
            "passedTests": ["t.a"],
            "warnedTests": [],
            "failedTests": [],
        },
    }
    f = tmp_path / "results.intoto.json"
    f.write_text(json.dumps(statement))
    _in_job(monkeypatch, "buildkite")
    r = run(
        capsys,
        "import",
        "in-toto",
        str(f),
        "--claim",
        "release.tests",
        "--unplanned",
        *_target(ready),
    )
    assert r.code == 0, r.err
    p = _predicate(capsys, r.out)
    assert _ci(p) == WANT["buildkite"]
    # The producer's job stays the source's word, in the measurements.
    m = p["measurements"]
    assert isinstance(m, dict) and m["url"] == produced


def test_an_attempt_that_is_no_count_gives_no_retry() -> None:
    from ledger.fleet.ci import ci_job

    assert "ci_retry" not in ci_job({**GITHUB, "GITHUB_RUN_ATTEMPT": "x"}, "h")
    assert "ci_retry" not in ci_job({**BUILDKITE, "BUILDKITE_RETRY_COUNT": ""}, "h")
    assert ci_job({**GITHUB, "GITHUB_RUN_ATTEMPT": "1"}, "h")["ci_retry"] == "0"
