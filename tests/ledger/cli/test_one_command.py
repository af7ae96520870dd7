"""Several claims that need a `ledger qualify` run get one command, not one
`qualify --claim` each: `ledger qualify --rev X` where it would run just those,
else one run naming each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import git
import httpx
import pytest

from ledger.read import formats
from ledger.read.render import render_status
from ledger.service.run import start
from tests.conftest import commit_file
from tests.ledger.helpers import run

CLAIMS = ("admission.a", "admission.b", "admission.c", "admission.d", "admission.e")
PLAN = "".join(
    f'[[claims]]\nname = "{c}"\ncheck = "admission"\nscope = {{ device_kind = "cuda" }}\n\n'
    for c in CLAIMS
)


def test_five_claims_needing_a_run_get_one_command(
    repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = commit_file(repo, "qualification.toml", PLAN, "plan")
    db = ("--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init", *db).code == 0
    q = ("status", "--repo", str(repo.working_tree_dir), "--rev", "HEAD", *db)
    doc = json.loads(run(capsys, *q, "--json").out)
    assert len(doc["verdict"]["blockers"]) == 5
    once = f"ledger qualify --rev {head[:12]}"
    assert doc["verdict"]["run_once"] == {"command": once, "claims": list(CLAIMS)}
    text = render_status(doc, width=200)
    blocking = text[text.index("Blocking:") : text.index("Claims:")]
    assert blocking.count("ledger qualify") == 1 and f"`{once}`" in blocking
    assert "--claim" not in blocking
    md = formats.markdown(doc)
    assert md.count("ledger qualify") == 1 and f"`{once}`" in md


def test_the_web_page_check_and_junit_give_the_same_one_command(
    repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = commit_file(repo, "qualification.toml", PLAN, "plan")
    url = f"sqlite:///{tmp_path / 'l.db'}"
    assert run(capsys, "init", "--db", url).code == 0
    q = ("status", "--repo", str(repo.working_tree_dir), "--rev", "HEAD", "--db", url)
    doc = json.loads(run(capsys, *q, "--json").out)
    once = f"ledger qualify --rev {head[:12]}"
    assert doc["verdict"]["run_once"]["command"] == once

    def commands(text: str) -> set[str]:
        return set(re.findall(r"ledger qualify[^`\n<]*", text))

    check = formats.github_check(doc)
    notes = "\n".join(a["message"] for a in check["output"]["annotations"])
    assert len(check["output"]["annotations"]) == 5 and commands(notes) == {once}
    assert commands(check["output"]["summary"]) == {once}
    assert commands(formats.junit(doc)) == {once}

    srv = start(url, None, mirrors=[Path(str(repo.working_tree_dir))])
    try:
        page = httpx.get(f"{srv.url}/pr", params={"repo": doc["subject"]["repo"], "rev": head})
    finally:
        srv.stop()
    assert page.status_code == 200, page.text
    blocking = page.text[page.text.index('id="blockers-h"') : page.text.index('id="matrix-h"')]
    assert blocking.count("ledger qualify") == 1 and f"<code>{once}</code>" in blocking
