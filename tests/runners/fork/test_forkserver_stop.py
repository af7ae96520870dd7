"""A fork server told to stop (SIGTERM) while it imports what a claim learnt stops then:
the stop is not taken for that module's failure to import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# As the server does after a claim (`runners.fork.forkserver._reap`): the learnt modules
# imported with its SIGTERM handler in place. The first module's import is where the
# stop arrives (the parent's SIGTERM, sent here by the module itself); the second is a
# module whose import fails by raising SystemExit of its own, which stays that module's
# failure.
SERVER = """
import signal, sys
from runners.fork.forkimports import Stopped, import_modules
from runners.fork.forkserver import _stop

signal.signal(signal.SIGTERM, _stop)
print(import_modules(["exits_itself"]), flush=True)
try:
    import_modules(["stopped_meanwhile", "never_reached"])
except Stopped:
    print("stopped", flush=True)
    sys.exit(0)
print("went on", flush=True)
sys.exit(5)
"""


def test_a_stop_during_a_learnt_import_ends_the_server_and_a_modules_own_exit_does_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "stopped_meanwhile.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
    )
    (tmp_path / "exits_itself.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "never_reached.py").write_text("raise AssertionError('imported after the stop')\n")
    got = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SERVER)],
        cwd=ROOT,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert got.stdout.splitlines() == ["([], ['exits_itself'])", "stopped"], got.stderr
    assert got.returncode == 0
