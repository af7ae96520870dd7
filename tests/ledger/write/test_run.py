"""`ledger run -- CMD ...` on real commands: pass, fail, crash, hang, leak, result files."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import commit_file
from tests.ledger.helpers import run

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
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", PLAN, "plan")
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return repo


def _ledger_run(
    capsys: pytest.CaptureFixture[str], repo: git.Repo, *args: str, cmd: list[str]
) -> dict[str, Any]:
    r = run(
        capsys,
        "run",
        "--claim",
        "suite.acceptance",
        "--rev",
        "main",
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        "runner",
        *args,
        "--",
        *cmd,
    )
    assert r.out.strip(), r.err
    rid = r.out.strip().splitlines()[-1]
    shown = run(capsys, "show", rid, "--json")
    assert shown.code == 0, shown.err
    pred: dict[str, Any] = json.loads(shown.out)["statement"]["predicate"]
    # The exit code follows the outcome: a failing CI step never turns green.
    assert r.code == {"passed": 0, "infra-error": 3}.get(pred["outcome"], 1), r.err
    return pred


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_passing_command_records_its_run(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = f"import pathlib; pathlib.Path({str(out)!r}).mkdir(); "
    code += f"pathlib.Path({str(out / 'r.txt')!r}).write_text('ok')"
    p = _ledger_run(capsys, ready, "--artifact", str(out / "*.txt"), cmd=_py(code))
    assert p["outcome"] == "passed"
    assert p["check"]["name"] == "command"
    assert p["check"]["parameters"]["command"][:2] == [sys.executable, "-c"]
    m = p["measurements"]
    assert m["exit_status"] == 0 and m["leaked_processes"] == [] and m["duration_ns"] > 0
    assert p["cleanup"]["complete"] is True
    kinds = [r["kind"] for r in p["cleanup"]["resources"]]
    assert kinds == ["process", "process-group"]
    assert "ProcessLookupError" in p["cleanup"]["resources"][1]["proof"]
    assert [a["name"] for a in p["artifacts"]] == ["r.txt"]
    for facet in ("device_kind", "gpu_model", "driver", "cuda", "torch", "nccl", "python"):
        assert facet in p["scope"]
    assert len(p["scope"]["packages_digest"]) == 64


def test_a_failing_command_is_failed_with_its_status(
    ready: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _ledger_run(capsys, ready, cmd=_py("raise SystemExit(3)"))
    assert p["outcome"] == "failed" and "status 3" in p["reason"]
    assert p["measurements"]["exit_status"] == 3


def test_a_crash_by_signal_and_a_kill_it_sent_itself_are_failed(
    ready: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    crash = _ledger_run(
        capsys, ready, cmd=_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    )
    assert crash["outcome"] == "failed" and "SIGSEGV" in crash["reason"]
    killed = _ledger_run(
        capsys, ready, cmd=_py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    )
    # It sent itself the kill: its own outcome, never an infra-error it could hide behind.
    assert killed["outcome"] == "failed" and "SIGKILL" in killed["reason"]
    assert killed["measurements"]["signal"] == "SIGKILL"


def test_a_command_hanging_past_its_timeout_is_killed(
    ready: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = time.monotonic()
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    p = _ledger_run(capsys, ready, "--timeout", "1", cmd=_py(code))
    assert time.monotonic() - t0 < 30
    assert p["outcome"] == "failed" and p["reason"].startswith("timed out after 1 s")
    own, group = p["cleanup"]["resources"][:2]
    assert group["kind"] == "process-group" and "SIGTERM" in group["proof"]
    # The command's own process was reaped as it ended: a zombie still counts as its
    # group's member, and unreaped it held both graces (10 s) and read unreleased.
    assert own["kind"] == "process" and own["released"] is True, own
    assert "SIGKILL" not in group["proof"], group


def test_a_leaked_child_does_not_outlive_the_run(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "leak-" + os.urandom(4).hex()
    # The child leaves the process group (setsid) and would outlive the command.
    code = (
        "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
        f"'import signal; signal.pause()', {token!r}], start_new_session=True)"
    )
    p = _ledger_run(capsys, ready, cmd=_py(code))
    assert p["outcome"] == "passed"  # the command's own verdict; cleanup says the rest
    # The sandbox's pid namespace ended with the command, and the child with it; where
    # the parent saw it still running first, it is named and the cleanup incomplete.
    for found in p["measurements"].get("leaked_processes", []):
        assert found["comm"].startswith("python")
        assert p["cleanup"]["complete"] is False
    left = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if token.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
                if state != "Z":
                    left.append(entry.name)
    assert left == []


def test_a_leaked_child_is_named_and_ended_unsandboxed(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pidfile = tmp_path / "leak.pid"
    # The child leaves the process group (setsid) and outlives the command.
    code = (
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)'], start_new_session=True); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))"
    )
    p = _ledger_run(capsys, ready, "--sandbox", "none", "--artifact", str(pidfile), cmd=_py(code))
    leaked = int(pidfile.read_text())
    assert p["outcome"] == "passed"  # the command's own verdict; cleanup says the rest
    assert p["cleanup"]["complete"] is False
    group = p["cleanup"]["resources"][1]
    assert not group["released"] and f"pid {leaked}" in group["proof"]
    assert p["measurements"]["leaked_processes"][0]["pid"] == leaked
    with pytest.raises(ProcessLookupError):
        for _ in range(200):
            os.kill(leaked, 0)
            time.sleep(0.01)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(leaked, os.WNOHANG)


def test_the_result_file_decides_when_given(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = tmp_path / "result.json"
    doc = {"outcome": "refused", "reason": "no GPU large enough", "measurements": {"need": 9}}
    p = _ledger_run(
        capsys,
        ready,
        "--result",
        str(res),
        cmd=_py(f"open({str(res)!r}, 'w').write({json.dumps(json.dumps(doc))})"),
    )
    assert p["outcome"] == "refused" and p["reason"] == "no GPU large enough"
    assert p["measurements"]["result"] == {"need": 9}
    lie = {"outcome": "passed"}
    code = f"open({str(res)!r}, 'w').write({json.dumps(json.dumps(lie))}); raise SystemExit(1)"
    p = _ledger_run(capsys, ready, "--result", str(res), cmd=_py(code))
    assert p["outcome"] == "failed" and "says passed" in p["reason"]
    p = _ledger_run(capsys, ready, "--result", str(res), cmd=_py("pass"))
    assert p["outcome"] == "failed" and "without writing" in p["reason"]
    bad = {"outcome": "failed"}
    code = f"open({str(res)!r}, 'w').write({json.dumps(json.dumps(bad))})"
    p = _ledger_run(capsys, ready, "--result", str(res), cmd=_py(code))
    assert p["outcome"] == "failed" and "needs a reason" in p["reason"]


def test_a_declared_artifact_that_is_missing_is_not_a_pass(
    ready: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _ledger_run(capsys, ready, "--artifact", str(tmp_path / "none-*.xml"), cmd=_py("pass"))
    assert p["outcome"] == "inconclusive" and "matched no file" in p["reason"]


def test_run_needs_exactly_one_revision(
    ready: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(capsys, "run", "--claim", "c", "--key", "runner", "--", "true")
    assert r.code == 2 and "--pr N or --rev R" in r.err


def test_run_and_the_importers_load_no_torch() -> None:
    import subprocess

    probe = (
        "import sys; from ledger.write.run import run_command; import ledger.importers.junit, "
        "ledger.importers.intoto, ledger.importers.events; "
        "run_command([sys.executable, '-c', 'pass'], timeout_s=30, result_file=None, "
        "artifact_globs=()).facts('c'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
