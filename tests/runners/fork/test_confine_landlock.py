"""A forked claim's own folder without a namespace: Landlock.

The sandbox lets no process make a user namespace (one sandbox must not use up the
quota every sandbox shares), so the forked claim's confinement cannot make the one
it used to; Landlock needs none. Tried in a child of the test, which the rules then
bind for good.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from runners.fork import confine


def _landlock_here() -> bool:
    try:
        return confine._landlock(confine._LANDLOCK_CREATE_RULESET, None, 0, 1) >= 1
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _landlock_here(), reason="no Landlock in this kernel")


def _in_child(run_dir: Path, own: Path, tries: list[Path]) -> list[str]:
    """``own_folder`` in a child, then each write of ``tries``: how each went."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            got = [confine.own_folder(str(run_dir), [str(own)])]
            for path in tries:
                try:
                    path.write_text("forged")
                    got.append("written")
                except OSError as e:
                    got.append(errno.errorcode.get(e.errno or 0, "?"))
            os.write(w, "\n".join(got).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read().splitlines()
    os.waitpid(pid, 0)
    return out


def test_a_claim_writes_its_own_folder_and_nothing_else_of_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    own, other = run_dir / "ledger-claim-mine", run_dir / "ledger-claim-other"
    own.mkdir(parents=True)
    other.mkdir()
    (other / "result0.json").write_text("[]")
    beside = tmp_path / "beside"
    beside.mkdir()
    tries = [own / "result0.json", other / "result0.json", run_dir / "x", beside / "y"]
    got = _in_child(run_dir, own, tries)
    assert got == ["landlock", "written", "EACCES", "EACCES", "written"], got
    assert (other / "result0.json").read_text() == "[]" and not (run_dir / "x").exists()
