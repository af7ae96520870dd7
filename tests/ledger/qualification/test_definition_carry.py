"""What carries is what the head runs: the workload definition a plan names (a ready
adapter's model lives in `workload_params`) is part of the package identity, so a pull
request that changes only the model, or breaks its estimator line, never inherits the
base's receipts; a change outside the package and the plan still does. Real git
repositories, real SQLite ledgers, receipts recorded through the CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest

from ledger.cli import main
from ledger.evidence.keys import KeyDir
from ledger.identity.source import package_identity, repo_name
from ledger.plans.governing import identify
from ledger.qualification.adapters import READY_ADAPTERS
from ledger.read.query import history_answer, query_status
from ledger.read.question import Question
from ledger.read.subject import identity_from_log
from ledger.store.store import Store
from tests.ledger.factories import envelope

CLAIM = "admission.no-oom-after-admit"
ESTIMATOR = 'estimator = "mem:estimate"\n'
PLAN = (
    'workload = "runners.adapt.library:causal_lm"\n'
    'preload = ["transformers"]\n'
    "\n"
    "[workload_params]\n"
    'model_type = "gpt2"\n'
    'dtype = "float32"\n'
    + ESTIMATOR
    + "config = { n_embd = 64, n_layer = 2, n_head = 2, vocab_size = 128 }\n"
    "\n"
    "[package]\n"
    'paths = ["*.py"]\n'
    "\n"
    "[[claims]]\n"
    f'name = "{CLAIM}"\n'
    'check = "admission"\n'
    'carry_over = "package"\n'
    "cleanup = false\n"
)
BIGGER = PLAN.replace("n_embd = 64, n_layer = 2", "n_embd = 256, n_layer = 6")
NO_ESTIMATOR = PLAN.replace(ESTIMATOR, "")
ACTOR = git.Actor("T", "t@example.invalid")


def _cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue() + err.getvalue()


def _commit(r: git.Repo, files: dict[str, str], message: str) -> str:
    root = Path(r.working_tree_dir or ".")
    for name, text in files.items():
        (root / name).write_text(text)
    r.index.add(sorted(files))
    return str(r.index.commit(message, author=ACTOR, committer=ACTOR).hexsha)


def _pr(r: git.Repo, n: int, files: dict[str, str], message: str) -> str:
    r.git.checkout("-b", f"pr{n}", "main")
    head = _commit(r, files, message)
    r.git.update_ref(f"refs/pull/{n}/head", head)
    r.git.checkout("main")
    return head


@dataclasses.dataclass
class World:
    repo: git.Repo
    db: str
    keys: Path

    @property
    def where(self) -> tuple[str, ...]:
        return ("--repo", str(self.repo.working_tree_dir), "--db", self.db)

    def status(self, *args: str) -> tuple[int, dict[str, Any]]:
        offline = ("--offline",) if "--pr" in args else ()
        code, out = _cli("status", *args, *offline, *self.where, "--json")
        assert code in (0, 1), out
        doc: dict[str, Any] = json.loads(out)
        return code, doc

    def attest(self, *args: str) -> str:
        code, out = _cli(
            "attest", "--claim", CLAIM, "--check", "admission", "--outcome", "passed",
            "--key", "runner", *self.where, *args,
        )  # fmt: skip
        assert code == 0, out
        return out.strip().split()[0]


@contextlib.contextmanager
def _world(tmp: Path, plan: str) -> Iterator[World]:
    with pytest.MonkeyPatch.context() as mp:
        keys = tmp / "keys"
        mp.setenv("LEDGER_KEYS", str(keys))
        db = f"sqlite:///{tmp / 'ledger.db'}"
        assert _cli("init", "--db", db)[0] == 0
        assert _cli("keys", "new", "runner", "--role", "runner", "--db", db)[0] == 0
        r = git.Repo.init(tmp / "repo", initial_branch="main")
        files = {"qualification.toml": plan, "mem.py": "def estimate(*a, **k):\n    return 1\n"}
        _commit(r, {**files, "README.md": "a model\n"}, "base")
        yield World(r, db, keys)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """main with a receipt of its own; PR 1 makes the model bigger, PR 2 deletes the
    estimator line, PR 3 changes only the README (outside the package and the plan)."""
    with _world(tmp_path_factory.mktemp("adapter"), PLAN) as w:
        w.attest("--rev", "main")
        _pr(w.repo, 1, {"qualification.toml": BIGGER}, "a bigger model")
        _pr(w.repo, 2, {"qualification.toml": NO_ESTIMATOR}, "no estimator")
        _pr(w.repo, 3, {"README.md": "a model, documented\n"}, "docs")
        yield w


def _row(doc: dict[str, Any]) -> dict[str, Any]:
    [row] = [c for c in doc["claims"] if c["claim"] == CLAIM and c["scope_role"] == "required"]
    out: dict[str, Any] = row
    return out


def test_a_pr_that_changes_only_the_model_is_not_qualified_by_the_base(adapter: World) -> None:
    code, doc = adapter.status("--pr", "1")
    row = _row(doc)
    assert code == 1 and row["state"] != "qualified" and row["via"] is None
    said = json.dumps(doc)
    assert "via package" not in said
    assert "the workload definition changed: workload_params.config.n_embd: 64 -> 256" in said
    assert "workload_params.config.n_layer: 2 -> 6" in said
    # The package files are the base's: the definition is what differs, said by name.
    assert "has the same package files, but the workload definition changed" in said


def test_a_pr_that_deletes_the_estimator_line_is_not_carried(adapter: World) -> None:
    code, doc = adapter.status("--pr", "2")
    assert code == 1 and _row(doc)["state"] != "qualified"
    said = json.dumps(doc)
    assert "via package" not in said
    assert 'workload_params.estimator: \\"mem:estimate\\" -> (none)' in said


def test_a_change_outside_the_package_and_the_plan_still_carries(adapter: World) -> None:
    code, doc = adapter.status("--pr", "3")
    row = _row(doc)
    assert code == 0 and (row["state"], row["via"]) == ("qualified", "package")
    assert "has the same package digest" in json.dumps(doc)


def test_the_receipt_records_the_definition_as_a_part_of_its_package(adapter: World) -> None:
    ident = identify(adapter.repo, rev="main")
    parts = dict(ident.revision.package_parts)
    assert set(parts) == {"files", "workload"}
    files_only = package_identity(adapter.repo.commit("main"), ["*.py"])
    assert ident.revision.prior_package_digest == files_only.digest == parts["files"]
    assert ident.revision.package_digest != files_only.digest
    # The PR's head resolves its own definition under the base's gate.
    bigger = identify(adapter.repo, pr=1, offline=True)
    assert bigger.revision.definition != ident.revision.definition
    assert bigger.revision.prior_package_digest == ident.revision.prior_package_digest


# -- receipts recorded before the definition was part of the package identity ------

FROZEN_PLAN = PLAN.replace("runners.adapt.library:causal_lm", "mem:make_workload")


def _old_form(w: World, commit: str) -> str:
    """A receipt as earlier releases recorded it: the package digest over the files
    alone, no parts; recorded with `ledger record`."""
    r = w.repo
    c = r.commit(commit)
    package = package_identity(c, ["*.py"])
    assert package.parts is None
    source = {
        "repo": repo_name(r),
        "commit": c.hexsha,
        "tree": c.tree.hexsha,
        "dirty": False,
        "package": {"paths": ["*.py"], "digest": package.digest},
    }
    f = Path(str(w.repo.working_tree_dir)).parent / f"old-{commit[:7]}.json"
    f.write_bytes(envelope(KeyDir(w.keys).load("runner"), claim=CLAIM, source=source))
    code, out = _cli("record", str(f), "--db", w.db)
    assert code == 0, out
    return out.split()[0]


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A plan naming its own workload module with parameters; an old-form receipt on
    main; PR 3 changes only the README, PR 1 the parameters."""
    with _world(tmp_path_factory.mktemp("frozen"), FROZEN_PLAN) as w:
        _old_form(w, "main")
        _pr(w.repo, 3, {"README.md": "documented\n"}, "docs")
        _pr(
            w.repo, 1, {"qualification.toml": FROZEN_PLAN.replace("n_embd = 64", "n_embd = 8")}, "x"
        )
        yield w


def test_an_old_receipt_carries_where_the_checkout_shows_the_same_definition(
    frozen: World,
) -> None:
    code, doc = frozen.status("--pr", "3")
    row = _row(doc)
    assert code == 0 and (row["state"], row["via"]) == ("qualified", "package")
    said = json.dumps(doc)
    assert "recorded before the package identity covered the workload definition" in said
    assert "read from the checkout, is this revision's" in said
    # The same receipt does not carry to a head whose definition differs, by name.
    code, doc = frozen.status("--pr", "1")
    assert code == 1 and _row(doc)["state"] != "qualified"
    assert "workload_params.config.n_embd: 64 -> 8" in json.dumps(doc)


def test_an_old_receipt_does_not_carry_without_a_checkout_and_says_why(frozen: World) -> None:
    # A question posted to a server (`status --server`): the revision identified in a
    # checkout, judged where none is.
    q = identify(frozen.repo, pr=3, offline=True)
    doc = Question.of(q).to_json()
    posted = Question.from_json(doc).identity()
    assert posted.definitions is None
    store = Store.open(frozen.db)
    row = query_status(store, posted, claims=None, scope={}).at_required_scope(CLAIM)
    assert row is not None and row.state == "not-run"
    # A question that brings its own proof is judged by the server's reading alone.
    main = frozen.repo.commit("main").hexsha
    doc["subject"]["definition_proofs"] = [{"commit": main, "same": True, "said": ""}]
    forged = query_status(store, Question.from_json(doc).identity(), claims=None, scope={})
    assert forged.at_required_scope(CLAIM).state == "not-run"
    said = " ".join(str(r) for r in row.reasons)
    assert "recorded before the package identity covered the workload definition" in said
    assert "no checkout here" in said and "ledger serve --repo PATH" in said
    # History names the same, per commit, where a checkout is.
    judged = history_answer(store, q)["judged"]
    assert any("the same workload definition as this revision" in j for j in judged)


def test_an_old_receipt_of_a_ready_adapter_never_carries(tmp_path: Path) -> None:
    # Recorded before adapters had versions: it ran the adapter as it was then.
    with _world(tmp_path, PLAN) as w:
        _old_form(w, "main")
        _pr(w.repo, 3, {"README.md": "documented\n"}, "docs")
        code, doc = w.status("--pr", "3")
        assert code == 1 and _row(doc)["state"] != "qualified"
        now = READY_ADAPTERS["runners.adapt.library:causal_lm"]
        said = f'adapter runners.adapt.library:causal_lm: version \\"1\\" -> \\"{now}\\"'
        assert said in json.dumps(doc)


# -- tree carry-over with --plan FILE outside the tree -------------------------------

TREE_PLAN = PLAN.replace('carry_over = "package"', 'carry_over = "tree"')


def test_tree_carry_over_under_another_plan_file_does_not_carry(tmp_path: Path) -> None:
    with _world(tmp_path, PLAN) as w:
        small, big = tmp_path / "small.toml", tmp_path / "big.toml"
        small.write_text(TREE_PLAN)
        big.write_text(TREE_PLAN.replace("n_embd = 64", "n_embd = 256"))
        w.attest("--rev", "main", "--plan", str(small))
        w.repo.index.commit("same tree", author=ACTOR, committer=ACTOR)
        code, doc = w.status("--rev", "HEAD", "--plan", str(big))
        assert code == 1 and _row(doc)["state"] != "qualified"
        said = json.dumps(doc)
        # The receipt's plan file is not in any commit: its definition is named by digest.
        assert "has the same tree, but the workload definition changed (recorded" in said
        # Under the plan it was recorded with, the same receipt carries by tree.
        code, doc = w.status("--rev", "HEAD", "--plan", str(small))
        assert code == 0 and _row(doc)["via"] == "tree"


def test_an_earlier_head_with_another_model_is_stale_and_says_what_changed(
    tmp_path: Path,
) -> None:
    with _world(tmp_path, PLAN) as w:
        _pr(w.repo, 4, {"README.md": "first head\n"}, "first head")
        w.attest("--pr", "4", "--offline")
        w.repo.git.checkout("pr4")
        second = _commit(w.repo, {"qualification.toml": BIGGER}, "a bigger model")
        w.repo.git.update_ref("refs/pull/4/head", second)
        w.repo.git.checkout("main")
        code, doc = w.status("--pr", "4")
        assert code == 1 and _row(doc)["state"] == "stale"
        assert (
            "on earlier head" in json.dumps(doc)
            and "of PR #4; the workload definition changed: "
            "workload_params.config.n_embd: 64 -> 256"
            in json.dumps(doc)
        )
        # The plain text says it too, for people.
        _, text = _cli("status", "--pr", "4", "--offline", *w.where)
        assert "workload definition changed" in " ".join(text.split())


def test_from_the_log_alone_the_recorded_definition_decides(tmp_path: Path) -> None:
    # `GET /v1/status` without a checkout: the subject is the PR's newest receipt, its
    # package parts (the definition included) as recorded. The base's receipt of the same
    # definition carries by package; a head whose definition differs inherits nothing.
    with _world(tmp_path, PLAN) as w:
        w.attest("--rev", "main")
        _pr(w.repo, 3, {"README.md": "documented\n"}, "docs")
        _pr(w.repo, 1, {"qualification.toml": BIGGER}, "a bigger model")
        for pr in ("3", "1"):
            code, out = _cli(
                "attest", "--claim", "other.note", "--check", "note", "--outcome", "passed",
                "--unplanned", "--key", "runner", "--pr", pr, "--offline", *w.where,
            )  # fmt: skip
            assert code == 0, out
        store = Store.open(w.db)
        repo = repo_name(w.repo)
        same = identity_from_log(store, repo, 3, None)
        assert same.definitions is None and same.revision.definition is not None
        row = query_status(store, same, claims=None, scope={}).at_required_scope(CLAIM)
        assert (row.state, row.via) == ("qualified", "package")
        other = identity_from_log(store, repo, 1, None)
        row = query_status(store, other, claims=None, scope={}).at_required_scope(CLAIM)
        assert row.state == "not-run"


def test_a_commit_the_checkout_lacks_is_said_and_a_recorded_difference_stands(
    frozen: World,
) -> None:
    from ledger.identity.revision import DefinitionProof
    from ledger.plans.definition import prove

    defs = identify(frozen.repo, rev="main").definitions
    missing = "ab" * 20
    said = f"commit {missing[:12]} is not in this checkout"
    assert prove(defs, missing, None) == DefinitionProof(missing, None, said)
    # A receipt that recorded another definition differs, whether or not it can be read.
    assert prove(defs, missing, "d" * 64) == DefinitionProof(missing, False, "")


def test_a_server_with_a_checkout_proves_an_old_receipt_as_the_terminal_does(
    frozen: World,
) -> None:
    import httpx

    from ledger.service.run import start

    repo = repo_name(frozen.repo)
    srv = start(frozen.db, mirrors=(Path(str(frozen.repo.working_tree_dir)),))
    try:
        r = httpx.get(
            f"{srv.url}/v1/status", params={"repo": repo, "pr": 3}, timeout=60,
            headers={"accept": "application/json"},
        )  # fmt: skip
    finally:
        srv.stop()
    assert r.status_code == 200, r.text
    doc = r.json()
    # Identified in the server's checkout (as the terminal would), which proves the
    # old receipt's commit resolves to the head's definition.
    assert any("refs/pull/3/head" in n for n in doc["judged"]), doc["judged"]
    assert (_row(doc)["state"], _row(doc)["via"]) == ("qualified", "package")
    assert "read from the checkout, is this revision's" in json.dumps(doc)
