"""The CI job a run belongs to, read from its provider's documented variables.

GitHub Actions, Buildkite and GitLab CI each set variables in every job; what
one provider does not give is left out, never guessed. Where a provider does
not tell the runner's labels (GitHub Actions), ``LEDGER_RUNNER_LABELS`` set in
the workflow stands in; ``NODE_NAME`` (the Kubernetes downward API's usual name
for the node a runner pod is on) names the node, else the host name does.

Every value lands in the receipt's ``runner.environment`` under a ``ci_`` key, in
the receipts of every writer (``qualify``, ``run``, ``attest``, ``import``): the job
that wrote the receipt, which for an import is the importer's, not the job that
produced the file. ``ci_retry`` counts the retries before this attempt, so a retried
infrastructure failure (exit 3) is told from a first one.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping

__all__ = ["ci_job"]

_MAX = 500
"""A value longer than this is cut: a receipt records a job, not a provider's dump."""


def _cut(text: str) -> str:
    text = text.replace("\x00", "").strip()
    return text if len(text) <= _MAX else text[: _MAX - 1] + "…"


def _gitlab_tags(raw: str) -> str:
    """``CI_RUNNER_TAGS`` is a JSON list (``["gpu", "h200"]``) on current runners and a
    comma list on older ones: both become ``gpu,h200``."""
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        return ",".join(str(t).strip() for t in doc)
    return ",".join(t.strip() for t in raw.split(",") if t.strip())


def _github(env: Mapping[str, str]) -> dict[str, str]:
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repo, run = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", "")
    out = {"ci_provider": "github-actions"}
    if run:
        attempt = env.get("GITHUB_RUN_ATTEMPT", "")
        # The numeric job id is not among the variables: the job is the run's
        # attempt and the workflow's job key.
        out["ci_job_id"] = run + (f".{attempt}" if attempt else "")
        if env.get("GITHUB_JOB"):
            out["ci_job_id"] += f"/{env['GITHUB_JOB']}"
        if repo:
            url = f"{server}/{repo}/actions/runs/{run}"
            out["ci_job_url"] = url + (f"/attempts/{attempt}" if attempt else "")
        # GITHUB_RUN_ATTEMPT starts at 1; a value that is no count is left out.
        if attempt.isdigit() and int(attempt) >= 1:
            out["ci_retry"] = str(int(attempt) - 1)
    out["ci_pipeline_id"] = run
    out["ci_job_name"] = env.get("GITHUB_JOB", "")
    out["ci_workflow"] = env.get("GITHUB_WORKFLOW", "")
    out["ci_repository"] = repo
    out["ci_runner"] = env.get("RUNNER_NAME", "")
    out["ci_labels"] = env.get("LEDGER_RUNNER_LABELS", "")
    return out


def _buildkite(env: Mapping[str, str]) -> dict[str, str]:
    job = env.get("BUILDKITE_JOB_ID", "")
    build = env.get("BUILDKITE_BUILD_URL", "")
    return {
        "ci_provider": "buildkite",
        "ci_job_id": job,
        # A job's page is its build's page at the job's anchor.
        "ci_job_url": f"{build}#{job}" if build and job else build,
        "ci_pipeline_id": env.get("BUILDKITE_BUILD_ID", ""),
        "ci_job_name": env.get("BUILDKITE_LABEL", ""),
        "ci_workflow": env.get("BUILDKITE_PIPELINE_SLUG", ""),
        "ci_retry": env.get("BUILDKITE_RETRY_COUNT", ""),
        "ci_runner": env.get("BUILDKITE_AGENT_NAME", ""),
        "ci_queue": env.get("BUILDKITE_AGENT_META_DATA_QUEUE", ""),
        "ci_labels": env.get("LEDGER_RUNNER_LABELS", ""),
    }


def _gitlab(env: Mapping[str, str]) -> dict[str, str]:
    return {
        "ci_provider": "gitlab-ci",
        "ci_job_id": env.get("CI_JOB_ID", ""),
        "ci_job_url": env.get("CI_JOB_URL", ""),
        "ci_pipeline_id": env.get("CI_PIPELINE_ID", ""),
        "ci_job_name": env.get("CI_JOB_NAME", ""),
        "ci_repository": env.get("CI_PROJECT_PATH", ""),
        "ci_runner": env.get("CI_RUNNER_DESCRIPTION", ""),
        "ci_labels": _gitlab_tags(env.get("CI_RUNNER_TAGS", "")),
        "ci_job_started": env.get("CI_JOB_STARTED_AT", ""),
    }


def ci_job(env: Mapping[str, str], host: str | None = None) -> dict[str, str]:
    """The ``ci_`` facts of the job ``env`` belongs to; empty outside a known provider.
    Checked in a fixed order, so a runner that sets two providers' variables (a
    Buildkite agent on a GitHub-hosted image) is recorded as the one running it:
    Buildkite, GitLab, then GitHub (whose variables leak into containers it starts)."""
    if env.get("BUILDKITE") == "true":
        out = _buildkite(env)
    elif env.get("GITLAB_CI") == "true":
        out = _gitlab(env)
    elif env.get("GITHUB_ACTIONS") == "true":
        out = _github(env)
    else:
        return {}
    out["ci_node"] = env.get("NODE_NAME") or (host if host is not None else socket.gethostname())
    return {k: _cut(v) for k, v in out.items() if v}
