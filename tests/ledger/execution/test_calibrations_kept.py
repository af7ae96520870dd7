"""What a sandboxed run's calibration folder gives back to the host's store
(`ledger.execution.calibrations`): only files a key can name, read beneath the run's
folder, never through a link (the folder's own name included), kept for the same
tree alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger.execution import calibrations

KEY = "a" * 64 + ".json"
OTHER = "b" * 64 + ".json"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {calibrations.CACHE_VAR: str(tmp_path / "store")}


def _run(tmp_path: Path, name: str, env: dict[str, str], tree: str = "t1") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    calibrations.hand_in(run_dir, tree, env)
    return run_dir


def test_a_fit_written_in_a_run_is_handed_to_the_next_run_of_the_same_tree_only(
    tmp_path: Path, env: dict[str, str]
) -> None:
    first = _run(tmp_path, "first", env)
    (first / "calibration" / KEY).write_text('{"fit": 1}')
    assert calibrations.take_back(first, "t1", env) == 1
    again = _run(tmp_path, "again", env)
    assert (again / "calibration" / KEY).read_text() == '{"fit": 1}'
    other = _run(tmp_path, "other", env, tree="t2")
    assert list((other / "calibration").iterdir()) == []


def test_links_and_other_names_are_never_taken(tmp_path: Path, env: dict[str, str]) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / KEY).write_text("host file")
    run_dir = _run(tmp_path, "run", env)
    folder = run_dir / "calibration"
    os.symlink(secret / KEY, folder / OTHER)  # a link to a host file
    (folder / "notes.txt").write_text("not a key")
    (folder / ("c" * 64 + ".json")).write_bytes(b"x" * (calibrations.MAX_BYTES + 1))
    assert calibrations.take_back(run_dir, "t1", env) == 0
    # The folder itself replaced by a link to another folder: nothing read through it.
    os.rename(folder, run_dir / "was")
    os.symlink(secret, folder)
    assert calibrations.take_back(run_dir, "t1", env) == 0
    assert not (tmp_path / "store" / "trees").exists() or not any(
        (tmp_path / "store" / "trees").rglob("*.json")
    )


def test_the_store_is_where_the_runner_side_reads_it() -> None:
    from runners.adapt.calibrate import cache_dir

    for env in (
        {calibrations.CACHE_VAR: "/x/cal"},
        {"XDG_CACHE_HOME": "/x/cache", "HOME": "/h"},
        {"HOME": "/h"},
    ):
        assert calibrations.store(env) == cache_dir(env)
