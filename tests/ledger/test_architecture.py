"""The import graph of `ledger/` and `runners/` has no circle.

Read from the source with `ast`, not from `sys.modules`: every import counts
as an arrow, at module level, inside a function (the lazy imports that keep
`ledger verify` and the torch-free parent fast) and under `TYPE_CHECKING`
(a type named across a circle still ties the two modules into one). An
import of a package counts as an arrow to its `__init__`; the implicit
import of a module's parent packages does not (every submodule would
otherwise sit in a circle with its package's `__init__`).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "runners")


def _modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package by its `__init__`)."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imported(
    node: ast.Import | ast.ImportFrom, here: str, package: bool, known: Collection[str]
) -> Iterator[str]:
    """The modules of the packages one import statement names."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:
        # `from . import x` in a package's `__init__` is relative to the package itself.
        anchor = here.split(".")
        if not package:
            anchor = anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        # `from pkg import mod` imports the module; `from mod import name` the module.
        yield sub if sub in known else base


def arrows(source: str, name: str, package: bool, known: Collection[str]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in `source`."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _imported(node, name, package, known):
                # `import ledger.x.y` names ledger.x.y; keep the longest known prefix.
                parts = target.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                if parts and ".".join(parts) != name:
                    out.add(".".join(parts))
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the packages it imports (anywhere in its source)."""
    known = _modules()
    return {
        name: arrows(path.read_text(), name, _is_package(path), known)
        for name, path in known.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each
    as one circle through its members, so a failure names the arrows to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        # Recursion depth is bounded by the module count (a few hundred).
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle_through(graph, comp) for comp in components]


def _circle_through(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One closed path inside a component, from its first module back to it."""
    members = set(comp)
    start = comp[0]
    # Breadth-first from start's successors back to start, inside the component.
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return comp  # unreachable for a strongly connected component


def test_every_kind_of_import_is_an_arrow() -> None:
    known = {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f", "p.sub", "p.sub.g"}
    source = """
from typing import TYPE_CHECKING
import os
import p.a
from p import b
from p.c import something
if TYPE_CHECKING:
    from p.d import Type
def later():
    from p.e import thing
from . import f
from .sub import g
from p.nowhere import x
"""
    found = arrows(source, "p.here", False, known)
    assert found == {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f", "p.sub.g"}
    # In a package's __init__, `from . import f` is relative to the package itself.
    assert arrows("from . import f\n", "p", True, known) == {"p.f"}
    assert arrows("import p.a\n", "p.a", False, known) == set()


def test_the_finder_reports_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_ledger_or_runners_imports_itself_round_a_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_top_level_of_ledger_holds_only_entry_points_and_packages() -> None:
    """Every module lives in a package named for its concept (docs/architecture.md);
    beside them only the entry points (`ledger/__init__.py`, `ledger/__main__.py`)."""
    top = ROOT / "ledger"
    files = sorted(p.name for p in top.iterdir() if p.is_file())
    assert files == ["__init__.py", "__main__.py", "py.typed"], files
    for folder in sorted(p for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"):
        # Alembic's environment and revisions are scripts it loads by path, not a package.
        if folder.name != "migrations":
            assert (folder / "__init__.py").is_file(), f"{folder.name}/ is not a package"


# The rooms' arrows out: every module a room's modules import (at module level, in a
# function or under TYPE_CHECKING) lies under one of these (docs/architecture.md).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # `ledger` itself for `__version__`; signing notes what it signed in this host's journal.
    "ledger.evidence": ("ledger", "ledger.monitor.journal"),
    # `source` reads the plan that says what a package is, and which part of a PR's change
    # to it is its workload (`workload_source`, over the plan alone); `aliases` lives in
    # the store.
    "ledger.identity": (
        "ledger.evidence",
        "ledger.qualification.plan",
        "ledger.qualification.workload_source",
        "ledger.plans.entry",
        "ledger.store",
    ),
    "ledger.remote": ("ledger.evidence",),
    "ledger.write": (
        "ledger",
        "ledger.evidence",
        "ledger.identity",
        "ledger.remote",
        "ledger.store",
        "ledger.verify",
        "ledger.plans",
        "ledger.qualification.plan",
        "ledger.qualification.supersession",
        "ledger.sandbox",
        "ledger.outputs",
    ),
    # The reader (`read/reader.py`) answers every question a command asks, here or of a
    # server: the log's proofs, bundles and audit, the log as the monitor and the witness
    # read it, a policy's quorum, the artifacts a bundle carries, and the governing plan
    # of a question asked without a checkout (`read/subject.py`).
    "ledger.read": (
        "ledger.evidence",
        "ledger.identity",
        "ledger.store",
        "ledger.verify",
        "ledger.qualification",
        "ledger.fleet.report",
        "ledger.trend",
        "ledger.remote.client",
        "ledger.log",
        "ledger.monitor.watch",
        "ledger.monitor.remote",
        "ledger.transparency.enforce",
        "ledger.transparency.policy",
        "ledger.plans.ledger",
        "ledger.write.artifacts",
        "ledger.write.service_local",
    ),
}

# Who may import the read side: the surfaces, and the reports beside them that use
# its text helpers (`humanize`).
READERS = ("ledger.cli", "ledger.service", "ledger.execution.said", "ledger.trend.figures")


def _under(module: str, prefixes: Collection[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _may(room: str, target: str) -> bool:
    """Whether a module of `room` may import `target` (`ledger` names the package alone)."""
    allowed = MAY_IMPORT[room]
    if target == "ledger":
        return "ledger" in allowed
    return _under(target, [room, *(a for a in allowed if a != "ledger")])


def test_the_room_rule_reads_as_meant() -> None:
    assert _may("ledger.write", "ledger.write.record")
    assert _may("ledger.write", "ledger") and not _may("ledger.identity", "ledger")
    assert _may("ledger.read", "ledger.qualification.history")
    assert not _may("ledger.read", "ledger.write.record")
    assert not _may("ledger.evidence", "ledger.monitor.watch")


def test_each_room_imports_only_the_rooms_below_it() -> None:
    wrong = [
        f"{m} -> {d}"
        for m, deps in import_graph().items()
        for room in MAY_IMPORT
        if _under(m, [room])
        for d in sorted(deps)
        if not _may(room, d)
    ]
    assert not wrong, "arrows out of their room: " + "; ".join(wrong)


def test_only_the_surfaces_import_the_read_side() -> None:
    wrong = [
        f"{m} -> {d}"
        for m, deps in import_graph().items()
        if not _under(m, ["ledger.read", *READERS])
        for d in sorted(deps)
        if _under(d, ["ledger.read"])
    ]
    assert not wrong, "the read side imported below the surfaces: " + "; ".join(wrong)


def test_a_room_imports_none_of_its_modules_when_imported() -> None:
    """`import ledger.evidence` (and the other rooms) loads nothing: each module is
    imported where it is used, so `ledger verify FILE` pays for what it needs."""
    for room in MAY_IMPORT:
        init = ROOT / room.replace(".", "/") / "__init__.py"
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{room} says what belongs there"
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not imports, f"{room}/__init__.py imports at import time"
