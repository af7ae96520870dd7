"""Shared fixtures: real SQLite files and a real PostgreSQL server, real git repos."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from sqlalchemy import create_engine, text

# Two workers share two cores (`.ci/run`): torch's OpenMP threads in each worker, and in
# each claim process a worker starts, would spin at every barrier for cores the other
# worker holds (GNU OpenMP's default), a small check several times slower. Asleep
# instead, as a claim's processes wait (`runners.contract.childenv`); set before anything
# imports torch, unless the caller set a policy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_OWN = ("runners", "ledger")
_ROOT = str(Path(__file__).resolve().parents[1]) + os.sep


@pytest.fixture(autouse=True, scope="module")
def _own_modules_kept() -> Iterator[None]:
    """This project's modules as they were before a test file ran. Loading a workload from
    another checkout of this project (a copy of its tree) imports that copy's `runners`
    modules in their place, as the loader does by design (one checkout of a package at a
    time); a later file in the same process would then hold two classes of one name, and
    a patch of one module would miss the code that runs (found by running the files in
    another order: `--no-loadscope-reorder`)."""
    before = {k: m for k, m in sys.modules.items() if k.split(".")[0] in _OWN}
    yield
    for name in [k for k in sys.modules if k.split(".")[0] in _OWN and k not in before]:
        where = getattr(sys.modules[name], "__file__", None) or ""
        if where and not where.startswith(_ROOT):
            del sys.modules[name]  # a copy's own module: gone with its checkout
    for name, mod in before.items():
        if sys.modules.get(name) is not mod:
            sys.modules[name] = mod
            parent, _, leaf = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], leaf, mod)


PG_URL = os.environ.get(
    "LEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ledger_test"
)


def _pg_available() -> str | None:
    try:
        eng = create_engine(PG_URL)
        with eng.connect() as c:
            c.execute(text("select 1"))
        eng.dispose()
    except Exception as e:  # any driver/connection failure means "not here"
        return f"{type(e).__name__}: {e}"
    return None


_PG_PROBLEM = _pg_available()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: an SQLite file, or a private PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    if _PG_PROBLEM is not None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL required in CI: {_PG_PROBLEM}")
        pytest.skip(f"PostgreSQL not reachable: {_PG_PROBLEM}")
    schema = "t_" + secrets.token_hex(6)
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    with admin.connect() as c:
        c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture
def key_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "keys"
    monkeypatch.setenv("LEDGER_KEYS", str(d))
    return d


def commit_file(repo: git.Repo, path: str, content: str, message: str) -> str:
    root = Path(repo.working_tree_dir or ".")
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(content)
    repo.index.add([path])
    actor = git.Actor("Test", "test@example.com")
    return repo.index.commit(message, author=actor, committer=actor).hexsha


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    """A real git repository with one commit on main."""
    r = git.Repo.init(tmp_path / "repo", initial_branch="main")
    commit_file(r, "model/a.py", "x = 1\n", "initial")
    return r


# The files that take the longest (real torch in several processes per test) are
# collected first. Under `pytest -n N --dist loadfile` xdist hands out files by their
# number of tests unless `--no-loadscope-reorder` is given, so there this order decides
# only a single process's run; the tests' own time (1,601 s on 2026-12-07) is what two
# workers share, evenly in either order.
_FIRST = ("tests/runners/", "tests/examples/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return next((i for i, p in enumerate(_FIRST) if path.startswith(p)), len(_FIRST))

    items.sort(key=rank)  # stable: the order within each group is kept
