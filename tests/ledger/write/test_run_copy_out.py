"""What a sandboxed `ledger run` command wrote is copied out without blocking and by the
run's deadline: a FIFO at ``--result`` held the run open past ``--timeout`` (the copy
opened it for reading and waited for a writer that never came); a link at an output
was passed over without a word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import git
import pytest

from ledger.outputs.beneath import Refused
from ledger.sandbox import find_bwrap
from ledger.write.run import copy_out
from tests.ledger.helpers import run
from tests.ledger.write.test_run import ready  # noqa: F401  (fixture)


def _copied(src: Path, dst: Path, declared: list[str], **kw: float) -> list[Refused] | None:
    """`copy_out` in a thread of its own: None where it is still blocked once the
    thread was given a minute (it must never block)."""
    got: list[list[Refused] | None] = []
    done = threading.Event()

    def copy() -> None:
        got.append(copy_out(src, dst, declared, (), kw.get("deadline")))
        done.set()

    threading.Thread(target=copy, daemon=True).start()
    return got[0] if done.wait(60) else None


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "staged", tmp_path / "named"
    src.mkdir()
    dst.mkdir()
    return src, dst


def test_a_fifo_is_refused_without_blocking(folders: tuple[Path, Path]) -> None:
    src, dst = folders
    os.mkfifo(src / "result.json")
    (src / "ok.txt").write_text("fine")
    got = _copied(src, dst, [str(dst / "*")])
    assert got is not None, "the copy blocked on a FIFO"
    assert [(r.path, r.why) for r in got] == [(str(dst / "result.json"), "a FIFO")]
    assert (dst / "ok.txt").read_text() == "fine" and not (dst / "result.json").exists()


def test_a_link_at_an_output_is_refused_and_never_followed(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    src, dst = folders
    secret = tmp_path / "host.pem"
    secret.write_text("secret")
    (src / "k.pem").symlink_to(secret)
    got = _copied(src, dst, [str(dst / "*")])
    assert got is not None
    link = "a symbolic link (not followed)"
    assert [(r.path, r.why) for r in got] == [(str(dst / "k.pem"), link)]
    assert not os.path.lexists(dst / "k.pem")


def test_nothing_is_copied_past_the_deadline(folders: tuple[Path, Path]) -> None:
    src, dst = folders
    (src / "late.bin").write_bytes(b"x" * 1024)
    got = _copied(src, dst, [str(dst / "*")], deadline=time.monotonic() - 1)
    assert got is not None
    assert [(r.path, r.why) for r in got] == [
        (str(dst / "late.bin"), "not copied out by the run's deadline")
    ]
    assert not (dst / "late.bin").exists()


@pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true",
    reason="no bubblewrap: an absolute --result is copied out only from a sandbox",
)
def test_a_fifo_at_the_result_ends_the_run_by_its_deadline_with_one_reason(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = out / "result.json"
    code = f"import os; os.mkfifo({str(result)!r})"
    argv = [sys.executable, "-m", "ledger", "run", "--claim", "suite.acceptance", "--rev", "main"]
    argv += ["--repo", str(ready.working_tree_dir), "--key", "runner", "--timeout", "5"]
    argv += ["--result", str(result), "--", sys.executable, "-c", code]
    # The run ends by itself; the bound here only keeps a blocked run from holding
    # the suite (before the fix it never ended).
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr
    shown = run(capsys, "show", done.stdout.strip().splitlines()[-1], "--json")
    p = json.loads(shown.out)["statement"]["predicate"]
    assert p["outcome"] == "inconclusive" and done.returncode == 1
    assert p["reason"].startswith(f"result file refused ({result}: a FIFO)"), p["reason"]
    assert "\n" not in p["reason"]
    assert p["measurements"]["refused_outputs"] == [{"path": str(result), "why": "a FIFO"}]
