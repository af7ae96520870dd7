"""Every command with --server answers as it does against the database, and
`status --format` prints the documented CI shapes; artifacts go into bundles."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.keys import KeyDir
from ledger.service.run import Running, start
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
cleanup = false

[[claims]]
name = "determinism.bitwise"
check = "determinism"
cleanup = false
"""


@pytest.fixture
def served(
    tmp_path: Path,
    db_url: str,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Running, git.Repo, list[str]]]:
    monkeypatch.setenv("LEDGER_DB", db_url)
    monkeypatch.setenv("LEDGER_ARTIFACTS", str(tmp_path / "artifacts"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    head = commit_file(r, "model/a.py", "x = 2\n", "pr")
    r.git.update_ref("refs/pull/3/head", head)
    art = tmp_path / "observer-snapshot.pickle"
    art.write_bytes(b"\x80\x04}\x94.")
    ids = []
    for claim, outcome in (
        ("admission.no-oom-after-admit", "passed"),
        ("determinism.bitwise", "failed"),
    ):
        extra = ["--artifact", str(art)] if outcome == "passed" else ["--reason", "differs"]
        res = run(
            capsys,
            "attest",
            "--repo",
            str(r.working_tree_dir),
            "--key",
            "h200",
            "--pr",
            "3",
            "--offline",
            "--claim",
            claim,
            "--outcome",
            outcome,
            *extra,
        )
        assert res.code == 0, res.err
        ids.append(res.out.strip())
    srv = start(db_url, KeyDir(key_dir))
    try:
        yield srv, r, ids
    finally:
        srv.stop()


def _both(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[str, str]:
    local = run(capsys, *args)
    remote = run(capsys, *args, "--server", url)
    assert remote.code == local.code, (local.err, remote.err)
    return local.out, remote.out


def test_reads_over_http_equal_local_answers(
    served: tuple[Running, git.Repo, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, r, ids = served
    q = ("--repo", str(r.working_tree_dir), "--pr", "3", "--offline")
    for args in (
        ("status", *q, "--json"),
        ("history", *q, "--json"),
        ("show", ids[0], "--json"),
        ("verify", ids[0], "--json"),
    ):
        local, remote = _both(capsys, srv.url, *args)
        there, here = json.loads(remote), json.loads(local)
        if args[0] == "verify":
            # Without --trust the remote answer is the server's word, and says so.
            assert there.pop("trust") == "server" and "server's word" in there.pop("anchor")
            here.pop("anchor")
        if args[0] == "status":
            # Each names the plan it judged by: the server judged by the one posted.
            assert (there.pop("plan_source"), here.pop("plan_source")) == ("asker", "git")
            there.pop("plan_source_text"), here.pop("plan_source_text")
        assert there == here, args
    keys_local, keys_remote = _both(capsys, srv.url, "keys", "list", "--json")
    assert [k["keyid"] for k in json.loads(keys_remote)] == [
        k["keyid"] for k in json.loads(keys_local)
    ]
    assert run(capsys, "log", "checkpoint").code == 0
    local, remote = _both(capsys, srv.url, "log", "proof", ids[1], "--json")
    assert json.loads(remote) == json.loads(local)
    shown = run(capsys, "show", ids[0], "--server", srv.url)
    assert "artifact   observer-snapshot.pickle" in shown.out
    assert "application/vnd.pytorch.memory-snapshot+pickle" in shown.out


def test_status_formats_have_the_documented_shape(
    served: tuple[Running, git.Repo, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    srv, r, _ = served
    q = ("status", "--repo", str(r.working_tree_dir), "--pr", "3", "--offline", "--server", srv.url)
    doc = json.loads(run(capsys, *q, "--json").out)
    assert json.loads(run(capsys, *q, "--format", "json").out) == doc
    md = run(capsys, *q, "--format", "markdown")
    assert md.code == 1  # determinism failed: not qualified
    v = doc["verdict"]
    assert md.out.startswith("### Ledger: ") and f"**{v['headline']}**" in md.out
    assert md.out.count("\n| ") == 1 + len(v["claims"])  # header and one row per claim
    # Without --format, the terminal answer (not Markdown), as a local status prints.
    text = run(capsys, *q)
    assert text.out.splitlines()[0].endswith(v["headline"]) and "Blocking:" in text.out
    assert "warning" not in (text.out + text.err).lower()
    junit = run(capsys, *q, "--format", "junit")
    suite = ET.fromstring(junit.out).find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(v["claims"]) == int(suite.get("tests", "0"))
    assert int(suite.get("failures", "0")) == 1
    assert {c.get("classname") for c in cases} == {row["claim"] for row in v["claims"]}
    check = json.loads(run(capsys, *q, "--format", "github-check").out)
    assert check["conclusion"] == "failure" and check["head_sha"] == doc["subject"]["commit"]
    assert set(check["output"]) == {"title", "summary", "annotations"}
    assert [a["title"] for a in check["output"]["annotations"]] == ["determinism.bitwise: failed"]


def test_export_artifacts_into_the_bundle_and_verify_them(
    served: tuple[Running, git.Repo, list[str]],
    key_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    srv, _, ids = served
    pem = tmp_path / "ledger.pem"
    pem.write_text(run(capsys, "keys", "export", "ledger").out)
    for where in ((), ("--server", srv.url)):
        out = tmp_path / f"b{len(where)}.json"
        res = run(capsys, "export", ids[0], "-o", str(out), "--artifacts", *where)
        assert res.code == 0, res.err
        v = run(capsys, "verify", str(out), "--trust", str(pem), "--json")
        assert v.code == 0, v.err
        [line] = json.loads(v.out)["artifacts"]
        assert "observer-snapshot.pickle" in line and "digest verified" in line
    doc = json.loads(out.read_bytes())
    doc["artifacts"][0]["content"] = base64.b64encode(b"other bytes").decode()
    bad = tmp_path / "bad.json"
    bad.write_bytes(canonical_bytes(doc))
    v = run(capsys, "verify", str(bad), "--trust", str(pem))
    assert v.code == 1 and "content differs from its digest" in v.err


def test_server_backed_ci_formats_link_every_receipt_and_the_pr_page(
    served: tuple[Running, git.Repo, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """With --server, Markdown, JUnit and the check payload link each receipt's page
    and bundle and the PR page (each link answers), and name the repository by its
    id, never a local path."""
    import re

    import httpx

    srv, r, ids = served
    q = ("status", "--repo", str(r.working_tree_dir), "--pr", "3", "--offline", "--server", srv.url)
    doc = json.loads(run(capsys, *q, "--json").out)
    md = run(capsys, *q, "--format", "markdown").out
    junit = run(capsys, *q, "--format", "junit").out
    check = json.loads(run(capsys, *q, "--format", "github-check").out)
    assert check["details_url"].startswith(f"{srv.url}/pr?")
    for text in (md, junit, json.dumps(check)):
        for rid in ids:
            assert f"{srv.url}/receipt/{rid}" in text
            assert f"{srv.url}/v1/bundles/{rid}" in text
        assert f"{srv.url}/pr?" in text
        assert str(r.working_tree_dir) not in text
    heading = md.splitlines()[0]
    assert doc["subject"]["repo"].startswith("/") is ("(local repository)" in heading)
    assert run(capsys, "log", "checkpoint").code == 0  # a bundle proves inclusion in one
    for url in set(re.findall(r"\]\((http[^)]+)\)", md)):
        got = httpx.get(url, timeout=60)
        assert got.status_code == 200, (url, got.text)
    suite = ET.fromstring(junit).find("testsuite")
    assert suite is not None
    for case in suite.findall("testcase"):
        out = case.findtext("system-out") or ""
        assert f"{srv.url}/receipt/" in out, case.get("classname")
