"""The workload definition in the package identity against what was recorded before it:
the committed evidence ledgers keep their verdicts (read from the log, and with the
checkout their repository is committed as), and `examples/qwen3_adapter`, whose package
is only its estimator file, no longer carries a receipt to a head with another model."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest

from ledger.read.query import query_status
from ledger.read.subject import identity_from_log
from ledger.store.store import Store
from tests.ledger.qualification.test_definition_carry import World, _cli, _commit, _pr

ROOT = Path(__file__).resolve().parents[3]
BASELINE = ROOT / "evidence" / "h100-baseline"
TREND = ROOT / "evidence" / "cpu-trend"
EXAMPLE = ROOT / "examples" / "qwen3_adapter"


def _states(doc: dict[str, Any]) -> tuple[bool, list[tuple[str, str, str]]]:
    return doc["qualified"], [(c["claim"], c["state"], c["scope_role"]) for c in doc["claims"]]


def test_the_baseline_evidence_keeps_its_verdicts(tmp_path: Path) -> None:
    # base-too's head read the base's failed receipt "via package" (its plan names the
    # workload; the receipt recorded the files alone). From the log, with no checkout to
    # show the base's definition, it no longer carries, and says why; the head's own
    # failed receipt decides the claim all the same. (The log knows PR 1's newest head
    # only: base-too's; introduced's head, the same PR number of a repository with the
    # same root, is not a question the log alone answers.)
    case = "base-too"
    shutil.copy(BASELINE / "ledger.db", tmp_path / "ledger.db")
    store = Store.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    committed = json.loads((BASELINE / f"{case}-status.json").read_text())
    subject = committed["subject"]
    ident = identity_from_log(store, subject["repo"], subject["pr"], None)
    now = query_status(store, ident, claims=None, scope={}).to_json()
    assert _states(now) == _states(committed)
    assert "via package" in json.dumps(committed)
    said = json.dumps(now)
    assert "via package" not in said
    assert (
        "on commit b3724a7454b6 has the same package files, but it was recorded before "
        "the package identity covered the workload definition"
    ) in said
    assert "ledger serve --repo PATH" in said


def test_the_trend_evidence_stays_qualified_with_its_checkout(tmp_path: Path) -> None:
    # The repository its receipts speak of is committed beside it (a bundle): with that
    # checkout every commit's definition can be read, and the PR stays qualified.
    shutil.copy(TREND / "ledger.db", tmp_path / "ledger.db")
    repo = tmp_path / "moe-trend"
    git.Repo.init(repo, initial_branch="main").create_remote(
        "origin", "https://example.invalid/ledger/moe-trend.git"
    )
    refs = ["+refs/heads/*:refs/remotes/origin/*", "+refs/pull/2/head:refs/pull/2/head"]
    subprocess.run(
        ["git", "-C", str(repo), "fetch", "-q", str(TREND / "repo.bundle"), *refs], check=True
    )
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, out = _cli("status", "--pr", "2", "--offline", "--repo", str(repo), "--db", db, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["qualified"] is True
    assert {c["via"] for c in doc["claims"] if c["scope_role"] == "required"} == {"commit"}


# -- examples/qwen3_adapter: a package of one estimator file -------------------------

CLAIM = "regression.24view-nograd"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The example as a repository with a receipt on main; PR 1 makes the model wider,
    PR 2 changes only its README."""
    tmp = tmp_path_factory.mktemp("qwen3-adapter")
    with pytest.MonkeyPatch.context() as mp:
        keys = tmp / "keys"
        mp.setenv("LEDGER_KEYS", str(keys))
        db = f"sqlite:///{tmp / 'ledger.db'}"
        assert _cli("init", "--db", db)[0] == 0
        assert _cli("keys", "new", "runner", "--role", "runner", "--db", db)[0] == 0
        r = git.Repo.init(tmp / "repo", initial_branch="main")
        files = {p.name: p.read_text() for p in sorted(EXAMPLE.iterdir()) if p.is_file()}
        _commit(r, files, "the example")
        w = World(r, db, keys)
        cleanup = tmp / "cleanup.json"
        cleanup.write_text('{"complete": true, "resources": []}')
        code, out = _cli(
            "attest", "--claim", CLAIM, "--check", "regression-24view", "--outcome", "passed",
            "--param", "views=24", "--param", "seq=16", "--cleanup", str(cleanup),
            "--key", "runner", "--rev", "main", *w.where,
        )  # fmt: skip
        assert code == 0, out
        plan = files["qualification.toml"]
        wider = plan.replace("hidden_size = 64,", "hidden_size = 256,", 1)
        assert wider != plan
        _pr(r, 1, {"qualification.toml": wider}, "a wider model")
        _pr(r, 2, {"README.md": files["README.md"] + "\nA note.\n"}, "a note")
        yield w


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    [row] = [c for c in doc["claims"] if c["claim"] == CLAIM and c["scope_role"] == "required"]
    out: dict[str, Any] = row
    return out


def test_the_example_with_another_model_does_not_inherit_the_base(example: World) -> None:
    _, doc = example.status("--pr", "1")
    row = _row(doc)
    assert row["state"] != "qualified" and row["via"] is None
    said = json.dumps(doc)
    assert "the workload definition changed: workload_params.config.hidden_size: 64 -> 256" in said
    # The PR's own note says the same: it changes the workload definition.
    assert any("changes the workload definition" in n for n in doc["judged"])


def test_the_example_with_only_a_new_readme_still_carries(example: World) -> None:
    _, doc = example.status("--pr", "2")
    assert (_row(doc)["state"], _row(doc)["via"]) == ("qualified", "package")
