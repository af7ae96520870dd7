"""A sandbox's writable space is capped, and a reading of the host's disk decides an
infra-error only where the pull request could not have steered it: the host had less
free than the cap still allowed. Real folders, a real bubblewrap; the disk's free space
is what the host reports (outside the product), so it is the one thing set here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.evidence.errors import UsageError
from ledger.sandbox import quota, resolve
from ledger.units.numbers import figures
from runners.claim import claim_launch

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("free", "wrote", "cap", "whose"),
    [
        (quota.MIN_FREE, 0, 8 * MiB, None),  # enough: no shortage at all
        (1024, 0, 8 * MiB, "host"),  # nothing written: the host's
        (1024, 2 * MiB, 8 * MiB, "host"),  # the cap still allowed 6 MiB the host lacked
        (1024, 8 * MiB, 8 * MiB, "code"),  # the run used its cap up
        (1024, 9 * MiB, 8 * MiB, "code"),  # past its cap
        (2 * MiB, 7 * MiB, 8 * MiB, "code"),  # the host had what the cap still allowed
    ],
)
def test_whose_a_shortage_is(free: int, wrote: int, cap: int, whose: str | None) -> None:
    got = quota.shortage(free, wrote, cap, Path("/run"))
    assert (got.whose if got else None) == whose
    if got is not None:
        # Exact bytes, as signed text says them; people read them in IEC units.
        assert f"{free} bytes" in got.reason and f"{wrote} bytes" in got.reason
        assert f"cap of {cap} bytes" in got.reason
        assert "MiB" in figures(got.reason)


def test_written_counts_what_the_files_take_and_follows_no_link(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * MiB)
    with (tmp_path / "sparse").open("wb") as f:
        f.truncate(1024 * MiB)  # a GiB that takes nothing
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"y" * 2 * MiB)
    (tmp_path / "link").symlink_to(outside)
    try:
        got = quota.written(tmp_path)
    finally:
        shutil.rmtree(outside)
    assert MiB <= got < 2 * MiB
    assert quota.written(tmp_path / "gone") == 0


def test_the_cap_is_read_from_the_environment() -> None:
    assert quota.cap({}) == quota.DEFAULT_CAP
    assert quota.cap({quota.CAP_VAR: "1048576"}) == MiB
    with pytest.raises(UsageError, match=quota.CAP_VAR):
        quota.cap({quota.CAP_VAR: "1G"})


def _filled(run_folder: Path, n: int) -> None:
    run_folder.mkdir()
    (run_folder / "scratch").mkdir()
    (run_folder / "scratch" / "filler").write_bytes(os.urandom(n))


def test_a_run_that_filled_the_disk_itself_is_not_an_infra_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pull request's imports filled the run's folder: the disk's reading before the
    next claim is its doing, not the host's."""
    usage = shutil._ntuple_diskusage(1 << 30, 1 << 30, 1024)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage)
    run_folder = tmp_path / "run"
    _filled(run_folder, 2 * MiB)
    work = run_folder / "ledger-claim-1"
    work.mkdir()
    monkeypatch.setenv(quota.CAP_VAR, str(2 * MiB))
    got = claim_launch._disk_full(work, run_folder)
    assert got is not None and got.whose == "code", got
    assert "the pull request's code used the disk up" in got.reason
    # The same reading with a cap the host should still have given: the host's.
    monkeypatch.setenv(quota.CAP_VAR, str(64 * MiB))
    got = claim_launch._disk_full(work, run_folder)
    assert got is not None and got.whose == "host", got
    assert got.reason.startswith("the host is out of disk: 1024 bytes")


def test_the_private_tmp_is_held_to_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        box = resolve("bwrap", environ={**os.environ, quota.CAP_VAR: str(MiB)})
    except UsageError as why:  # no bubblewrap here
        pytest.skip(why.reason())
    assert box.bwrap is not None
    if not quota.tmpfs_size(box.bwrap):
        pytest.skip("this bubblewrap cannot cap a tmpfs (--size)")
    assert box.base.tmp_bytes == MiB
    write = (
        "import sys\n"
        "try:\n"
        "    open('/tmp/x', 'wb').write(b'z' * (2 * 1024 * 1024)); print('wrote')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv, env = box.launch(box.policy(scratch=scratch), [sys.executable, "-c", write], {})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused 28", done.stdout  # ENOSPC
