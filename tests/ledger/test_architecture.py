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
from collections.abc import Callable, Collection, Iterator, Sequence
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


# The house as layers, bottom first (docs/architecture.md, "Who may import whom"):
# a room imports only rooms of the layers below its own, never one beside it or
# above it. A room is a package under `ledger/` (`ledger.X` and all below it), with
# three more: `ledger` names the package's own `__init__` (`__version__`, and
# `__all__`: the public rooms), `ledger.__main__` the entry point, and `runners` the whole
# of `runners/`, above ledger's core and below what runs it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # Nothing below: the version, numbers for people, this host's GPUs.
    ("ledger", "ledger.units", "ledger.hardware"),
    # The evidence format.
    ("ledger.evidence",),
    # Its wire formats, private: the Merkle tree, checkpoint notes, fork checks.
    ("ledger._internal",),
    # Where bytes are kept and sent: the store, outputs read beneath a folder,
    # the sandbox, the HTTP client.
    ("ledger.store", "ledger.outputs", "ledger.sandbox", "ledger.remote"),
    # What a receipt speaks of (aliases live in the store).
    ("ledger.identity",),
    # Offline checks, the verdict, other harnesses' files, the schema's history.
    ("ledger.verify", "ledger.qualification", "ledger.importers", "ledger.migrations"),
    # The governing plan as evidence; a figure's trend, from the store alone.
    ("ledger.plans", "ledger.trend"),
    # The write path.
    ("ledger.write",),
    # The log and what proves it.
    ("ledger.transparency",),
    # Watching the keys that sign into a log.
    ("ledger.monitor",),
    # The runners (torch): above ledger's core, below what runs them.
    ("runners",),
    # The fleet that runs them, conformance before GPU time.
    ("ledger.fleet", "ledger.conformance"),
    # The read side: questions, their evidence, the reader, a ledger opened once with
    # its recorder, the answers rendered.
    ("ledger.read",),
    # Orchestration, which records and reads through one opened ledger.
    ("ledger.execution",),
    # The surfaces, then the entry point.
    ("ledger.service",),
    ("ledger.cli",),
    ("ledger.__main__",),
)

# The rooms' arrows out: the rooms each room's modules import (at module level, in a
# function or under TYPE_CHECKING), every one of them in a layer below its own.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "ledger": (),
    "ledger.units": (),
    "ledger.hardware": (),
    # `ledger` itself for `__version__`; nothing else.
    "ledger.evidence": ("ledger",),
    "ledger._internal": ("ledger.evidence",),
    # `entry_leaf` hashes each appended entry into the tree.
    "ledger.store": ("ledger.evidence", "ledger._internal"),
    "ledger.outputs": ("ledger.evidence",),
    "ledger.sandbox": ("ledger.evidence",),
    "ledger.remote": ("ledger.evidence",),
    # `aliases` lives in the store; the plan is handed to `source`, never loaded there.
    "ledger.identity": ("ledger.evidence", "ledger.store"),
    "ledger.verify": ("ledger.evidence", "ledger._internal", "ledger.identity"),
    "ledger.qualification": ("ledger.units", "ledger.evidence", "ledger.identity"),
    "ledger.importers": ("ledger.evidence", "ledger.identity"),
    "ledger.migrations": ("ledger.store", "ledger.identity"),
    "ledger.plans": ("ledger.evidence", "ledger.store", "ledger.identity", "ledger.qualification"),
    "ledger.trend": ("ledger.units", "ledger.store", "ledger.identity", "ledger.qualification"),
    "ledger.write": (
        "ledger",
        "ledger.evidence",
        "ledger.store",
        "ledger.outputs",
        "ledger.sandbox",
        "ledger.remote",
        "ledger.identity",
        "ledger.verify",
        "ledger.qualification",
        "ledger.plans",
    ),
    # A checkpoint is appended like an entry; the audit re-derives the index rows.
    "ledger.transparency": (
        "ledger.evidence",
        "ledger._internal",
        "ledger.store",
        "ledger.identity",
        "ledger.verify",
        "ledger.plans",
        "ledger.write",
    ),
    "ledger.monitor": (
        "ledger.evidence",
        "ledger._internal",
        "ledger.store",
        "ledger.remote",
        "ledger.transparency",
    ),
    # What runners import today: the sandbox policy and the one reader beneath a folder.
    "runners": ("ledger.sandbox", "ledger.outputs"),
    "ledger.fleet": (
        "ledger.hardware",
        "ledger.evidence",
        "ledger.store",
        "ledger.remote",
        # A failure the baseline attributed to the pull request is not the device's.
        "ledger.qualification",
        # The hosts each key speaks for (`write/hosts.py`): only those receipts count.
        "ledger.write",
        "ledger.transparency",
        "runners",
    ),
    "ledger.conformance": ("ledger.evidence", "ledger.sandbox", "ledger.qualification", "runners"),
    # `query` answers about an `Identity` (plans/governing.py).
    # The reader (`read/reader.py`) answers every question a command asks, here or of a
    # server (`remote`): the log's proofs, bundles and audit, the verification of an
    # entry, the log as the monitor and the witness read it, the artifacts a bundle
    # carries (`write`'s artifact store), and the governing plan of a question asked
    # without a checkout (`read/subject.py`).
    "ledger.read": (
        "ledger.units",
        "ledger.evidence",
        "ledger.store",
        "ledger.remote",
        "ledger.identity",
        "ledger.verify",
        "ledger.qualification",
        "ledger.plans",
        "ledger.trend",
        "ledger.write",
        "ledger.transparency",
        "ledger.monitor",
        "ledger.fleet",
    ),
    "ledger.execution": (
        "ledger.units",
        "ledger.hardware",
        "ledger.evidence",
        "ledger.outputs",
        "ledger.sandbox",
        "ledger.remote",
        "ledger.identity",
        "ledger.qualification",
        "ledger.importers",
        "ledger.plans",
        "ledger.write",
        # A PR's baseline reuses a base receipt only where its signer stands.
        "ledger.transparency",
        "runners",
        "ledger.fleet",
        "ledger.conformance",
        # The ledger opened once (`read/handle.py`): its recorder writes, its reader asks
        # for the fleet and the base's evidence.
        "ledger.read",
    ),
    # The surfaces may import any room below them; the server runs no claim (no
    # orchestration, no torch).
    "ledger.service": tuple(
        r for layer in LAYERS[:-3] for r in layer if r not in ("runners", "ledger.execution")
    ),
    "ledger.cli": tuple(r for layer in LAYERS[:-2] for r in layer),
    "ledger.__main__": ("ledger.cli",),
}

# Who may import the read side: the surfaces, and orchestration, which reads the fleet
# and the base's receipts through the ledger it records into.
READERS = ("ledger.cli", "ledger.service", "ledger.execution")


def _under(module: str, prefixes: Collection[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def room_of(module: str) -> str:
    """The room a module lives in: `runners` for all of runners/, `ledger` for the
    package's `__init__` alone, `ledger.X` for everything under `ledger/X`."""
    parts = module.split(".")
    return parts[0] if len(parts) == 1 or parts[0] == "runners" else ".".join(parts[:2])


def _layer(room: str, layers: Sequence[Sequence[str]] = LAYERS) -> int:
    return next(i for i, layer in enumerate(layers) if room in layer)


def wrong_arrows(
    graph: dict[str, set[str]],
    may: dict[str, tuple[str, ...]] = MAY_IMPORT,
    layers: Sequence[Sequence[str]] = LAYERS,
    room: Callable[[str], str] = room_of,
) -> list[str]:
    """Every arrow that leaves its room for a room its room may not import, each named
    with both rooms and why: one beside or above it, or below it but not listed.
    ``room`` says which room a module lives in (runners/'s rooms are read by their own
    rule, tests/runners/test_architecture.py)."""
    out = []
    for module in sorted(graph):
        here = room(module)
        for target in sorted(graph[module]):
            there = room(target)
            if there == here:
                continue
            if here not in may or there not in may:
                unknown = here if here not in may else there
                out.append(f"{module} -> {target}: room {unknown} has no place in the layers")
            elif _layer(there, layers) >= _layer(here, layers):
                side = "beside" if _layer(there, layers) == _layer(here, layers) else "above"
                out.append(f"{module} -> {target}: {here} imports {there}, a room {side} it")
            elif there not in may[here]:
                out.append(f"{module} -> {target}: {here} may not import {there}")
    return out


def test_every_room_has_one_place_and_a_rule() -> None:
    rooms = {room_of(m) for m in _modules()}
    placed = [r for layer in LAYERS for r in layer]
    assert len(placed) == len(set(placed)), "a room in two layers"
    assert rooms == set(placed) == set(MAY_IMPORT), (
        f"rooms without a place: {sorted(rooms - set(placed))}; "
        f"placed rooms that are not there: {sorted(set(placed) - rooms)}; "
        f"without a rule: {sorted(rooms ^ set(MAY_IMPORT))}"
    )
    # Every package under ledger/ is a room (migrations: Alembic's scripts, by path).
    folders = {
        f"ledger.{p.name}"
        for p in (ROOT / "ledger").iterdir()
        if p.is_dir() and p.name != "__pycache__"
    }
    assert folders <= rooms


def test_the_architecture_names_every_room_in_its_table_and_its_layer() -> None:
    """docs/architecture.md has a row for every room and says where each one stands."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    order = text[text.index("## Who may import whom") : text.index("## Modules over")]
    for room in (r for layer in LAYERS for r in layer):
        if room in ("ledger", "ledger.__main__", "runners"):
            continue
        folder = room.removeprefix("ledger.") + "/"
        assert any(f"`{folder}" in row for row in rows), f"no row for {folder}"
        assert f"**`{folder}`**" in order, f"{folder} has no place in the layers"


def test_every_package_appears_in_the_architecture_and_the_readme_layout() -> None:
    """Each package of ledger/ and runners/ has its row in docs/architecture.md's tables,
    and README's Layout names each room of ledger/: a new package is documented where a
    newcomer looks first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = " ".join(line for line in text.splitlines() if line.startswith("| `"))
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    layout = layout[: layout.index("\n## ")]
    for pkg in PACKAGES:
        for init in sorted((ROOT / pkg).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / pkg).as_posix()
            if rel == "." or "__pycache__" in rel:
                continue
            # A package inside a room is named in its room's row (`web/` in `service/`'s).
            name = rel.rsplit("/", 1)[-1] + "/"
            assert f"`{rel}/" in rows or f"`{name}" in rows, f"no row names {pkg}/{rel}/"
            if pkg == "ledger" and "/" not in rel:
                assert f"{rel}/" in layout, f"README's Layout does not name ledger/{rel}/"


def test_each_room_may_import_only_rooms_below_it() -> None:
    """The rules follow the layer order: no entry names a room beside or above."""
    wrong = [
        f"{room} -> {other}"
        for room, allowed in MAY_IMPORT.items()
        for other in allowed
        if _layer(other) >= _layer(room)
    ]
    assert not wrong, "rules that climb: " + "; ".join(wrong)


def test_the_room_rule_reads_as_meant() -> None:
    assert room_of("ledger") == "ledger" and room_of("ledger.__main__") == "ledger.__main__"
    assert room_of("ledger.write.record") == "ledger.write"
    assert room_of("runners.checks.arms") == "runners"
    graph = {
        "ledger.write.record": {"ledger.write.ingest", "ledger.store.store", "ledger"},
        "ledger.read.query": {"ledger.qualification.history"},
        "ledger.evidence.statement": {"ledger"},
    }
    assert wrong_arrows(graph) == []
    assert wrong_arrows({"ledger.evidence.statement": {"ledger.write.journal"}}) == [
        "ledger.evidence.statement -> ledger.write.journal: ledger.evidence imports "
        "ledger.write, a room above it"
    ]
    assert wrong_arrows({"ledger.read.query": {"ledger.execution.said"}}) == [
        "ledger.read.query -> ledger.execution.said: ledger.read imports "
        "ledger.execution, a room above it"
    ]
    assert wrong_arrows({"ledger.fleet.quarantine": {"ledger.read.reader"}}) == [
        "ledger.fleet.quarantine -> ledger.read.reader: ledger.fleet imports "
        "ledger.read, a room above it"
    ]
    # Below, but not listed: the read side never imports the sandbox.
    assert wrong_arrows({"ledger.read.query": {"ledger.sandbox.launcher"}}) == [
        "ledger.read.query -> ledger.sandbox.launcher: ledger.read may not import ledger.sandbox"
    ]
    assert wrong_arrows({"ledger.attic.x": {"ledger.evidence.errors"}}) == [
        "ledger.attic.x -> ledger.evidence.errors: room ledger.attic has no place in the layers"
    ]


def test_a_planted_upward_import_in_any_room_fails() -> None:
    """The real graph, with one arrow planted per room to a module of the room just
    above its layer (and, in a layer of several, to a room beside it): the rule
    names each planted arrow, and nothing else."""
    graph = import_graph()
    modules = sorted(graph)
    first = {room_of(m): m for m in reversed(modules)}  # each room's first module
    for i, layer in enumerate(LAYERS[:-1]):
        for room in layer:
            targets = [first[LAYERS[i + 1][0]], *(first[r] for r in layer if r != room)]
            for target in targets:
                planted = {m: set(d) for m, d in graph.items()}
                planted[first[room]].add(target)
                found = wrong_arrows(planted)
                assert len(found) == 1, (room, target, found)
                assert found[0].startswith(f"{first[room]} -> {target}: {room} imports "), found
    assert set(first) == {r for layer in LAYERS for r in layer}


def test_each_room_imports_only_the_rooms_below_it() -> None:
    wrong = wrong_arrows(import_graph())
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


# The rooms whose `__init__` must stay closed (imports none of their modules) whatever
# else changes: those `ledger verify FILE` and every command pass through. Every room's
# face, closed or not, is held to docs/architecture.md's "Faces" by
# tests/ledger/test_architecture_docs.py.
LIGHT = (
    "ledger.evidence",
    "ledger.identity",
    "ledger.remote",
    "ledger.write",
    "ledger.read",
    "ledger.transparency",
    "ledger.units",
    "ledger.hardware",
)


def test_a_room_imports_none_of_its_modules_when_imported() -> None:
    """`import ledger.evidence` (and the other rooms) loads nothing: each module is
    imported where it is used, so `ledger verify FILE` pays for what it needs."""
    for room in LIGHT:
        init = ROOT / room.replace(".", "/") / "__init__.py"
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{room} says what belongs there"
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not imports, f"{room}/__init__.py imports at import time"
