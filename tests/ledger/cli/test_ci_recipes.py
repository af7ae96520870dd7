"""The CI recipes of README.md and docs/deploy.md, and the repository's GitHub action
(action.yml, scripts/ci/qualify-pr.sh), run against a real `ledger serve` and real git
repositories, for four pull requests: one that qualifies (exit 0), one whose code fails
a claim this run runs (1), one held back only by infrastructure (3) and one whose head
already holds a counterexample on a claim this run does not repeat (1).

Each snippet is found by the fixed rule of `tests.ledger.ci_snippets` and run as its CI
would run it: a YAML wrapper (Kubernetes Job, SkyPilot task, Buildkite and GitLab CI
steps, a GitHub workflow) cannot run here, so the shell each one holds is taken out the
way its provider takes it (Buildkite's `pipeline upload` interpolation, GitHub's
``${{ }}`` expressions, the composite action's inputs) and run. Only `gh` is a stub (it
records what it would post); `ledger` is the real one. Steps that come out the same (the
same text, the same inputs) run once per pull request: under ``sh -e`` (dash, errexit),
POSIX and the strictest of the shells the providers use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git
import pytest
import yaml  # type: ignore[import-untyped]

from ledger.cli import main
from ledger.evidence.keys import KeyDir
from ledger.service.run import Running, start
from ledger.write.ingest import init_ledger
from tests.conftest import commit_file
from tests.ledger.ci_snippets import ROOT, Snippet, ci_snippets, unmarked_ci_blocks
from tests.ledger.probe_repo import PROBE, claim

SCRIPT = ROOT / "scripts" / "ci" / "qualify-pr.sh"
ACTION = ROOT / "action.yml"
BIN = Path(sys.executable).parent
DOC_SERVER = "https://ledger.example"
DOC_REPO = "https://git.example/org/repo.git"
GITHUB_REPOSITORY = "org/repo"
UNIT, CLEANUP = "unit.tests", "cleanup.all-released"
POSIX_SH = ("sh", "-e", "-c")

pytestmark = pytest.mark.skipif(
    shutil.which("sh") is None or shutil.which("bash") is None, reason="no sh or bash"
)


@dataclass(frozen=True)
class Case:
    name: str
    pr: int
    base: str
    want: int
    """The documented exit status: 0 qualified, 1 not by the code, 3 only infrastructure."""


# `main` (the remote's default branch) governs with a plan none of these heads meets:
# a recipe that leaves out --base judges them by it, and exits 1 where 0 or 3 is due.
PASSING = Case("passing", 1, "release", 0)
FAILING = Case("failing", 2, "gpu", 1)
INFRA = Case("infra-only", 3, "release", 3)
INHERITED = Case("inherited-failure", 4, "release", 1)
CASES = (PASSING, FAILING, INFRA, INHERITED)

RELEASE_PLAN = f'[[claims]]\nname = "{UNIT}"\ncheck = "command"\n'
MAIN_PLAN = RELEASE_PLAN + '\n[[claims]]\nname = "docs.build"\ncheck = "command"\n'
# The one claim qualify runs here: cleanup on a tiny workload, on the CPU.
GPU_PLAN = 'workload = "probe_wl:make_workload"\n\n' + claim(CLEANUP)
BROKEN = PROBE + (
    "\n\ndef make_workload(mode: str = 'plain') -> Probe:\n"
    "    raise RuntimeError('this change broke the workload')\n"
)


@dataclass
class World:
    server: Running
    origin: Path
    keys: Path
    tmp: Path

    @property
    def kept(self) -> Path:
        """An outbox that holds one signed receipt (of `PASSING`'s head, a pass)."""
        return self.tmp / "kept-data" / "ledger" / "outbox"

    runs: dict[tuple[Any, ...], Result] = field(default_factory=dict)
    """Each distinct step's result, run once."""

    @property
    def url(self) -> str:
        return self.server.url


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    posted: list[dict[str, Any]]
    """Each check document `gh api .../check-runs --input FILE` was given."""
    outputs: dict[str, str]
    """What the step wrote to $GITHUB_OUTPUT."""
    files: frozenset[str]
    """The names in the step's working folder afterwards."""
    summary: str
    """What the step added to $GITHUB_STEP_SUMMARY."""


def _origin(tmp: Path) -> Path:
    """The remote: `main`, `release` and `gpu`, and one pull request per case on top of its
    base (refs/pull/N/head)."""
    repo = git.Repo.init(tmp / "origin", initial_branch="main")
    commit_file(repo, "qualification.toml", MAIN_PLAN, "plan")
    repo.git.checkout("-b", "release")
    commit_file(repo, "qualification.toml", RELEASE_PLAN, "release plan")
    repo.git.checkout("main")
    repo.git.checkout("-b", "gpu")
    commit_file(repo, "probe_wl.py", PROBE, "workload")
    commit_file(repo, "qualification.toml", GPU_PLAN, "gpu plan")
    for case in CASES:
        repo.git.checkout(case.base)
        repo.git.checkout("-b", f"pr-{case.pr}")
        if case is FAILING:
            commit_file(repo, "probe_wl.py", BROKEN, "change the workload")
        else:
            commit_file(repo, f"feature{case.pr}.py", "x = 1\n", "a change")
        repo.git.update_ref(f"refs/pull/{case.pr}/head", "HEAD")
    repo.git.checkout("main")
    return Path(repo.working_tree_dir or ".")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("ci")
    keys = tmp / "keys"
    db = f"sqlite:///{tmp / 'ledger.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LEDGER_KEYS", str(keys))
        mp.setenv("XDG_DATA_HOME", str(tmp / "attest-data"))
        init_ledger(db, KeyDir(keys))
        assert main(["keys", "new", "runner", "--role", "runner", "--db", db]) == 0
        origin = _origin(tmp)
        server = start(db, KeyDir(keys))
        # What the heads already hold: the unit tests' receipts, recorded by another job.
        for case, outcome in ((PASSING, "passed"), (INFRA, "infra-error"), (INHERITED, "failed")):
            checkout = tmp / f"attest-{case.pr}"
            git.Repo.clone_from(str(origin), checkout)
            mp.chdir(checkout)
            why = ["--reason", f"the unit tests: {outcome}"]
            if outcome == "passed":
                (tmp / "cleanup.json").write_text('{"complete": true, "resources": []}')
                why = ["--cleanup", str(tmp / "cleanup.json")]
            code = main(
                [
                    "attest", "--pr", str(case.pr), "--base", case.base, "--claim", UNIT,
                    "--outcome", outcome, *why, "--key", "runner", "--server", server.url,
                ]
            )  # fmt: skip
            assert code == 0
        # An earlier run's receipt the server did not take: it waits in an outbox.
        mp.setenv("XDG_DATA_HOME", str(tmp / "kept-data"))
        mp.setenv("LEDGER_SERVER_RETRIES", "0")  # the server is not there: nothing to wait for
        code = main(
            [
                "attest", "--pr", str(PASSING.pr), "--base", PASSING.base, "--claim", UNIT,
                "--outcome", "passed", "--cleanup", str(tmp / "cleanup.json"),
                "--key", "runner", "--server", _closed_port(),
            ]
        )  # fmt: skip
        assert code == 3
    try:
        yield World(server, origin, keys, tmp)
    finally:
        server.stop()


def _closed_port() -> str:
    """A URL where no server listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ---- how each provider gives its shell ---------------------------------------------


@dataclass(frozen=True)
class Step:
    shell: tuple[str, ...]
    script: str
    env: tuple[tuple[str, str], ...]
    checkout: bool
    """Runs in a checkout of the repository (else in an empty folder: it clones)."""


_CASE_KEYS = ("PR", "BASE", "LEDGER_KEYS")
"""A wrapper's literal value for these is the example's: the case gives its own."""


def _wrapper_env(env: Mapping[str, Any], case: Case, provided: Mapping[str, str]) -> dict[str, str]:
    """A wrapper's environment as the step sees it: ``$VAR`` read from the provider's
    variables (a wrong mapping runs the wrong pull request), a literal example value of
    `_CASE_KEYS` replaced by the case's."""
    out = {}
    for k, v in env.items():
        v = str(v)
        if "$" in v:
            v = re.sub(r"\$\{?(\w+)\}?", lambda m: provided.get(m.group(1), ""), v)
        elif k in _CASE_KEYS:
            v = {"PR": str(case.pr), "BASE": case.base}.get(k, provided.get(k, v))
        out[k] = v
    return out


def _provider_vars(case: Case, world: World) -> dict[str, str]:
    """What each provider sets in a pull request's job."""
    return {
        "BUILDKITE_PULL_REQUEST": str(case.pr),
        "BUILDKITE_PULL_REQUEST_BASE_BRANCH": case.base,
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_MERGE_REQUEST_IID": str(case.pr),
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": case.base,
        "GITHUB_REPOSITORY": GITHUB_REPOSITORY,
        "LEDGER_KEYS": str(world.keys),
    }


def _expressions(text: str, values: Mapping[str, str]) -> str:
    """GitHub's ``${{ expr }}``, replaced before the shell runs; an unknown one fails."""

    def value(m: re.Match[str]) -> str:
        expr = m.group(1).strip()
        assert expr in values, f"no value for ${{{{ {expr} }}}} here"
        return values[expr]

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _action_step(with_: Mapping[str, Any]) -> Step:
    """`uses:` this repository's action: its composite step, with the inputs given."""
    action = yaml.safe_load(ACTION.read_text())
    inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
    unknown = set(with_) - set(inputs)
    assert not unknown, f"the action takes no input {sorted(unknown)}"
    inputs.update({k: str(v) for k, v in with_.items()})
    missing = [k for k, v in action["inputs"].items() if v.get("required") and not inputs[k]]
    assert not missing, f"required inputs not given: {missing}"
    (step,) = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite" and step["shell"] == "bash"
    values = {f"inputs.{k}": v for k, v in inputs.items()}
    env = {k: _expressions(str(v), values) for k, v in step.get("env", {}).items()}
    env["GITHUB_ACTION_PATH"] = str(ROOT)
    return Step(
        ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"),
        _expressions(step["run"], values),
        tuple(sorted(env.items())),
        True,
    )


def _github(doc: Any, case: Case, provided: Mapping[str, str]) -> list[Step]:
    values = {
        "github.event.number": str(case.pr),
        "github.base_ref": case.base,
        "github.repository": GITHUB_REPOSITORY,
        "github.token": "gh-token",
        "secrets.LEDGER_RUNNER_TOKEN": "runner-token",
    }
    jobs = doc["jobs"].values() if isinstance(doc, dict) else [{"steps": doc}]
    out = []
    for job in jobs:
        job_env = _wrapper_env(job.get("env", {}), case, provided)
        for step in job["steps"]:
            env = {
                **job_env,
                **{k: _expressions(str(v), values) for k, v in step.get("env", {}).items()},
            }
            env = _wrapper_env(env, case, provided)
            if "run" in step:
                out.append(
                    Step(
                        ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"),
                        _expressions(step["run"], values),
                        tuple(sorted(env.items())),
                        True,
                    )
                )
            elif re.fullmatch(r"[\w.-]+/ledger@[\w.-]+", step["uses"]):
                with_ = {k: _expressions(str(v), values) for k, v in step["with"].items()}
                action = _action_step(with_)
                out.append(
                    Step(
                        action.shell,
                        action.script,
                        tuple(sorted({**env, **dict(action.env)}.items())),
                        True,
                    )
                )
            else:  # the test's own checkout stands in for actions/checkout
                assert step["uses"].startswith("actions/checkout@"), step["uses"]
    return out


def _buildkite_upload(text: str, provided: Mapping[str, str]) -> str:
    """`buildkite-agent pipeline upload`: ``$VAR`` from the uploading job's environment,
    ``$$`` a literal ``$`` for the step's shell."""
    parts = text.split("$$")
    parts = [re.sub(r"\$\{?(\w+)\}?", lambda m: provided.get(m.group(1), ""), p) for p in parts]
    return "$".join(parts)


def steps_of(snippet: Snippet, case: Case, world: World) -> list[Step]:
    """The shell a snippet runs for ``case``, as its provider would run it."""
    text = snippet.text.replace(DOC_SERVER, world.url).replace(DOC_REPO, str(world.origin))
    provided = _provider_vars(case, world)
    if snippet.provider == "shell":
        env = {"PR": str(case.pr), "BASE": case.base}
        return [Step(POSIX_SH, text, tuple(sorted(env.items())), True)]
    if snippet.provider == "buildkite":
        text = _buildkite_upload(text, provided)
    doc = yaml.safe_load(text)
    if snippet.provider == "github-actions":
        return _github(doc, case, provided)
    if snippet.provider == "kubernetes":
        out = []
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c.get("command") == ["sh", "-c"]:
                given = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
                env = _wrapper_env(given, case, provided)
                out.append(Step(POSIX_SH, c["args"][0], tuple(sorted(env.items())), False))
        return out
    if snippet.provider == "skypilot":
        env = _wrapper_env(doc.get("envs", {}), case, provided)
        return [Step(POSIX_SH, doc["run"], tuple(sorted(env.items())), False)]
    if snippet.provider == "buildkite":
        return [
            Step(
                POSIX_SH,
                s["command"],
                tuple(sorted(_wrapper_env(s.get("env", {}), case, provided).items())),
                True,
            )
            for s in doc["steps"]
            if "command" in s
        ]
    assert snippet.provider == "gitlab-ci"
    out = []
    for job in doc.values():
        if isinstance(job, dict) and "script" in job:
            env = _wrapper_env(job.get("variables", {}), case, provided)
            script = job["script"]
            script = "\n".join(script) if isinstance(script, list) else script
            out.append(Step(POSIX_SH, script + "\n", tuple(sorted(env.items())), True))
    return out


# ---- running a step ------------------------------------------------------------------

GH_STUB = """#!/bin/sh
# gh: keeps each document it was asked to post, posts nothing.
n=$(ls "$GH_CALLS" | wc -l)
while [ "$#" -gt 0 ]; do
  if [ "$1" = "--input" ]; then cp "$2" "$GH_CALLS/$n.json"; exit 0; fi
  shift
done
echo "gh: no --input" >&2
exit 1
"""


def _run(world: World, step: Step, case: Case, server: str, outbox: Path | None) -> Result:
    """Run ``step`` once for ``case`` (its result kept); ``outbox``: what this host's
    outbox holds before it starts."""
    # What the step is given: the job's variables, the provider's, the wrapper's own.
    given = {"LEDGER_URL": server, **_provider_vars(case, world), **dict(step.env)}
    given = {k: v.replace(world.url, server) for k, v in given.items()}
    script = step.script.replace(world.url, server)
    key = (step.shell, script, step.checkout, tuple(sorted(given.items())), outbox)
    if key in world.runs:
        return world.runs[key]
    where = world.tmp / f"run-{len(world.runs)}"
    bin_dir, calls, work = where / "bin", where / "gh-calls", where / "work"
    for d in (bin_dir, calls):
        d.mkdir(parents=True)
    gh = bin_dir / "gh"
    gh.write_text(GH_STUB)
    gh.chmod(0o755)
    if step.checkout:
        git.Repo.clone_from(str(world.origin), work)
    else:
        work.mkdir()
    if outbox is not None:
        shutil.copytree(outbox, where / "data" / "ledger" / "outbox")
    out_file, summary = where / "github-output", where / "summary.md"
    env = {
        "PATH": os.pathsep.join([str(bin_dir), str(BIN), "/usr/bin", "/bin"]),
        "HOME": str(where),
        "TMPDIR": str(where),
        "RUNNER_TEMP": str(where),
        "XDG_DATA_HOME": str(where / "data"),  # this host's outbox
        "LEDGER_CACHE": str(world.tmp / "cache"),
        "LEDGER_FORK_SERVER": "0",  # one cheap claim at most: no fork server to start
        "GH_CALLS": str(calls),
        "GITHUB_OUTPUT": str(out_file),
        "GITHUB_STEP_SUMMARY": str(summary),
        # A server that is not there: no retries to wait out (what the recipe does once
        # they are spent is the same; `test_api` holds the retries themselves).
        **({} if server == world.url else {"LEDGER_SERVER_RETRIES": "0"}),
        **given,
    }
    res = subprocess.run(
        [*step.shell, script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    posted = [json.loads(p.read_text()) for p in sorted(calls.iterdir())]
    outputs = {}
    if out_file.exists():
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines())
    result = Result(
        res.returncode,
        res.stdout + res.stderr,
        posted,
        outputs,
        frozenset(p.name for p in work.iterdir()),
        summary.read_text() if summary.exists() else "",
    )
    world.runs[key] = result
    return result


def _result(
    world: World,
    snippet: Snippet,
    case: Case,
    server: str | None = None,
    outbox: Path | None = None,
) -> Result:
    steps = steps_of(snippet, case, world)
    assert len(steps) == 1, f"{snippet.where}: {len(steps)} steps to run, one expected"
    return _run(world, steps[0], case, server or world.url, outbox)


SNIPPETS = ci_snippets()
QUALIFYING = [s for s in SNIPPETS if "ledger qualify" in s.text or "/ledger@" in s.text]
READING = [s for s in SNIPPETS if s not in QUALIFYING]


def test_the_docs_have_ci_snippets_and_each_is_marked() -> None:
    providers = {s.provider for s in QUALIFYING}
    assert providers >= {
        "shell",
        "kubernetes",
        "skypilot",
        "github-actions",
        "buildkite",
        "gitlab-ci",
    }
    assert {s.provider for s in READING} >= {"github-actions", "gitlab-ci"}
    assert unmarked_ci_blocks() == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("snippet", QUALIFYING, ids=[f"{s.where}-{s.provider}" for s in QUALIFYING])
def test_a_qualify_recipe_exits_by_the_verdict(world: World, snippet: Snippet, case: Case) -> None:
    r = _result(world, snippet, case)
    assert r.code == case.want, f"{snippet.where} ({case.name}): exit {r.code}\n{r.out[-3000:]}"
    # What the outbox holds was said after qualify, and did not change the status.
    assert re.search(r"sent \d+, kept \d+|\"kept\": \d+", r.out), r.out[-2000:]


STEP = next(s for s in QUALIFYING if s.provider == "shell")
"""docs/deploy.md's runner step, the one each wrapper holds."""


def test_the_step_sends_the_outbox_and_keeps_the_verdict(world: World) -> None:
    """What an earlier send left is delivered after qualify, and push's own exit 0 is not
    the step's: a pull request not qualified still exits 1."""
    r = _result(world, STEP, INHERITED, outbox=world.kept)
    assert r.code == INHERITED.want == 1, r.out[-3000:]
    assert "sent 1, kept 0" in r.out, r.out[-2000:]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("snippet", READING, ids=[f"{s.where}-{s.provider}" for s in READING])
def test_a_status_recipe_exits_by_the_verdict_and_posts_a_real_check(
    world: World, snippet: Snippet, case: Case
) -> None:
    r = _result(world, snippet, case)
    assert r.code == case.want, f"{snippet.where} ({case.name}): exit {r.code}\n{r.out[-3000:]}"
    if "check-runs" in snippet.text:
        (doc,) = r.posted
        assert doc["status"] == "completed" and doc["head_sha"], doc
        assert (doc["conclusion"] == "success") == (case.want == 0), doc["conclusion"]


@pytest.mark.parametrize("snippet", READING, ids=[f"{s.where}-{s.provider}" for s in READING])
def test_a_status_recipe_posts_nothing_when_the_server_is_unreachable(
    world: World, snippet: Snippet
) -> None:
    r = _result(world, snippet, PASSING, _closed_port())
    assert r.code != 0, r.out
    assert r.posted == [], "an empty check was posted"
    assert "ledger.xml" not in r.files  # no empty test report either


WORKFLOW = next(s for s in QUALIFYING if "/ledger@" in s.text)
"""docs/deploy.md's workflow: this repository's action, two attempts at most."""


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_action_gives_the_verdict_and_the_check(world: World, case: Case) -> None:
    r = _result(world, WORKFLOW, case)
    assert r.code == case.want, r.out[-3000:]
    verdict = {0: "qualified", 1: "not-qualified", 3: "infrastructure"}[case.want]
    assert r.outputs["verdict"] == verdict and r.outputs["exit-code"] == str(case.want)
    assert r.outputs["kept"] == "0"
    (posted,) = r.posted
    assert json.loads(Path(r.outputs["check"]).read_text()) == posted and posted["head_sha"]
    assert (posted["conclusion"] == "success") == (case.want == 0), posted["conclusion"]
    assert r.summary.strip() == posted["output"]["summary"].strip()
    # qualify ran again only where infrastructure alone held the pull request back
    again = r.out.count("not qualified only because of infrastructure (exit 3); again")
    assert again == (1 if case.want == 3 else 0), r.out[-3000:]


def test_the_action_posts_no_check_when_the_server_is_unreachable(world: World) -> None:
    r = _result(world, WORKFLOW, PASSING, _closed_port())
    assert r.code != 0 and r.outputs["verdict"] != "qualified", r.out
    assert r.outputs["check"] == "" and r.posted == []
    assert "no check document" in r.out


@pytest.mark.parametrize(
    "args",
    [(), ("--pr", "1", "--server", "http://x"), ("--pr", "1", "--base", "main", "--attempts", "0")],
)
def test_the_script_refuses_what_it_cannot_run(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Without a pull request, its base branch or the server, nothing runs: exit 2."""
    res = subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=tmp_path,
        env={"PATH": os.pathsep.join([str(tmp_path), "/usr/bin", "/bin"])},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2 and "usage: qualify-pr.sh" in res.stderr, res.stderr
