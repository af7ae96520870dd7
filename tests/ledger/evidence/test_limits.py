"""No traceback on any input: the seed corpus of inputs that once crashed, the
column limits on both backends, and refused inputs that write nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from ledger.evidence import dsse
from ledger.evidence.entry import envelope_body
from ledger.evidence.keys import KeyDir
from ledger.store.store import Store
from tests.conftest import commit_file
from tests.ledger.factories import COMMIT, TREE, dump, envelope, statement
from tests.ledger.helpers import Run, run

SEEDS = Path(__file__).parents[1] / "fixtures" / "seeds"


@dataclass
class Ledger:
    db: str
    store: Store
    keys: KeyDir
    receipt: str


@pytest.fixture
def ledger(
    db_url: str, key_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Ledger:
    for args in (("init",), ("keys", "new", "runner", "--role", "runner")):
        assert run(capsys, *args, "--db", db_url).code == 0
    keys = KeyDir(key_dir)
    f = tmp_path / "good.json"
    f.write_bytes(envelope(keys.load("runner")))
    r = run(capsys, "record", str(f), "--db", db_url)
    assert r.code == 0, r.err
    return Ledger(db_url, Store.open(db_url), keys, r.out.split()[0])


def one_line_refusal(r: Run) -> None:
    assert "Traceback" not in r.err + r.out
    assert r.code in (1, 2), (r.code, r.err)
    if r.code == 2 and r.err.startswith("Usage: "):
        # click's usage refusal: the usage line, then one `Error:` line.
        assert r.err.count("\nError: ") == 1, r.err
        return
    assert r.err.startswith("ledger: ") and r.err.count("\n") == 1, r.err


def _file_cases() -> list[tuple[str, list[str]]]:
    return [
        ("json-nested-100000.json", ["record"]),
        ("json-int-5000-digits.json", ["record"]),
        ("json-nested-100000.json", ["verify", "--trust", "{pem}"]),
        ("bundle-key-entry-not-json.json", ["verify", "--trust", "{pem}"]),
        ("plan-nested-5000.toml", ["status", "--rev", "HEAD", "--repo", "{repo}", "--plan"]),
    ]


@pytest.mark.parametrize(("seed", "words"), _file_cases(), ids=lambda v: str(v))
def test_seed_file_is_refused_in_one_line(
    seed: str,
    words: list[str],
    ledger: Ledger,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pem = tmp_path / "ledger.pub.pem"
    assert run(capsys, "keys", "export", "ledger", "--db", ledger.db).code == 0
    pem.write_text(run(capsys, "keys", "export", "ledger", "--db", ledger.db).out)
    fill = {"{pem}": str(pem), "{repo}": str(repo.working_tree_dir)}
    args = [fill.get(w, w) for w in words]
    before = dump(ledger.store)
    r = run(capsys, *args[:1], *args[1:], str(SEEDS / seed), "--db", ledger.db)
    if args[0] == "verify":  # offline: no --db
        r = run(capsys, *args, str(SEEDS / seed)) if r.code == 2 else r
    one_line_refusal(r)
    assert dump(ledger.store) == before


@pytest.mark.parametrize("seed", sorted(p.name for p in SEEDS.glob("args-*.json")))
def test_seed_arguments_are_refused_in_one_line(
    seed: str,
    ledger: Ledger,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fill = {
        "{db}": ledger.db,
        "{tmp}": str(tmp_path),
        "{repo}": str(repo.working_tree_dir),
        "{receipt}": ledger.receipt,
    }
    args = json.loads((SEEDS / seed).read_text())
    for k, v in fill.items():
        args = [a.replace(k, v) for a in args]
    before = dump(ledger.store)
    one_line_refusal(run(capsys, *args))
    assert dump(ledger.store) == before


def test_committed_plan_not_utf8_is_refused(
    ledger: Ledger, repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(str(repo.working_tree_dir))
    (root / "qualification.toml").write_bytes((SEEDS / "plan-not-utf8.toml").read_bytes())
    repo.index.add(["qualification.toml"])
    actor = git.Actor("Test", "test@example.com")
    repo.index.commit("plan", author=actor, committer=actor)
    one_line_refusal(run(capsys, "status", "--rev", "HEAD", "--repo", str(root), "--db", ledger.db))


def test_dangling_symlink_at_the_key_path(
    ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    os.symlink("/nonexistent/target", ledger.keys.path / "dangling.pem")
    before = dump(ledger.store)
    one_line_refusal(run(capsys, "keys", "new", "dangling", "--role", "runner", "--db", ledger.db))
    assert dump(ledger.store) == before


SOURCE = {"repo": "example", "commit": COMMIT, "tree": TREE, "dirty": False}


@pytest.mark.parametrize(
    ("case", "over"),
    [
        ("pr-2^63", {"source": {**SOURCE, "pr": 2**63}}),
        ("claim-201-chars", {"claim": "c" * 201}),
        ("repo-501-chars", {"source": {**SOURCE, "repo": "r" * 501}}),
        ("facet-key-101-chars", {"scope": {"k" * 101: "v"}}),
        ("facet-value-501-chars", {"scope": {"k": "v" * 501}}),
        ("claim-with-nul", {"claim": "a\x00b"}),
        ("facet-value-with-nul", {"scope": {"k": "a\x00b"}}),
    ],
)
def test_column_limits_refused_alike_on_both_backends(
    case: str,
    over: dict[str, object],
    ledger: Ledger,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    f = tmp_path / "env.json"
    # Signed by hand, so the value reaches ingest even where the model would refuse to build it.
    doc = statement().model_dump(mode="json", by_alias=True, exclude_none=True)
    doc["predicate"].update(over)
    payload = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    env = dsse.sign(payload, ledger.keys.load("runner"))
    f.write_bytes(envelope_body(env))
    before = dump(ledger.store)
    r = run(capsys, "record", str(f), "--db", ledger.db)
    one_line_refusal(r)
    assert r.code == 1, r.err  # refused input, never "database error" (exit 2)
    assert "database error" not in r.err
    assert dump(ledger.store) == before


def test_refused_attest_stores_no_artifact(
    ledger: Ledger, repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commit_file(repo, "model/b.py", "y = 2\n", "second")
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN PRIVATE KEY-----\nnot for the ledger\n")
    db_file = ledger.db.removeprefix("sqlite:///")
    raw_before = Path(db_file).read_bytes() if ledger.db.startswith("sqlite") else b""
    before = dump(ledger.store)
    r = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "c" * 201,  # refused: over the claim limit
        "--outcome",
        "passed",
        "--artifact",
        str(secret),
        "--rev",
        "HEAD",
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        "runner",
        "--db",
        ledger.db,
    )
    assert r.code == 1 and "claim" in r.err and "Traceback" not in r.err, r.err
    assert dump(ledger.store) == before
    if raw_before:
        assert Path(db_file).read_bytes() == raw_before
