"""`ledger qualify` end to end on the example repository (real git, real torch on CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

FAST = ("--claim", "cleanup.all-released", "--claim", "regression.24view-nograd")


@pytest.fixture
def example(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return make_example_repo(tmp_path / "repo").path


def _worktrees(repo: Path) -> list[str]:
    out = git.Repo(repo).git.worktree("list", "--porcelain")
    return [line for line in out.splitlines() if line.startswith("worktree ")]


def test_qualify_pr_records_receipts_and_prints_status(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(capsys, "qualify", "--pr", "1", "--repo", str(example), *FAST, "--json")
    # Two of the plan's claims ran: the verdict and the exit status are the whole plan's.
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    assert [x["outcome"] for x in doc["receipts"]] == ["passed", "passed"]
    assert doc["status"]["qualified"] is False and doc["ran"] == sorted(FAST[1::2])
    states = {c["claim"]: c["state"] for c in doc["status"]["claims"]}
    assert states["cleanup.all-released"] == states["regression.24view-nograd"] == "qualified"
    assert states["admission.no-oom-after-admit"] == "not-run"
    assert "whole plan: not qualified: 2 of" in r.err and "the exit status follows" in r.err
    assert "[1/2] regression.24view-nograd" in r.err and "[2/2]" in r.err  # progress: stderr
    assert len(_worktrees(example)) == 1  # the temporary worktree is gone
    shown = json.loads(run(capsys, "show", doc["receipts"][0]["id"], "--json").out)
    p = shown["statement"]["predicate"]
    assert p["source"]["pr"] == 1 and p["cleanup"]["complete"] is True
    assert p["scope"]["device_kind"] == "cpu" and p["scope"]["workload"] == "moe-lora"
    st = run(
        capsys, "status", "--pr", "1", "--repo", str(example), "--claim", "cleanup.all-released"
    )
    assert st.code == 0 and "qualified" in st.out


def test_cuda_asked_without_a_gpu_is_refused_before_anything_is_signed(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.execution.devices import visible_gpus

    if visible_gpus():
        pytest.skip("a GPU is present")
    r = run(
        capsys,
        "qualify",
        "--pr",
        "1",
        "--repo",
        str(example),
        "--device",
        "cuda",
        "--claim",
        "cleanup.all-released",
    )
    # Known before anything runs: one line, exit 2, no infra-error receipt recorded.
    assert r.code == 2 and r.out == ""
    assert "--device cuda" in r.err and "no CUDA device" in r.err and r.err.count("\n") == 1
    assert json.loads(run(capsys, "audit", "--json").out)["entries"] == 2  # only the keys
    assert len(_worktrees(example)) == 1


def test_broken_plans_are_refused_before_anything_runs(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plan.toml"
    bad.write_text('[[claims]]\nname = "x"\ncheck = "no-such-check"\n')
    r = run(capsys, "qualify", "--pr", "1", "--repo", str(example), "--plan", str(bad))
    assert r.code == 1 and "unknown check 'no-such-check'" in r.err
    bad.write_text('[[claims]]\nname = "x"\ncheck = "cleanup"\ncarry_over = "forever"\n')
    r = run(capsys, "qualify", "--pr", "1", "--repo", str(example), "--plan", str(bad))
    assert r.code == 2 and "carry_over" in r.err and r.err.count("\n") == 1
    r = run(capsys, "qualify", "--pr", "1", "--repo", str(example), "--claim", "nope")
    assert r.code == 1 and "not in the plan" in r.err
    assert json.loads(run(capsys, "audit", "--json").out)["entries"] == 2  # only the keys
    assert len(_worktrees(example)) == 1


BLOCKING = """\
import threading

from .workload import MoEWorkload, make_workload as _make


class Blocking(MoEWorkload):
    name = "moe-lora-blocking"

    def setup(self, device, seed):
        super().setup(device, seed)
        threading.Event().wait()  # never returns: only Ctrl-C ends this claim


def make_workload(**params):
    return Blocking(_make(**params).config)
"""


def test_ctrl_c_leaves_no_worktree_process_or_receipt(
    example: Path, tmp_path: Path, key_dir: Path
) -> None:
    """The claim's workload says it started (its setup line) and then never ends on
    its own: the signal always lands while it runs, however loaded the machine."""
    from scripts.example_repo import PLAN
    from tests.conftest import commit_file

    commit_file(git.Repo(example), "model/blocking.py", BLOCKING, "A workload that blocks")
    plan = tmp_path / "blocking.toml"
    plan.write_text(PLAN.replace("model.workload:make_workload", "model.blocking:make_workload"))
    env = {**os.environ, "LEDGER_DB": str(tmp_path / "l.db"), "LEDGER_KEYS": str(key_dir)}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ledger",
            "qualify",
            "--rev",
            "HEAD",
            "--repo",
            str(example),
            "--plan",
            str(plan),
            "--claim",
            "admission.no-oom-after-admit",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stderr is not None
    seen = []
    for line in p.stderr:  # the event: the blocking workload's setup has begun
        seen.append(line)
        if "setup moe-lora-blocking" in line:
            break
    else:
        raise AssertionError("qualify ended before the workload started: " + "".join(seen))
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert len(_worktrees(example)) == 1
    deadline = time.monotonic() + 30
    while True:  # the claim's process group is gone (bounded by the deadline)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if "runners.rank" not in ps or time.monotonic() > deadline:
            break
    assert "runners.rank" not in ps
    audit = subprocess.run(
        [sys.executable, "-m", "ledger", "audit", "--json"], env=env, capture_output=True, text=True
    )
    assert json.loads(audit.stdout)["entries"] == 2, audit.stdout


def test_a_misspelt_check_parameter_is_refused_before_anything_runs(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan parameter the check does not have would silently run with the default:
    refused with the parameter named, no receipt written."""
    plan = tmp_path / "typo.toml"
    plan.write_text(
        'workload = "model.workload:make_workload"\n'
        "[[claims]]\n"
        'name = "cleanup.all-released"\n'
        'check = "cleanup"\n'
        "params = { ballast = true }\n"
    )
    before = run(capsys, "audit", "--json")
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(example), "--plan", str(plan))
    assert r.code == 1
    # One line of progress (the revision and its plan), then the one-line reason.
    *progress, reason = r.err.strip().splitlines()
    assert "unknown parameter 'ballast'" in reason and len(progress) <= 1
    assert run(capsys, "audit", "--json").out == before.out  # nothing written


def test_qualify_through_an_unreachable_server_fails_before_any_check_runs(
    example: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU run can take hours: a server that is down is found before the first claim."""
    import socket

    monkeypatch.setenv("LEDGER_SERVER_RETRIES", "0")  # no server there: nothing to wait for

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run(
        capsys,
        "qualify",
        "--pr",
        "1",
        "--repo",
        str(example),
        *FAST,
        "--server",
        f"http://127.0.0.1:{port}",
    )
    assert r.code == 3  # infrastructure: a retry may pass
    assert "cannot reach ledger server" in r.err and "[1/2]" not in r.err


EXITS = """
import atexit, sys
import torch  # the teardown exit_now skips
atexit.register(lambda: open(sys.argv[1], "w").write("handlers ran"))
print("the answer", end="")  # still buffered: stdout is a pipe
sys.stderr.write("and its note")
from ledger.cli import exit_now
exit_now(3)
"""


def test_the_command_exits_without_the_teardown_of_torch_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """Where torch was loaded, `ledger` ends the process itself: the exit code, every
    buffered byte of output and every exit handler are kept."""
    marker = tmp_path / "marker"
    done = subprocess.run(
        [sys.executable, "-c", EXITS, str(marker)], capture_output=True, text=True, timeout=300
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "the answer", "and its note")
    assert marker.read_text() == "handlers ran"
