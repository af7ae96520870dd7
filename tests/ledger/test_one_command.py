"""Several claims that need a `ledger qualify` run get one command, not one
`qualify --claim` each: `ledger qualify --rev X` where it would run just those,
else one run naming each."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from ledger.read import formats
from ledger.read.render import render_status
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
