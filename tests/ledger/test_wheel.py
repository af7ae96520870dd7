"""The built wheel on its own: installed into a fresh venv, `ledger init` migrates to head.

The wheel is built from a copy of the sources (a stale build/ in the checkout
cannot leak into it) without build isolation, so no package index is needed
when the environment can build wheels (setuptools >= 70.1, or the wheel
package); otherwise pip builds it in isolation. The venv gets the wheel's
dependencies from this environment's site-packages through a .pth file, and
every command runs from outside the source tree, so what is imported is the
installed wheel and nothing else.
"""

from __future__ import annotations

import os
import shutil
import site
import sqlite3
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from ledger.store import migrate

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from: pyproject's packages.find and the readme.
SOURCES = ("ledger", "runners")
FILES = ("pyproject.toml", "README.md", "MANIFEST.in", "setup.cfg", "setup.py", "LICENSE")


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def _can_build_without_isolation() -> bool:
    """setuptools builds wheels by itself from 70.1 on, earlier with the wheel package."""
    try:
        major, minor = (int(x) for x in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    try:
        metadata.version("wheel")
    except metadata.PackageNotFoundError:
        return (major, minor) >= (70, 1)
    return True


def _copy_sources(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    for name in FILES:
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dst / name)


def test_wheel_installs_and_initialises_a_ledger(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["LEDGER_KEYS"] = str(tmp_path / "keys")
    env.pop("LEDGER_DB", None)
    work = tmp_path / "work"  # every command's cwd: outside the source tree
    work.mkdir()

    src, dist = tmp_path / "src", tmp_path / "dist"
    _copy_sources(src)
    offline = ["--no-build-isolation"] if _can_build_without_isolation() else []
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline]
    _run([*build, "-w", str(dist), str(src)], work, env)
    (wheel,) = dist.glob("ledger_qualify-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    py = venv / "bin" / "python"
    purelib = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work, env
        ).stdout.strip()
    )
    # The dependencies come from this environment. Directories named in a .pth
    # file go on sys.path after the venv's own site-packages, and the .pth
    # files inside them (this checkout's editable finder among them) are not run.
    ours = {*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (purelib / "_ledger_test_deps.pth").write_text(
        "".join(f"{d}\n" for d in sorted(ours) if Path(d).is_dir())
    )
    install = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps"]
    _run([*install, "--no-index", "--ignore-installed", str(wheel)], work, env)

    probe = "import ledger, ledger.store.migrate as m; print(ledger.__file__); print(m.MIGRATIONS)"
    where, migrations = _run([str(py), "-c", probe], work, env).stdout.split()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    assert Path(migrations).is_relative_to(purelib), migrations
    shipped = sorted(p.name for p in (Path(migrations) / "versions").glob("*.py"))
    source = sorted(p.name for p in (ROOT / "ledger" / "migrations" / "versions").glob("*.py"))
    assert shipped == source
    assert (Path(migrations) / "script.py.mako").is_file()

    ledger = str(venv / "bin" / "ledger")
    version = _run([ledger, "--version"], work, env).stdout
    assert version.strip() == f"ledger, version {metadata.version('ledger-qualify')}"

    db = tmp_path / "x.db"
    out = _run([ledger, "init", "--db", str(db)], work, env).stdout
    assert "created ledger" in out
    with sqlite3.connect(db) as conn:
        (rev,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert rev == migrate.HEAD == migrate.head_revision()
    assert "up to date" in _run([ledger, "init", "--db", str(db)], work, env).stdout
