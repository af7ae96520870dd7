"""No test imports a private alias: a module-level ``_name = other`` kept only so that
a test could import an old name. A test imports the real name, from where it lives;
an alias kept for tests alone is code no caller runs.

Read from the source with `ast`: every ``from ledger... import _x`` / ``from runners...
import _x`` in tests/ whose module binds ``_x`` by a bare assignment of another name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _aliases(path: Path) -> dict[str, str]:
    """Module-level ``_private = some.name`` bindings of ``path``, by the private name."""
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name) or not target.id.startswith("_"):
            continue
        if target.id.startswith("__"):
            continue
        if isinstance(node.value, ast.Name | ast.Attribute):
            out[target.id] = ast.unparse(node.value)
    return out


def private_alias_imports(tests: Path) -> Iterator[str]:
    """``file:line: module._name (alias of real)`` for each import of a private alias."""
    cache: dict[str, dict[str, str]] = {}
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in ("ledger", "runners"):
                continue
            if node.module not in cache:
                found = _module_file(node.module)
                cache[node.module] = _aliases(found) if found is not None else {}
            for a in node.names:
                real = cache[node.module].get(a.name)
                if real is not None:
                    where = path.relative_to(tests.parent)
                    yield f"{where}:{node.lineno}: {node.module}.{a.name} (alias of {real})"


def test_no_test_imports_a_private_alias() -> None:
    found = list(private_alias_imports(ROOT / "tests"))
    assert not found, "import the real name instead:\n" + "\n".join(found)


def test_the_finder_names_a_private_alias(tmp_path: Path) -> None:
    # The finder itself, on a planted import: a module of ledger that keeps an alias.
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "from ledger.execution.qualify import QualifyRun\n"
        "from ledger.execution.claimrun import _hidden\n"
    )
    assert list(private_alias_imports(tests)) == []
    module = ROOT / "ledger" / "execution" / "claimrun.py"
    assert "_hidden" not in _aliases(module)
    planted = tmp_path / "planted.py"
    planted.write_text("from x import y\n_hidden = y\n_also = y.z\n__all__ = []\n_n = 1\n")
    assert _aliases(planted) == {"_hidden": "y", "_also": "y.z"}
