"""Inside `runners/`, rooms in layers: none imports a room beside it or above it.

`tests/ledger/test_architecture.py` holds `runners/` as one room of the house (what
it may import of `ledger/`, and who in `ledger/` may import it); this test holds the
rooms inside it with the same machinery, read from the source with `ast` (every
import counts: module level, in a function, under `TYPE_CHECKING`): a layer order,
each room's arrows out, a planted import into a room beside or above caught, no
circle. It also holds what `ledger/` imports of `runners/`, room by room.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.ledger.test_architecture import ROOT, _layer, circles, import_graph, wrong_arrows
from tests.ledger.test_architecture_docs import _LAZY, _TYPES, _imports, _names_runners

# Bottom first (docs/architecture.md, "`runners/`"). A room is a package under
# `runners/` (`runners.X` and all below it), with three more: `runners` names the
# package's own `__init__`, `runners.protocol` and `runners.api` its two faces.
LAYERS: tuple[tuple[str, ...], ...] = (
    # Nothing below: the package itself (a workload loader may import it again).
    ("runners",),
    # What every part shares, torch-free (results, names, the child's environment,
    # the claim request, the fork client's command line), and a workload's face.
    ("runners.contract", "runners.protocol"),
    # What runs a check (probes, proofs, processes, a rank's process group); the
    # workloads shipped with the runners.
    ("runners.harness", "runners.workloads"),
    # The routes for capabilities a workload does not implement itself.
    ("runners.adapt",),
    # The checks.
    ("runners.checks",),
    # What the ledger calls in this process: one claim's check, a step's profile,
    # the doctor's probe.
    ("runners.api", "runners.profile", "runners.doctor"),
    # The claim process's own entry point: one rank, from its request to its results.
    ("runners.rank",),
    # The fork server, which imports every room below before it forks a claim process.
    ("runners.fork",),
    # The claim's parent side: launch (afresh or forked), wait, read, stamp.
    ("runners.claim",),
)

# Each room's arrows out, every one of them in a layer below its own.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "runners": (),
    # `childenv` puts this installation first on the child's path.
    "runners.contract": ("runners",),
    "runners.protocol": (),
    # A rank's process group agrees on the admission decision (`distributed.py`).
    "runners.harness": ("runners.contract", "runners.protocol"),
    "runners.workloads": ("runners.protocol",),
    "runners.adapt": (
        "runners.contract",
        "runners.protocol",
        "runners.harness",
        "runners.workloads",
    ),
    "runners.checks": (
        "runners.contract",
        "runners.protocol",
        "runners.harness",
        "runners.workloads",
        "runners.adapt",
    ),
    "runners.api": ("runners.contract", "runners.harness", "runners.checks"),
    "runners.profile": (
        "runners.contract",
        "runners.protocol",
        "runners.harness",
        "runners.workloads",
        "runners.checks",
    ),
    "runners.doctor": (
        "runners.contract",
        "runners.protocol",
        "runners.harness",
        "runners.workloads",
        "runners.adapt",
        "runners.checks",
    ),
    "runners.rank": ("runners.contract", "runners.harness", "runners.api"),
    # Preloads the rooms a claim process runs, so a fork pays no import.
    "runners.fork": (
        "runners.contract",
        "runners.harness",
        "runners.workloads",
        "runners.api",
        "runners.rank",
    ),
    # `authors` digests the installed package; `claim_exit` reads the cleanup check's
    # verdict of a claim that died; `isolated` names `rank` as the child's module.
    "runners.claim": (
        "runners",
        "runners.contract",
        "runners.harness",
        "runners.checks",
        "runners.rank",
        "runners.fork",
    ),
}

# What each room of `ledger/` may import of `runners/` (held with `runners` as one room
# by tests/ledger/test_architecture.py): the contract to read results and build
# requests, the fork server's parent-side handles, the parent's claim, the faces.
LEDGER_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "ledger.fleet": ("runners.contract",),
    "ledger.conformance": ("runners.contract", "runners.fork"),
    "ledger.execution": ("runners.contract", "runners.api", "runners.fork", "runners.claim"),
    "ledger.cli": ("runners.protocol", "runners.api", "runners.profile"),
}

# What `ledger/` may import of `runners/` when a module is imported or for types alone:
# torch-free, so `ledger` imports without torch (the contract, and the fork server's
# handles that the parent holds before it imports torch).
LEDGER_TYPES = ("runners.contract", "runners.fork.forkparent", "runners.fork.forkready")


def room_of(module: str) -> str:
    """The room a module of `runners/` lives in: `runners` for the package's `__init__`,
    `runners.X` for `runners/X.py` and everything under `runners/X/`."""
    return ".".join(module.split(".")[:2])


def runners_graph() -> dict[str, set[str]]:
    """module -> the modules of `runners/` it imports, for each module of `runners/`."""
    return {
        m: {d for d in deps if d.split(".")[0] == "runners"}
        for m, deps in import_graph().items()
        if m.split(".")[0] == "runners"
    }


def _wrong(graph: dict[str, set[str]]) -> list[str]:
    return wrong_arrows(graph, MAY_IMPORT, LAYERS, room_of)


def test_every_room_of_runners_has_one_place_and_a_rule() -> None:
    rooms = {room_of(m) for m in runners_graph()}
    placed = [r for layer in LAYERS for r in layer]
    assert len(placed) == len(set(placed)), "a room in two layers"
    assert rooms == set(placed) == set(MAY_IMPORT), (
        f"rooms without a place: {sorted(rooms - set(placed))}; "
        f"placed rooms that are not there: {sorted(set(placed) - rooms)}; "
        f"without a rule: {sorted(rooms ^ set(MAY_IMPORT))}"
    )
    # Every package under runners/ is a room.
    folders = {
        f"runners.{p.name}"
        for p in (ROOT / "runners").iterdir()
        if p.is_dir() and p.name != "__pycache__"
    }
    assert folders <= rooms


def test_each_room_of_runners_may_import_only_rooms_below_it() -> None:
    wrong = [
        f"{room} -> {other}"
        for room, allowed in MAY_IMPORT.items()
        for other in allowed
        if _layer(other, LAYERS) >= _layer(room, LAYERS)
    ]
    assert not wrong, "rules that climb: " + "; ".join(wrong)


def test_the_room_rule_of_runners_reads_as_meant() -> None:
    assert room_of("runners") == "runners" and room_of("runners.api") == "runners.api"
    assert room_of("runners.claim.isolated") == "runners.claim"
    assert room_of("runners.rank.__main__") == "runners.rank"
    fine = {
        "runners.claim.isolated": {"runners.rank.serve", "runners.fork.forkparent"},
        "runners.checks.arms": {"runners.contract.forkwire", "runners.harness.child"},
    }
    assert _wrong(fine) == []
    # The loop the rooms once made: the fork server imported the parent's module, the
    # parent's exit verdicts a check, the checks the fork server's handles.
    assert _wrong({"runners.fork.forkimports": {"runners.claim.isolated"}}) == [
        "runners.fork.forkimports -> runners.claim.isolated: runners.fork imports "
        "runners.claim, a room above it"
    ]
    assert _wrong({"runners.checks.arms": {"runners.fork.forkparent"}}) == [
        "runners.checks.arms -> runners.fork.forkparent: runners.checks imports "
        "runners.fork, a room above it"
    ]
    assert _wrong({"runners.harness.launch": {"runners.workloads.moe"}}) == [
        "runners.harness.launch -> runners.workloads.moe: runners.harness imports "
        "runners.workloads, a room beside it"
    ]
    # Below, but not listed: the contract imports nothing that runs a claim.
    assert _wrong({"runners.rank.serve": {"runners.workloads.loader"}}) == [
        "runners.rank.serve -> runners.workloads.loader: runners.rank may not import "
        "runners.workloads"
    ]


def test_a_planted_upward_import_in_any_room_of_runners_fails() -> None:
    """The real graph, with one arrow planted per room to a module of the room just
    above its layer (and, in a layer of several, to a room beside it): the rule names
    each planted arrow, and nothing else."""
    graph = runners_graph()
    first = {room_of(m): m for m in reversed(sorted(graph))}  # each room's first module
    assert set(first) == {r for layer in LAYERS for r in layer}
    planted_count = 0
    for i, layer in enumerate(LAYERS[:-1]):
        for room in layer:
            targets = [first[LAYERS[i + 1][0]], *(first[r] for r in layer if r != room)]
            for target in targets:
                planted = {m: set(d) for m, d in graph.items()}
                planted[first[room]].add(target)
                found = _wrong(planted)
                assert len(found) == 1, (room, target, found)
                assert found[0].startswith(f"{first[room]} -> {target}: {room} imports "), found
                planted_count += 1
    assert planted_count >= len(MAY_IMPORT) - 1


def test_inside_runners_no_loop_and_no_import_up() -> None:
    """0 circles between the modules of runners/, 0 between its rooms, 0 arrows to a
    room beside or above."""
    graph = runners_graph()
    rooms: dict[str, set[str]] = {}
    for m, deps in graph.items():
        rooms.setdefault(room_of(m), set()).update(
            room_of(d) for d in deps if room_of(d) != room_of(m)
        )
    loops = circles(graph) + circles(rooms)
    wrong = _wrong(graph)
    assert (len(loops), len(wrong)) == (0, 0), (
        "loops: " + "; ".join(" -> ".join(c) for c in loops) + " | up: " + "; ".join(wrong)
    )


def _ledger_imports() -> list[tuple[str, str, str]]:
    """(ledger room, runners module, when) for each import of runners in ledger/."""
    out = []
    for path in sorted((ROOT / "ledger").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        room = ".".join(parts[:2]) if len(parts) > 2 else parts[0]
        for node, when in _imports(ast.parse(path.read_text())):
            if not _names_runners(node):
                continue
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names if a.name.split(".")[0] == "runners"]
            )
            out.extend((room, name, when) for name in names)
    return out


def test_ledger_imports_of_runners_name_their_rooms() -> None:
    """Each room of ledger/ imports only the rooms of runners/ it is listed for, and
    what it imports for types alone or when imported is torch-free: the results and
    the request from the contract (never from the claim's parent side)."""
    wrong = []
    for room, name, when in _ledger_imports():
        allowed = LEDGER_MAY_IMPORT.get(room, ())
        if room_of(name) not in allowed:
            wrong.append(f"{room} imports {name} ({when}): not among {allowed}")
        if when != _LAZY and not any(name == t or name.startswith(t + ".") for t in LEDGER_TYPES):
            wrong.append(f"{room} imports {name} {when}: not torch-free ({LEDGER_TYPES})")
    assert not wrong, "; ".join(wrong)
    typed = {name for _, name, when in _ledger_imports() if when == _TYPES}
    assert {"runners.contract.result", "runners.contract.request"} <= typed


def test_the_contract_and_the_fork_handles_import_no_torch() -> None:
    """What the ledger imports of runners/ before torch loads none."""
    modules = [
        "runners.contract.result",
        "runners.contract.names",
        "runners.contract.childenv",
        "runners.contract.request",
        "runners.contract.forkwire",
        "runners.fork.forkparent",
        "runners.fork.forkready",
    ]
    code = (
        f"import sys\nfor m in {modules!r}:\n    __import__(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_estimator_reaches_only_the_protocol() -> None:
    """`runners.workloads.estimator`, which a workload imports, reaches no room of
    runners/ but the protocol: importing it loads no harness, check or claim."""
    graph = runners_graph()
    seen, todo = set(), ["runners.workloads.estimator"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    assert seen == {"runners.workloads.estimator", "runners.protocol"}, sorted(seen)
    code = (
        "import sys, runners.workloads.estimator\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'runners'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(
        ["runners", "runners.protocol", "runners.workloads", "runners.workloads.estimator"]
    ), out.stdout


def _documented_layers() -> list[set[str]]:
    """The numbered list of docs/architecture.md's "`runners/`": each item's rooms (its
    bold names: `runners`, `room/`, `face.py`)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    body = text[text.index("\n## `runners/`\n") :]
    body = body[: body.index("\n## ", 1)]
    items = re.split(r"\n(?=\d+\. )", body)
    return [
        {
            "runners" if w == "runners" else "runners." + w.removesuffix("/").removesuffix(".py")
            for w in re.findall(r"\*\*`([^`]+)`\*\*", item)
        }
        for item in items
        if re.match(r"\d+\. ", item)
    ]


def test_the_documented_layers_of_runners_are_the_ones_the_test_holds() -> None:
    assert _documented_layers() == [set(layer) for layer in LAYERS]


def test_the_tests_of_runners_sit_in_the_rooms_they_test() -> None:
    """tests/runners/ mirrors runners/'s rooms, as tests/ledger/ mirrors ledger/'s: each
    folder names a room, and beside them only the shared fixtures and this test."""
    here = ROOT / "tests" / "runners"
    loose = sorted(
        p.name
        for p in here.glob("*.py")
        if p.name not in ("__init__.py", "conftest.py", "test_architecture.py")
    )
    assert not loose, f"move each into the folder of the room it tests: {loose}"
    rooms = {r.removeprefix("runners.") for layer in LAYERS for r in layer}
    folders = {p.name for p in here.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= rooms, sorted(folders - rooms)
    assert all((here / f / "__init__.py").is_file() for f in folders)
