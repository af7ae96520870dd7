"""The CI job in the receipt: `ledger qualify` run under each provider's documented
variables records the provider, job, URL, runner, labels or queue, node, and how long
each claim waited for a device of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.fleet.ci import ci_job
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo

GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/trainer",
    "GITHUB_RUN_ID": "9876543210",
    "GITHUB_RUN_ATTEMPT": "2",
    "GITHUB_JOB": "qualify",
    "RUNNER_NAME": "h200-runner-07",
    "LEDGER_RUNNER_LABELS": "self-hosted,gpu,h200",
    "NODE_NAME": "gpu-node-3",
}
BUILDKITE = {
    "BUILDKITE": "true",
    "BUILDKITE_JOB_ID": "0190a5e1-2f3b-4c5d-8e9f-0a1b2c3d4e5f",
    "BUILDKITE_BUILD_URL": "https://buildkite.com/acme/trainer/builds/412",
    "BUILDKITE_AGENT_NAME": "h200-agent-2",
    "BUILDKITE_AGENT_META_DATA_QUEUE": "h200",
}
GITLAB = {
    "GITLAB_CI": "true",
    "CI_JOB_ID": "77112233",
    "CI_JOB_URL": "https://gitlab.example/acme/trainer/-/jobs/77112233",
    "CI_RUNNER_DESCRIPTION": "h200 shell runner",
    "CI_RUNNER_TAGS": '["gpu", "h200"]',
    "CI_JOB_STARTED_AT": "2026-12-03T10:00:00Z",
}
WANT = {
    "github": (
        GITHUB,
        {
            "ci_provider": "github-actions",
            "ci_job_id": "9876543210.2/qualify",
            "ci_job_url": "https://github.com/acme/trainer/actions/runs/9876543210/attempts/2",
            "ci_pipeline_id": "9876543210",
            "ci_job_name": "qualify",
            "ci_repository": "acme/trainer",
            "ci_retry": "1",
            "ci_runner": "h200-runner-07",
            "ci_labels": "self-hosted,gpu,h200",
            "ci_node": "gpu-node-3",
        },
    ),
    "buildkite": (
        BUILDKITE,
        {
            "ci_provider": "buildkite",
            "ci_job_id": BUILDKITE["BUILDKITE_JOB_ID"],
            "ci_job_url": BUILDKITE["BUILDKITE_BUILD_URL"] + "#" + BUILDKITE["BUILDKITE_JOB_ID"],
            "ci_runner": "h200-agent-2",
            "ci_queue": "h200",
        },
    ),
    "gitlab": (
        GITLAB,
        {
            "ci_provider": "gitlab-ci",
            "ci_job_id": "77112233",
            "ci_job_url": GITLAB["CI_JOB_URL"],
            "ci_runner": "h200 shell runner",
            "ci_labels": "gpu,h200",
            "ci_job_started": "2026-12-03T10:00:00Z",
        },
    ),
}
PROVIDER_VARS = {k for env, _ in WANT.values() for k in env} | {"CI", "NODE_NAME"}


@pytest.fixture
def ledger_env(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    # Whatever CI runs these tests must not leak its own job into the receipts.
    for k in PROVIDER_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_CACHE", str(tmp_path / "cache"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return tmp_path


def _environment(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, str]:
    shown = json.loads(run(capsys, "show", rid, "--json").out)
    return dict(shown["statement"]["predicate"]["runner"]["environment"])


@pytest.mark.parametrize("provider", sorted(WANT))
def test_qualify_records_the_ci_job_and_each_claims_wait_for_a_device(
    provider: str,
    tmp_path: Path,
    ledger_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env, want = WANT[provider]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    repo = make_probe_repo(tmp_path / "repo", claim("a.first") + claim("b.second"))
    # One device for two claims: the second waits for the first to give it back.
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0", "--json")
    assert r.code == 0, r.err
    ids = {x["claim"]: x["id"] for x in json.loads(r.out)["receipts"]}
    first, second = (_environment(capsys, ids[c]) for c in ("a.first", "b.second"))
    for got in (first, second):
        ci = {k: v for k, v in got.items() if k.startswith("ci_")}
        if "ci_node" not in want:
            assert ci.pop("ci_node")  # the host's name where no node is given
        assert ci == want
    assert int(second["device_wait_ns"]) > int(first["device_wait_ns"]) >= 0


def test_no_provider_no_ci_facts_and_tags_in_either_spelling() -> None:
    assert ci_job({"CI": "true"}) == {}
    assert ci_job({"GITLAB_CI": "true", "CI_RUNNER_TAGS": "gpu, h200"}, "h")["ci_labels"] == (
        "gpu,h200"
    )
    # A Buildkite agent on an image that also carries GitHub's variables is Buildkite.
    both = {**GITHUB, **BUILDKITE}
    assert ci_job(both, "h")["ci_provider"] == "buildkite"
    long = ci_job({**GITLAB, "CI_RUNNER_DESCRIPTION": "x" * 10_000}, "h")["ci_runner"]
    assert len(long) == 500
