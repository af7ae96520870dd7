"""Ctrl-C during `ledger qualify`, as a terminal sends it (SIGINT to the whole
foreground process group: the command, its fork servers and their children):
one line saying which receipts were recorded and which claims were not, exit
130, and no traceback from any process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import git
import pytest

from scripts.example_repo import make_example_repo
from tests.conftest import commit_file
from tests.ledger.helpers import run

# The cleanup check's setup blocks (only Ctrl-C ends it); the other claims run as usual.
BLOCKING = """\
import inspect
import threading

from .workload import MoEWorkload, make_workload as _make


class BlocksInCleanup(MoEWorkload):
    name = "moe-lora-blocks-in-cleanup"

    def setup(self, device, seed):
        super().setup(device, seed)
        if any(f.filename.endswith("checks/cleanup.py") for f in inspect.stack()):
            threading.Event().wait()


def make_workload(**params):
    return BlocksInCleanup(_make(**params).config)
"""


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_ctrl_c_says_what_was_recorded_in_one_line_without_a_traceback(
    sandbox: str,
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scripts.example_repo import PLAN

    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    repo = make_example_repo(tmp_path / "repo").path
    commit_file(git.Repo(repo), "model/blocking.py", BLOCKING, "A workload that blocks in cleanup")
    # On the base branch itself: the 24-view regression has no base to compare with (the
    # blocking workload is not in an earlier tree) and runs as the first claim.
    git.Repo(repo).git.push("origin", "HEAD:main")
    plan = tmp_path / "blocking.toml"
    plan.write_text(PLAN.replace("model.workload:make_workload", "model.blocking:make_workload"))
    env = {**os.environ, "LEDGER_DB": str(tmp_path / "l.db"), "LEDGER_KEYS": str(key_dir)}
    claims = ("regression.24view-nograd", "cleanup.all-released")
    p = subprocess.Popen(
        [sys.executable, "-m", "ledger", "qualify", "--rev", "HEAD", "--repo", str(repo)]
        + ["--plan", str(plan), "--sandbox", sandbox]
        + [a for c in claims for a in ("--claim", c)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Its own process group, so that the signal reaches every process of it, as
        # a terminal's Ctrl-C does.
        process_group=0,
    )
    assert p.stderr is not None
    # A bound, not a synchronisation: a hung run fails the test instead of holding CI.
    bound = threading.Timer(300, lambda: os.killpg(p.pid, signal.SIGKILL))
    bound.start()
    before = []
    recorded = None
    for line in p.stderr:  # the events: one receipt recorded, then the blocking claim
        before.append(line)
        if "regression.24view-nograd passed" in line and "-> sha256:" in line:
            recorded = line.split("-> ")[1].strip().rstrip("…")
        if "[2/2]  setup moe-lora-blocks-in-cleanup" in line:
            break
    else:
        raise AssertionError("qualify ended before the claim blocked: " + "".join(before))
    assert recorded is not None, "".join(before)
    os.killpg(p.pid, signal.SIGINT)
    out, after = p.communicate()
    bound.cancel()
    assert p.returncode == 130, after
    text = "".join(before) + after + out
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = [line for line in after.splitlines() if line.strip()]
    assert len(lines) == 1, after
    [line] = lines
    assert line.startswith("ledger: aborted; recorded: "), line
    assert recorded in line and "regression.24view-nograd" in line.split("not recorded")[0]
    assert line.endswith("not recorded: cleanup.all-released"), line
