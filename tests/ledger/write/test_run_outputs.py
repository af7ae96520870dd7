"""`ledger run` reads what the command leaves as data, never following it: a
symbolic link, a hard link, a FIFO or an oversized file among the --artifact
matches or as the --result file is named in the receipt as refused and never
read, and the run's outcome still stands."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import git
import pytest

from tests.ledger.helpers import run
from tests.ledger.write.test_run import _ledger_run, ready  # noqa: F401  (fixture)

SYMLINK = "a symbolic link (not followed)"


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _refused(p: dict[str, Any]) -> dict[str, str]:
    return {r["path"]: r["why"] for r in p["measurements"].get("refused_outputs", [])}


def _stored(tmp_path: Path) -> list[bytes]:
    """Every artifact's bytes in the ledger's store (beside the SQLite file)."""
    return [p.read_bytes() for p in (tmp_path / "artifacts").glob("*/*") if p.is_file()]


def _key(key_dir: Path) -> tuple[Path, bytes]:
    pem = key_dir / "runner.pem"
    return pem, pem.read_bytes()


def test_an_artifact_linked_to_the_runners_key_is_refused_and_named(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pem, secret = _key(key_dir)
    code = (
        "import os; os.mkdir('out'); open('out/ok.txt', 'w').write('fine'); "
        f"os.symlink({str(pem)!r}, 'out/k.pem')"
    )
    p = _ledger_run(capsys, ready, "--artifact", "out/*", cmd=_py(code))
    assert [a["name"] for a in p["artifacts"]] == ["ok.txt"]
    assert _refused(p) == {"out/k.pem": SYMLINK}
    # A pass whose declared output could not be kept is not a pass.
    assert p["outcome"] == "inconclusive" and "out/k.pem" in p["reason"]
    assert not any(secret in b for b in _stored(tmp_path))


def test_a_symlinked_folder_on_the_way_is_not_followed(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, secret = _key(key_dir)
    host = tmp_path / "host"
    host.mkdir()
    (host / "result.json").write_text(json.dumps({"outcome": "passed"}))
    code = f"import os; os.symlink({str(key_dir)!r}, 'out'); os.symlink({str(host)!r}, 'res')"
    args = ("--artifact", "out/*.pem", "--result", "res/result.json")
    p = _ledger_run(capsys, ready, *args, cmd=_py(code))
    assert p["artifacts"] == []
    assert _refused(p) == {"out": SYMLINK, "res": SYMLINK}
    assert p["outcome"] == "inconclusive" and "result" not in p["measurements"]
    assert not any(secret in b for b in _stored(tmp_path))


def test_a_hard_linked_artifact_is_refused(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    key_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Inside the sandbox a link can join only files of the command's own folders.
    code = (
        "import os; os.mkdir('out'); open('data.bin', 'w').write('x'); "
        "os.link('data.bin', 'out/k.bin'); raise SystemExit(4)"
    )
    p = _ledger_run(capsys, ready, "--artifact", "out/*", cmd=_py(code))
    assert p["outcome"] == "failed" and "status 4" in p["reason"]
    assert p["artifacts"] == [] and _refused(p) == {"out/k.bin": "a hard link (2 links)"}
    # Unsandboxed, a link to the runner's key itself: the parent still never reads it.
    pem, secret = _key(key_dir)
    code = f"import os; os.mkdir('out'); os.link({str(pem)!r}, 'out/k.pem')"
    args = ("--artifact", "out/*", "--sandbox", "none")
    p = _ledger_run(capsys, ready, *args, cmd=_py(code))
    assert _refused(p) == {"out/k.pem": "a hard link (2 links)"}
    assert p["artifacts"] == [] and p["outcome"] == "inconclusive"
    assert not any(secret in b for b in _stored(tmp_path))


def test_a_fifo_as_artifact_or_result_is_refused_without_blocking(
    ready: git.Repo,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = "import os; os.mkdir('out'); os.mkfifo('out/k.pem'); os.mkfifo('result.json')"
    p = _ledger_run(
        capsys, ready, "--artifact", "out/k.pem", "--result", "result.json", cmd=_py(code)
    )
    assert _refused(p) == {"out/k.pem": "a FIFO", "result.json": "a FIFO"}
    assert p["outcome"] == "inconclusive" and "result.json" in p["reason"]


def test_a_result_file_linked_to_a_host_file_is_not_the_outcome(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"outcome": "refused", "reason": "planted"}))
    code = f"import os; os.symlink({str(host)!r}, 'result.json'); raise SystemExit(1)"
    p = _ledger_run(capsys, ready, "--result", "result.json", cmd=_py(code))
    # The exit status alone decides: the failure stands.
    assert p["outcome"] == "failed" and "status 1" in p["reason"]
    assert "result.json" in p["reason"] and _refused(p) == {"result.json": SYMLINK}
    host.write_text(json.dumps({"outcome": "passed"}))
    code = f"import os; os.symlink({str(host)!r}, 'result.json')"
    p = _ledger_run(capsys, ready, "--result", "result.json", cmd=_py(code))
    assert p["outcome"] == "inconclusive" and "result" not in p["measurements"]


def test_a_failing_run_leaving_an_oversized_file_is_recorded_as_failed(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    big = 300 * 1024 * 1024
    # Sparse: the size is real, the disk and the time are not spent.
    code = (
        "import os; os.mkdir('out'); open('out/small.log', 'w').write('log'); "
        f"f = open('out/big.bin', 'wb'); f.truncate({big}); f.close(); raise SystemExit(1)"
    )
    p = _ledger_run(capsys, ready, "--artifact", "out/*", cmd=_py(code))
    assert p["outcome"] == "failed" and "status 1" in p["reason"]
    assert _refused(p) == {"out/big.bin": f"{big} bytes, over the 268435456-byte limit"}
    assert [a["name"] for a in p["artifacts"]] == ["small.log"]
    assert _stored(tmp_path) == [b"log"]


def test_an_honest_artifact_and_result_still_pass_and_can_be_fetched(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = {"outcome": "passed", "measurements": {"tests": 3}}
    code = (
        "import os, json; os.makedirs('out/sub'); open('out/sub/r.xml', 'w').write('<ok/>'); "
        f"open('result.json', 'w').write({json.dumps(json.dumps(doc))})"
    )
    args = ("--artifact", "out/**/*.xml", "--result", "result.json")
    p = _ledger_run(capsys, ready, *args, cmd=_py(code))
    assert p["outcome"] == "passed" and p["measurements"]["result"] == {"tests": 3}
    assert "refused_outputs" not in p["measurements"]
    [a] = p["artifacts"]
    assert a["name"] == "r.xml" and a["digest"]["sha256"] == hashlib.sha256(b"<ok/>").hexdigest()
    got = tmp_path / "got.xml"
    r = run(capsys, "artifact", "get", a["digest"]["sha256"], "-o", str(got))
    assert r.code == 0, r.err
    assert got.read_bytes() == b"<ok/>"
