"""The workload definition as a part of the package identity: what it covers (and what
not), the ready adapters' versions read without torch, and plans naming no definition,
whose package digest stays byte for byte what it always was."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import git

from ledger.plans.governing import identify
from ledger.qualification.adapters import READY_ADAPTERS, UNRECORDED, unrecorded_version
from ledger.qualification.plan import parse_plan
from ledger.qualification.workload_source import (
    definition_changes,
    definition_digest,
    names_definition,
)
from tests.conftest import commit_file

ROOT = Path(__file__).resolve().parents[3]

CLAIMS = """
[[claims]]
name = "adm"
check = "admission"
carry_over = "package"
cleanup = false

[[claims]]
name = "reg"
check = "regression-24view"
carry_over = "package"
cleanup = false
"""
PACKAGE = '\n[package]\npaths = ["model/**"]\n'
ADAPTER = 'workload = "runners.adapt.library:causal_lm"\n'


def _files_digest(commit: git.Commit) -> str:
    """The package digest as every earlier release computed it, spelled out here: sha256
    over the canonical JSON of the sorted [path, blob id] pairs."""
    pairs = sorted(
        [str(b.path), b.hexsha]
        for b in commit.tree.traverse()
        if isinstance(b, git.Blob) and str(b.path).startswith("model/")
    )
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()


def test_a_plan_naming_no_definition_keeps_its_package_digest_byte_for_byte(
    repo: git.Repo,
) -> None:
    # preload only speeds imports: a plan naming only it names no definition.
    plan = 'preload = ["json"]\n' + PACKAGE + CLAIMS
    commit_file(repo, "qualification.toml", plan, "plan")
    assert not names_definition(parse_plan(plan))
    ident = identify(repo, rev="HEAD")
    r = ident.revision
    assert r.package_digest == _files_digest(repo.head.commit)
    assert r.package_parts == () and r.prior_package_digest is None and r.definition is None
    assert ident.definitions is not None and ident.definitions.digest is None
    assert r.source().model_dump(mode="json")["package"] == {
        "paths": ["model/**"],
        "digest": _files_digest(repo.head.commit),
    }


def test_a_plan_naming_a_definition_adds_it_as_a_part(repo: git.Repo) -> None:
    commit_file(repo, "qualification.toml", ADAPTER + PACKAGE + CLAIMS, "plan")
    r = identify(repo, rev="HEAD").revision
    parts = dict(r.package_parts)
    assert parts["files"] == r.prior_package_digest == _files_digest(repo.head.commit)
    assert (
        parts["workload"]
        == r.definition
        == definition_digest(parse_plan(ADAPTER + PACKAGE + CLAIMS))
    )
    assert r.package_digest not in (None, parts["files"])


def test_the_definition_covers_what_changes_the_computation_and_nothing_else() -> None:
    claims = CLAIMS.replace('"package"', '"tree"')
    params = '{ dtype = "float32", config = { n_embd = 64 } }'
    base = ADAPTER + f"workload_params = {params}\n" + claims
    digest = definition_digest(parse_plan(base))
    # Resolved claim by claim: the same parameters said per claim are the same definition.
    per_claim = ADAPTER + claims.replace(
        '"\ncarry_over', f'"\nworkload_params = {params}\ncarry_over'
    )
    assert per_claim.count("workload_params") == 2
    assert definition_digest(parse_plan(per_claim)) == digest
    assert definition_digest(parse_plan('preload = ["peft"]\n' + base)) == digest
    changed = {
        "a parameter": base.replace("n_embd = 64", "n_embd = 256"),
        "the dtype": base.replace('"float32"', '"bfloat16"'),
        "the estimator": base.replace('dtype = "float32"', 'dtype = "float32", estimator = "m:e"'),
        "a profile": base + "\n[profiles.big]\nworkload_params = { config = { n_embd = 512 } }\n",
        "a claim's entry point": base.replace(
            'name = "reg"\n', 'name = "reg"\nworkload = "runners.adapt.library:module"\n'
        ),
    }
    for what, text in changed.items():
        assert definition_digest(parse_plan(text)) != digest, what
    lines = definition_changes(parse_plan(base), parse_plan(changed["a profile"]))
    assert lines == ["profile big: added"]
    lines = definition_changes(parse_plan(base), parse_plan(changed["a parameter"]))
    assert lines == ["workload_params.config.n_embd: 64 -> 256"]  # said once, not per claim
    # The adapter's version is part of it: a receipt recorded before versions were named
    # ran the adapter as it was then.
    was = definition_changes(parse_plan(base), parse_plan(base), unrecorded_version)
    assert was == ['adapter runners.adapt.library:causal_lm: version "1" -> "3"']


def test_every_ready_adapter_has_a_version_read_without_torch() -> None:
    library = ROOT / "runners" / "adapt" / "library.py"
    defs = {n.name for n in ast.parse(library.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert set(READY_ADAPTERS) == {
        "runners.adapt.library:causal_lm",
        "runners.adapt.library:module",
    }
    for ref, version in READY_ADAPTERS.items():
        module, attr = ref.split(":")
        assert module == "runners.adapt.library" and attr in defs
        # Bumped for no-grad views in evaluation mode, then for the built-in estimator.
        assert version == "3" != UNRECORDED
    code = (
        "import sys, ledger.plans.definition, ledger.read.query\n"
        "assert not [m for m in sys.modules if m == 'torch' or m.startswith('runners')], "
        "sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
