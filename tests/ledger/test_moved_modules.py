"""The modules that moved into packages still import under their old names, for a
deprecation period: the very same module object, with one DeprecationWarning."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ledger

ROOT = Path(__file__).resolve().parents[2]

# Every old name imported in a fresh interpreter, each in the three ways code
# imports a module; what each import warned, and which module it returned.
PROBE = """
import importlib, json, sys, warnings
import ledger
if len(sys.argv) > 1:
    ledger._MOVED.update(json.loads(sys.argv[1]))
out = {}
for name, package in sorted(ledger._MOVED.items()):
    old, new = f"ledger.{name}", f"ledger.{package}.{name}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = importlib.import_module(old)
        scope = {}
        exec(f"import {old} as by_import\\nfrom ledger import {name} as by_from", scope)
    out[name] = {
        "same": sys.modules[old] is sys.modules[new] is first
        and scope["by_import"] is first and scope["by_from"] is first,
        "name": first.__name__,
        "warned": [
            [w.category.__name__, str(w.message), w.filename] for w in caught
        ],
    }
print(json.dumps(out))
"""


def _probe(extra: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    args = [json.dumps(extra)] if extra else []
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    found: dict[str, dict[str, object]] = json.loads(done.stdout)
    return found


def _check(found: dict[str, dict[str, object]], moved: dict[str, str]) -> None:
    assert sorted(found) == sorted(moved)
    for name, package in moved.items():
        new = f"ledger.{package}.{name}"
        got = found[name]
        assert got["same"], name
        assert got["name"] == new
        # Warned once, at the first import, naming the new path and the importing code.
        assert got["warned"] == [
            [
                "DeprecationWarning",
                f"ledger.{name} moved to {new}; import it from there",
                "<string>",
            ]
        ]


def test_every_moved_module_imports_under_its_old_name_as_itself() -> None:
    _check(_probe(), ledger._MOVED)


def test_the_finder_makes_an_old_name_the_new_module() -> None:
    """The mechanism, whatever the table holds: `ledger.fast` as `ledger.cli.fast`."""
    _check(_probe({"fast": "cli"}), {**ledger._MOVED, "fast": "cli"})


def test_no_moved_module_is_left_at_the_top_level() -> None:
    for name, package in ledger._MOVED.items():
        assert not (ROOT / "ledger" / f"{name}.py").exists(), name
        assert (ROOT / "ledger" / package / f"{name}.py").is_file(), name


def test_the_finder_leaves_every_other_name_alone() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ledger.no_such_module")
    for name in ("ledger.cli.fast", "ledger", "other.fast", "ledger.cli"):
        assert ledger._moved_to(name) is None


def test_python_dash_m_runs_a_moved_module_under_its_old_name() -> None:
    """`python -m ledger.<old>` runs the moved file (docs and habits name some)."""
    script = (
        "import importlib.util, ledger; ledger._MOVED['fast'] = 'cli'; "
        "spec = importlib.util.find_spec('ledger.fast'); "
        "code = spec.loader.get_code('ledger.fast'); "
        "print(spec.origin.endswith('ledger/cli/fast.py'), code.co_filename == spec.origin)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["True", "True"]


def test_importing_ledger_imports_nothing_new() -> None:
    """The finder costs `import ledger` nothing: no module beyond the package itself."""
    script = (
        "import sys; before = set(sys.modules); import ledger; "
        "print(sorted(set(sys.modules) - before))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "['ledger']"
