"""`.ci/run`'s steps (in .ci/lib.sh), run by bash with stub commands on PATH:
chromium and its driver are installed when either is missing, and a
LEDGER_TEST_PG_URL given by the caller is the one the tests use."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / ".ci" / "lib.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="no bash")


def _stubs(tmp_path: Path, *names: str) -> Path:
    """A PATH folder where each named command records its arguments and succeeds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in names:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls"\n')
        stub.chmod(0o755)
    for tool in ("dirname", "ls", "sleep", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, script: str, **env: str) -> tuple[str, list[str]]:
    res = subprocess.run(
        [str(BASH), "-c", f". {LIB}; {script}"],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    calls = tmp_path / "calls"
    return res.stdout, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(
    "present", [(), ("chromium",), ("chromedriver",), ("chromium", "chromedriver")]
)
def test_browser_and_driver_are_installed_when_either_is_missing(
    tmp_path: Path, present: tuple[str, ...]
) -> None:
    bin_dir = _stubs(tmp_path, "apt-get", *present)
    _, calls = _run(tmp_path, bin_dir, "install_browser")
    if len(present) == 2:
        assert calls == []
    else:
        assert calls == ["apt-get install -y -q chromium chromium-driver"]


def test_a_given_test_database_wins(tmp_path: Path) -> None:
    bin_dir = _stubs(tmp_path, "psql", "pg_ctlcluster")
    url = "postgresql+psycopg://ci@db.example:5433/elsewhere"
    out, calls = _run(
        tmp_path,
        bin_dir,
        'prepare_postgres; echo "URL=$LEDGER_TEST_PG_URL"',
        LEDGER_TEST_PG_URL=url,
    )
    assert f"URL={url}" in out and calls == []


def test_without_one_the_local_database_is_named(tmp_path: Path) -> None:
    bin_dir = _stubs(tmp_path, "psql", "pg_ctlcluster")
    out, calls = _run(tmp_path, bin_dir, 'prepare_postgres; echo "URL=$LEDGER_TEST_PG_URL"')
    assert "URL=postgresql+psycopg://postgres@127.0.0.1:5432/ledger_test" in out
    assert any(c.startswith("psql ") for c in calls)


def test_browser_tests_fail_in_ci_and_skip_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.ledger.service import browser

    monkeypatch.setattr(browser, "DRIVER", None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="chromedriver"):
        browser.require_browser()
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="chromedriver"):
        browser.require_browser()
