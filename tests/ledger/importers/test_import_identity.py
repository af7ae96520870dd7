"""A plan can require that imported in-toto/Sigstore evidence verify against a named
identity (`signer_identity`): a statement signed by another identity, verified only by a
key (no identity), or not verified at all never qualifies the claim."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import git
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import commit_file
from tests.ledger.helpers import run
from tests.ledger.importers.test_import import PLAN, _import, ready  # noqa: F401  (fixture)
from tests.ledger.importers.test_import_intoto import _cert, _envelope, _stmt

WHO = "https://github.com/acme/trainer/.github/workflows/release.yml@refs/heads/main"
OTHER = "https://github.com/mallory/fork/.github/workflows/release.yml@refs/heads/main"


def _bundle(repo: git.Repo, root: tuple[str, ec.EllipticCurvePrivateKey], san: str) -> Any:
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert("sigstore", leaf_key, root, san=san)
    subject = [{"name": "trainer", "digest": {"gitCommit": repo.commit("main").hexsha}}]
    return {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "certificate": {
                "rawBytes": base64.b64encode(leaf.public_bytes(serialization.Encoding.DER)).decode()
            },
            "tlogEntries": [],
        },
        "dsseEnvelope": _envelope(_stmt(subject), leaf_key),
    }


def test_a_plan_requires_imported_evidence_signed_by_a_named_identity(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = PLAN.replace(
        'name = "release.tests"\ncheck = "import-in-toto"\n',
        'name = "release.tests"\ncheck = "import-in-toto"\ncleanup = false\n'
        f'params = {{ signer_identity = "{WHO}" }}\n',
    )
    assert plan != PLAN
    commit_file(ready, "qualification.toml", plan, "require the release workflow's signature")
    root_key = ec.generate_private_key(ec.SECP256R1())
    root = _cert("test root", root_key)
    pem = tmp_path / "root.pem"
    pem.write_bytes(root.public_bytes(serialization.Encoding.PEM))
    trusted = ("--trusted-root", str(pem))
    files = {}
    for name, san in (("named", WHO), ("other", OTHER)):
        files[name] = tmp_path / f"{name}.sigstore.json"
        files[name].write_text(json.dumps(_bundle(ready, ("test root", root_key), san)))
    imports = [
        ("other", files["other"], trusted),
        ("unverified", files["named"], ()),  # the right identity, but nothing verified it
    ]
    for name, f, extra in imports:
        [p] = _import(capsys, ready, "in-toto", f, "release.tests", extra=extra)
        assert p["outcome"] == "inconclusive", (name, p)
        assert (
            "signer_identity" in p["reason"] and p["check"]["parameters"]["signer_identity"] == WHO
        )
        if name == "other":
            assert OTHER in p["reason"]
    assert _state(capsys, ready) != "qualified"
    [p] = _import(capsys, ready, "in-toto", files["named"], "release.tests", extra=trusted)
    assert p["outcome"] == "passed", p
    assert _state(capsys, ready) == "qualified", _reasons(capsys, ready)


def _state(capsys: pytest.CaptureFixture[str], repo: git.Repo) -> str:
    r = run(
        capsys, "status", "--rev", "main", "--repo", str(repo.working_tree_dir), "--json",
        "--claim", "release.tests",
    )  # fmt: skip
    return str(json.loads(r.out)["verdict"]["claims"][0]["state"])


def test_an_identity_must_be_a_string(
    ready: git.Repo,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = PLAN.replace(
        'name = "release.tests"\ncheck = "import-in-toto"\n',
        'name = "release.tests"\ncheck = "import-in-toto"\nparams = { signer_identity = 1 }\n',
    )
    commit_file(ready, "qualification.toml", plan, "a bad identity")
    f = tmp_path / "s.json"
    f.write_text("{}")
    r = run(
        capsys, "import", "in-toto", str(f), "--claim", "release.tests", "--rev", "main",
        "--repo", str(ready.working_tree_dir), "--key", "runner",
    )  # fmt: skip
    assert r.code == 1 and r.out == "" and "signer_identity must be a non-empty string" in r.err
    assert len(r.err.strip().splitlines()) == 1, r.err


def _reasons(capsys: pytest.CaptureFixture[str], repo: git.Repo) -> Any:
    r = run(
        capsys, "status", "--rev", "main", "--repo", str(repo.working_tree_dir), "--json",
        "--claim", "release.tests",
    )  # fmt: skip
    return [c["reasons"] for c in json.loads(r.out)["claims"]]
