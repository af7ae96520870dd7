"""What `pip install` ships: the ledger and the runners, never a device script.

The device scripts (`scripts/device/`, the sandbox attack among them) and the
example generators (`scripts/example_repo.py`, ...) live in the checkout only.
The first test reads pyproject's package discovery as setuptools applies it; the
second builds the wheel from a copy of the checkout (scripts/ included, so a
discovery that picked them up would ship them) and lists its files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from setuptools import find_packages

from tests.ledger.test_wheel import _can_build_without_isolation

ROOT = Path(__file__).resolve().parents[2]
# Everything of the checkout a build could pick up but the tests and the evidence.
COPIED = ("ledger", "runners", "scripts", "benchmarks", "examples", "schemas")
FILES = ("pyproject.toml", "README.md", "MANIFEST.in", "setup.cfg", "setup.py", "LICENSE")
NOT_SHIPPED = (
    "sandbox_attack",
    "device_scripts",
    "example_repo",
    "example_plans",
    "numerics_cases",
)


def _unshipped(names: list[str]) -> list[str]:
    """The names of ``names`` that a wheel must not hold."""
    return [
        n
        for n in names
        if any(word in n for word in NOT_SHIPPED) or n.split("/")[0] in ("scripts", "tests")
    ]


def test_package_discovery_finds_no_device_script() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    spec = find["packages"]["find"]
    packages = find_packages(
        where=str(ROOT), include=spec.get("include", ["*"]), exclude=spec.get("exclude", ())
    )
    assert {"ledger", "runners", "runners.fork", "runners.claim"} <= set(packages)
    assert {"runners.contract", "runners.rank"} <= set(packages)
    assert all(p.split(".")[0] in ("ledger", "runners") for p in packages), packages
    files = [
        f.relative_to(ROOT).as_posix()
        for p in packages
        for f in (ROOT / p.replace(".", "/")).glob("*")
        if f.is_file()
    ]
    assert _unshipped(files) == []
    assert "runners/fork/forkserver.py" in files


def test_the_wheel_holds_no_device_script(tmp_path: Path) -> None:
    src, dist = tmp_path / "src", tmp_path / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in FILES:
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, src / name)
    assert (src / "scripts" / "device" / "sandbox_attack.py").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    offline = ["--no-build-isolation"] if _can_build_without_isolation() else []
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline]
    p = subprocess.run(
        [*build, "-w", str(dist), str(src)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    (wheel,) = dist.glob("ledger_qualify-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert _unshipped(names) == []
    assert "runners/fork/forkserver.py" in names and "runners/claim/isolated.py" in names
    assert "runners/protocol.py" in names and "runners/workloads/estimator.py" in names
    assert "runners/contract/request.py" in names and "runners/rank/__main__.py" in names
