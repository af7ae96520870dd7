"""The core stays light: importing ledger and verifying never loads torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run

PROBE = """
import sys
from ledger.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "runners", "numpy") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
db = sorted(m for m in ("sqlalchemy", "sqlmodel", "alembic") if m in sys.modules)
print("DB=" + ",".join(db))
engine = sorted(m for m in sys.modules if m.startswith("ledger.qualification"))
print("ENGINE=" + ",".join(engine))
slow = ("pydantic", "click", "dataclasses", "cryptography.hazmat.primitives.serialization")
start = sorted(m for m in slow if m in sys.modules)
print("START=" + ",".join(start))
sys.exit(code)
"""


def test_import_ledger_does_not_import_torch() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ledger, ledger.cli, ledger.verify, ledger.transparency.audit, "
            "ledger.transparency.export, ledger.read.query; "
            "print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_verify_does_not_import_torch(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "l.db"
    monkeypatch.setenv("LEDGER_DB", str(db))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "r", "--role", "runner").code == 0
    rid = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--outcome",
        "passed",
        "--key",
        "r",
    ).out.strip()
    bundle = tmp_path / "b.json"
    assert run(capsys, "export", rid, "-o", str(bundle)).code == 0
    env = {
        "LEDGER_DB": str(db),
        "LEDGER_KEYS": str(key_dir),
        "PATH": "/usr/bin:/bin",
        # The code under test, whichever checkout the interpreter has installed.
        "PYTHONPATH": str(Path(__file__).parents[3]),
    }
    for args in (["verify", rid], ["verify", str(bundle), "--trust", str(key_dir / "ledger.pem")]):
        p = subprocess.run(
            [sys.executable, "-c", PROBE, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stderr
        assert "HEAVY=\n" in p.stdout, p.stdout
    # Offline verification of a bundle is store-free: no database code at all,
    # and none of the qualification engine either.
    assert "DB=\n" in p.stdout, p.stdout
    assert "ENGINE=\n" in p.stdout, p.stdout
    # Nor what dominated its start-up (benchmarks/verify_start.py): the pydantic
    # models, click, dataclasses (with inspect), every key format's reader.
    assert "START=\n" in p.stdout, p.stdout


def test_the_command_line_starts_without_git_or_the_plan_models() -> None:
    """Every command pays what `ledger.cli.app` imports at start: GitPython and the plan
    models (a fifth of a second) are imported by the commands that use them."""
    code = (
        "import sys, ledger.cli.app; "
        "print(sorted(m for m in ('git', 'ledger.identity.source', 'ledger.qualification.plan') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
