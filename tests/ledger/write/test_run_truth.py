"""`ledger run` and `ledger import` tell the truth: inputs checked before anything
runs, a fresh checkout of the revision, the command's own interpreter, exit codes
that follow the outcome, all-or-nothing imports, --offline."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import Run, run
from tests.ledger.write.test_run import ready  # noqa: F401  (fixture)


def _run(capsys: pytest.CaptureFixture[str], repo: git.Repo, *args: str) -> Run:
    return run(capsys, "run", "--repo", str(repo.working_tree_dir), "--key", "runner", *args)


def _shown(capsys: pytest.CaptureFixture[str], r: Run) -> dict[str, Any]:
    rid = r.out.strip().splitlines()[-1]
    p: dict[str, Any] = json.loads(run(capsys, "show", rid, "--json").out)["statement"]["predicate"]
    return p


def _history(capsys: pytest.CaptureFixture[str], repo: git.Repo) -> list[Any]:
    h = run(capsys, "history", "--rev", "main", "--repo", str(repo.working_tree_dir), "--json")
    entries: list[Any] = json.loads(h.out)["entries"]
    return entries


def test_the_exit_code_follows_the_outcome(
    ready: git.Repo,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    common = ("--claim", "suite.acceptance", "--rev", "main", "--")
    assert _run(capsys, ready, *common, sys.executable, "-c", "pass").code == 0
    failed = _run(capsys, ready, *common, sys.executable, "-c", "raise SystemExit(3)")
    assert failed.code == 1 and _shown(capsys, failed)["outcome"] == "failed"
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    killed = _run(capsys, ready, *common, sys.executable, "-c", code)
    assert killed.code == 1 and _shown(capsys, killed)["outcome"] == "failed"


def test_rev_runs_in_a_fresh_checkout_of_that_commit(
    ready: git.Repo,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = commit_file(ready, "v.txt", "1", "v1")
    commit_file(ready, "v.txt", "2", "v2")
    root = Path(str(ready.working_tree_dir))
    (root / "v.txt").write_text("3")  # an uncommitted edit in the caller's tree
    monkeypatch.chdir(root)  # run from inside the checkout, as in CI
    code = "import sys; v = open('v.txt').read(); print(v); sys.exit(0 if v == '1' else 5)"
    r = _run(
        capsys,
        ready,
        "--claim",
        "suite.acceptance",
        "--rev",
        first,
        "--",
        sys.executable,
        "-c",
        code,
    )
    assert r.code == 0, r.err
    p = _shown(capsys, r)
    assert p["outcome"] == "passed", p["reason"]  # it read v.txt as committed at --rev
    assert p["source"]["commit"] == first and p["source"]["dirty"] is False
    assert (root / "v.txt").read_text() == "3"  # the caller's tree is untouched


def test_a_command_writing_into_its_tree_is_recorded_with_its_artifact(
    ready: git.Repo,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(str(ready.working_tree_dir))  # a clean checkout, as in CI
    code = "open('report.xml', 'w').write('<testsuite tests=\"1\"/>')"
    r = _run(
        capsys,
        ready,
        "--claim",
        "suite.acceptance",
        "--rev",
        "main",
        "--artifact",
        "report.xml",
        "--",
        sys.executable,
        "-c",
        code,
    )
    assert r.code == 0, r.err
    p = _shown(capsys, r)
    assert p["outcome"] == "passed" and p["source"]["dirty"] is False
    digest = hashlib.sha256(b'<testsuite tests="1"/>').hexdigest()
    assert [(a["name"], a["digest"]["sha256"]) for a in p["artifacts"]] == [("report.xml", digest)]
    assert not ready.is_dirty(untracked_files=True)  # written in the run's own checkout


def test_the_scope_names_the_commands_interpreter_not_ledgers(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin")
    r = _run(
        capsys, ready, "--claim", "suite.acceptance", "--rev", "main", "--", "python", "-c", "1"
    )
    assert r.code == 0, r.err
    p = _shown(capsys, r)
    interp = p["measurements"]["interpreter"]
    assert interp["path"] == str(venv / "bin" / "python")
    # A venv without pip holds no distribution: the digest of the empty list.
    assert p["scope"]["packages_digest"] == hashlib.sha256(b"").hexdigest()
    assert interp["packages"] == 0 and p["scope"]["torch"] == "none"
    assert p["runner"]["environment"]["interpreter"] == str(venv / "bin" / "python")
    # The same interpreter as Ledger's: the same digest as Ledger computes for itself.
    own = Path(sys.executable).parent
    monkeypatch.setenv("PATH", f"{own}:/usr/bin:/bin")
    r = _run(
        capsys, ready, "--claim", "suite.acceptance", "--rev", "main", "--", "python", "-c", "1"
    )
    # Computed in a fresh interpreter: this test process's own sys.path carries what
    # earlier tests added to it (workload repositories), which the command never sees.
    own_digest = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.identity.environment import packages_digest as d; print(d())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert _shown(capsys, r)["scope"]["packages_digest"] == own_digest


def test_every_input_is_checked_before_the_command_starts(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = tmp_path / "ran"
    cmd = ("--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    unplanned = _run(capsys, ready, "--claim", "not.planned", "--rev", "main", *cmd)
    assert unplanned.code == 1 and "not in the governing plan" in unplanned.err
    bad_rev = _run(capsys, ready, "--claim", "suite.acceptance", "--rev", "nope", *cmd)
    assert bad_rev.code == 2 and "unknown revision" in bad_rev.err
    no_key = run(
        capsys,
        "run",
        "--repo",
        str(ready.working_tree_dir),
        "--key",
        "nobody",
        "--claim",
        "suite.acceptance",
        "--rev",
        "main",
        *cmd,
    )
    assert no_key.code != 0
    assert not marker.exists()
    assert _history(capsys, ready) == []


def test_an_unknown_option_before_the_separator_is_refused(
    ready: git.Repo,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = _run(
        capsys, ready, "--claim", "suite.acceptance", "--rev", "main", "--allow-dirty", "--", "true"
    )
    assert r.code == 2 and "No such option '--allow-dirty'" in r.err
    assert "cannot run" not in r.err


def _pr_repo(repo: git.Repo) -> None:
    """A remote that cannot be reached, and PR 5's head as a local ref."""
    repo.create_remote("origin", str(Path(str(repo.working_tree_dir)).parent / "gone.git"))
    repo.git.update_ref("refs/pull/5/head", repo.head.commit.hexsha)


def test_offline_runs_and_imports_the_local_pr_head(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _pr_repo(ready)
    args = ("--claim", "suite.acceptance", "--pr", "5")
    online = _run(capsys, ready, *args, "--", sys.executable, "-c", "pass")
    assert online.code == 2 and "fetching PR 5" in online.err
    offline = _run(capsys, ready, *args, "--offline", "--", sys.executable, "-c", "pass")
    assert offline.code == 0, offline.err
    assert _shown(capsys, offline)["source"]["pr"] == 5
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuite><testcase classname="m" name="t"/></testsuite>')
    imp = run(
        capsys,
        "import",
        "junit",
        str(xml),
        "--claim",
        "suite.acceptance",
        "--unplanned",
        "--pr",
        "5",
        "--offline",
        "--repo",
        str(ready.working_tree_dir),
        "--key",
        "runner",
    )
    # The plan checks suite.acceptance by `command`: an import for it is refused.
    assert imp.code == 1 and "not 'import-junit'" in imp.err
    imp = run(
        capsys,
        "import",
        "junit",
        str(xml),
        "--claim",
        "suite.imported",
        "--unplanned",
        "--pr",
        "5",
        "--offline",
        "--repo",
        str(ready.working_tree_dir),
        "--key",
        "runner",
    )
    assert imp.code == 0, imp.err


def test_an_import_of_several_claims_records_all_or_none(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = "[[claims]]\nname = 'suite.a'\ncheck = 'import-junit'\ncleanup = false\n"
    commit_file(ready, "qualification.toml", plan, "import plan")
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuite><testcase classname="m" name="a"/><testcase classname="m" name="b"/>'
        "</testsuite>"
    )

    def imp(*claims: str) -> Run:
        more = [x for c in claims[1:] for x in ("--also", c)]
        return run(
            capsys,
            "import",
            "junit",
            str(xml),
            "--claim",
            claims[0],
            *more,
            "--rev",
            "main",
            "--repo",
            str(ready.working_tree_dir),
            "--key",
            "runner",
        )

    refused = imp("suite.a=m::a", "suite.b=m::b")  # suite.b is not in the plan
    assert refused.code == 1 and "suite.b" in refused.err and refused.out == ""
    assert _history(capsys, ready) == []
    commit_file(ready, "qualification.toml", plan + plan.replace("suite.a", "suite.b"), "b")
    done = imp("suite.a=m::a", "suite.b=m::b")
    assert done.code == 0, done.err
    assert sorted(e["claim"] for e in _history(capsys, ready)) == ["suite.a", "suite.b"]
