"""`ledger attest` on real git repositories: identity, PR refs, dirty trees."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir, key_id, raw_public
from tests.conftest import commit_file
from tests.ledger.helpers import run


@pytest.fixture
def ready(
    db_url: str, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    monkeypatch.setenv("LEDGER_DB", db_url)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "gpu-host", "--role", "runner").code == 0
    return key_dir


def _show(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, object]:
    r = run(capsys, "show", rid, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    st = doc["statement"]
    assert isinstance(st, dict)
    return st  # type: ignore[no-any-return]


def test_attest_reads_identity_from_git(
    ready: Path, repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = repo.head.commit
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"predicted_bytes": 65_416_101_888, "measured_bytes": 46_525_874_176}))
    c = tmp_path / "c.json"
    c.write_text(
        json.dumps(
            {
                "complete": True,
                "resources": [
                    {
                        "kind": "process",
                        "id": "4242",
                        "released": True,
                        "proof": "ProcessLookupError",
                    }
                ],
            }
        )
    )
    art = tmp_path / "snapshot.pickle"
    art.write_bytes(b"\x80\x04snapshot")
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "backward.full-prefix",
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--outcome",
        "passed",
        "--scope",
        "device_kind=cuda",
        "--scope",
        "gpu_count=1",
        "--measurements",
        str(m),
        "--cleanup",
        str(c),
        "--artifact",
        str(art),
        "--key",
        "gpu-host",
    )
    assert r.code == 0, r.err
    rid = r.out.strip()
    assert rid.startswith("sha256:") and len(rid) == 71
    st = _show(capsys, rid)
    p = st["predicate"]
    assert isinstance(p, dict)
    assert st["subject"] == [
        {
            # No remote, no [project] repo: the root commit names it, never the folder.
            "name": f"root-commit/{head.hexsha}",
            "digest": {"gitCommit": head.hexsha, "gitTree": head.tree.hexsha},
        }
    ]
    assert p["source"]["commit"] == head.hexsha and p["source"]["dirty"] is False
    assert p["scope"] == {"device_kind": "cuda", "gpu_count": 1}
    assert p["measurements"]["predicted_bytes"] == 65_416_101_888
    assert p["cleanup"]["complete"] is True
    assert p["artifacts"][0]["size"] == len(b"\x80\x04snapshot")


def test_dirty_work_tree_is_recorded_dirty(
    ready: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(repo.working_tree_dir or ".", "model", "a.py").write_text("x = 2\n")
    args = (
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
        "gpu-host",
    )
    r = run(capsys, *args)
    assert r.code == 1 and "--allow-dirty" in r.err
    r = run(capsys, *args, "--allow-dirty")
    assert r.code == 0 and "dirty" in r.err
    p = _show(capsys, r.out.strip())["predicate"]
    assert isinstance(p, dict) and p["source"]["dirty"] is True


def test_pr_head_is_fetched_from_the_remote(
    ready: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = git.Repo.init(tmp_path / "upstream", initial_branch="main")
    base = commit_file(upstream, "model/a.py", "x = 1\n", "base")
    upstream.git.checkout("-b", "feature")
    head = commit_file(upstream, "model/a.py", "x = 3\n", "feature")
    upstream.git.update_ref("refs/pull/898/head", head)
    upstream.git.checkout("main")
    clone = git.Repo.clone_from(str(upstream.working_tree_dir), tmp_path / "clone")
    with pytest.raises(git.BadName):
        clone.commit("refs/pull/898/head")
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--pr",
        "898",
        "--repo",
        str(clone.working_tree_dir),
        "--outcome",
        "failed",
        "--reason",
        "OOM after admission",
        "--key",
        "gpu-host",
    )
    assert r.code == 0, r.err
    src = _show(capsys, r.out.strip())["predicate"]["source"]  # type: ignore[index]
    assert src["pr"] == 898 and src["commit"] == head and src["base"] == base
    assert src["parents"] == [base]
    missing = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c",
        "--pr",
        "5",
        "--repo",
        str(clone.working_tree_dir),
        "--outcome",
        "passed",
        "--key",
        "gpu-host",
    )
    assert missing.code == 2 and "unknown PR 5" in missing.err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--rev", "nope"], 2, "unknown revision"),
        (["--rev", "HEAD", "--outcome", "failed"], 1, "needs a reason"),
        (["--rev", "HEAD", "--scope", "novalue"], 2, "expected key=value"),
        (["--rev", "HEAD", "--measurements", "/nonexistent.json"], 2, "does not exist"),
        (["--rev", "HEAD", "--key", "nobody"], 1, "no private key named"),
    ],
)
def test_bad_attest_input(
    ready: Path,
    repo: git.Repo,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    base = ["attest", "--unplanned", "--claim", "c", "--repo", str(repo.working_tree_dir)]
    if "--outcome" not in args:
        base += ["--outcome", "passed"]
    if "--key" not in args:
        base += ["--key", "gpu-host"]
    r = run(capsys, *base, *args)
    assert r.code == code and message in r.err, r.err
    assert r.err.count("\n") == 1


def test_private_keys_are_0600_and_ids_are_sha256_of_raw_key(ready: Path) -> None:
    f = ready / "gpu-host.pem"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    k = KeyDir(ready).load("gpu-host")
    import hashlib

    assert key_id(k.public) == hashlib.sha256(raw_public(k.public)).hexdigest()


def test_keys_add_list_revoke(
    ready: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger.evidence.keys import public_pem

    other = KeyDir(tmp_path / "reviewer-laptop").create("alice")
    pem = tmp_path / "alice.pub.pem"
    pem.write_bytes(public_pem(other.public))
    assert run(capsys, "keys", "add", str(pem), "--name", "alice", "--role", "reviewer").code == 0
    again = run(capsys, "keys", "add", str(pem), "--name", "alice", "--role", "reviewer")
    assert "already registered" in again.out
    rows = json.loads(run(capsys, "keys", "list", "--json").out)
    alice = next(r for r in rows if r["name"] == "alice")
    assert alice["role"] == "reviewer" and not alice["private_key_here"]
    assert run(capsys, "keys", "revoke", alice["keyid"][:12], "--reason", "left").code == 0
    rows = json.loads(run(capsys, "keys", "list", "--json").out)
    assert next(r for r in rows if r["name"] == "alice")["revoked_reason"] == "left"
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    r = run(capsys, "keys", "add", str(bad), "--name", "x", "--role", "runner")
    assert r.code == 1 and "not a PEM public key" in r.err
