"""`ledger import in-toto`: a test result counts only when it is about this revision;
`.intoto.jsonl` bundles line by line; Sigstore bundles, verified when a key is trusted."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import git
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ledger.evidence.dsse import pae
from tests.ledger.helpers import run
from tests.ledger.importers.test_import import _import, ready  # noqa: F401  (fixture)

CLAIM = "release.tests"
REMOTE = "https://github.com/acme/trainer.git"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _stmt(subject: list[dict[str, Any]], result: str = "PASSED") -> dict[str, Any]:
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subject,
        "predicateType": "https://in-toto.io/attestation/test-result/v0.1",
        "predicate": {
            "result": result,
            "configuration": [{"name": "ci.yaml", "digest": {"sha256": "cd" * 32}}],
            "passedTests": ["t.a", "t.b"],
            "warnedTests": [],
            "failedTests": [],
        },
    }


def _envelope(
    stmt: dict[str, Any], key: ec.EllipticCurvePrivateKey | None = None
) -> dict[str, Any]:
    payload = json.dumps(stmt).encode()
    sigs = []
    if key is not None:
        sig = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        sigs.append({"keyid": "", "sig": base64.b64encode(sig).decode()})
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": sigs,
    }


def _entries(capsys: pytest.CaptureFixture[str], repo: git.Repo) -> int:
    h = run(capsys, "history", "--rev", "main", "--repo", str(repo.working_tree_dir), "--json")
    return len(json.loads(h.out)["entries"])


def _refused(capsys: pytest.CaptureFixture[str], repo: git.Repo, path: Path, *extra: str) -> str:
    """The import is refused: exit 1, no receipt id, nothing written."""
    before = _entries(capsys, repo)
    r = run(
        capsys,
        "import",
        "in-toto",
        str(path),
        "--claim",
        CLAIM,
        "--rev",
        "main",
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        "runner",
        *extra,
    )
    assert r.code == 1 and r.out == "", r.err
    assert _entries(capsys, repo) == before
    return r.err


@pytest.fixture
def named(ready: git.Repo) -> git.Repo:  # noqa: F811
    """The repository with a remote: its id is github.com/acme/trainer."""
    ready.create_remote("origin", REMOTE)
    return ready


def test_a_result_about_another_projects_commit_is_refused_with_both_names(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "9f" * 20
    f = tmp_path / "other.json"
    f.write_text(
        json.dumps(
            _stmt(
                [
                    {
                        "uri": "git+https://github.com/other/proj@refs/heads/main",
                        "digest": {"gitCommit": other},
                    }
                ]
            )
        )
    )
    err = _refused(capsys, named, f)
    assert "github.com/other/proj" in err and "github.com/acme/trainer" in err
    assert other[:12] in err and named.head.commit.hexsha[:12] in err
    # This commit's digest, but another repository's URI: still another project.
    f.write_text(
        json.dumps(
            _stmt(
                [
                    {
                        "uri": "git+https://github.com/other/proj",
                        "digest": {"gitCommit": named.head.commit.hexsha},
                    }
                ]
            )
        )
    )
    assert "github.com/other/proj" in _refused(capsys, named, f)
    # A subject that names an artifact, not the revision.
    f.write_text(json.dumps(_stmt([{"name": "model.tar", "digest": {"sha256": "ab" * 32}}])))
    assert "model.tar" in _refused(capsys, named, f)


def test_a_result_about_this_commit_or_tree_is_imported(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = named.head.commit
    f = tmp_path / "ok.json"
    uri = "git+https://github.com/acme/trainer@refs/heads/main"
    f.write_text(json.dumps(_stmt([{"uri": uri, "digest": {"gitCommit": head.hexsha}}])))
    [p] = _import(capsys, named, "in-toto", f, CLAIM)
    assert p["outcome"] == "passed" and p["measurements"]["signature_verified"] is None
    f.write_text(json.dumps(_stmt([{"name": "src", "digest": {"gitTree": head.tree.hexsha}}])))
    [p] = _import(capsys, named, "in-toto", f, CLAIM)
    assert p["outcome"] == "passed"


def test_an_intoto_jsonl_bundle_imports_line_by_line(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subject = [{"name": "trainer", "digest": {"gitCommit": named.head.commit.hexsha}}]
    provenance = {**_stmt(subject), "predicateType": "https://slsa.dev/provenance/v1"}
    provenance["predicate"] = {"buildDefinition": {}}
    bundle = tmp_path / "attestations.intoto.jsonl"
    bundle.write_text(
        json.dumps(_envelope(provenance))
        + "\n"
        + json.dumps(_envelope(_stmt(subject, "FAILED")))
        + "\n"
    )
    [p] = _import(capsys, named, "in-toto", bundle, CLAIM)
    assert p["outcome"] == "failed" and p["measurements"]["statements"] == 1
    assert p["measurements"]["other_predicate_lines"] == [
        "attestations.intoto.jsonl:1: https://slsa.dev/provenance/v1"
    ]
    assert p["measurements"]["container"] == ["dsse"]


def test_a_sigstore_bundle_is_verified_when_a_key_is_trusted(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [{"name": "trainer", "digest": {"gitCommit": named.head.commit.hexsha}}]
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "ci-key"}, "tlogEntries": []},
        "dsseEnvelope": _envelope(_stmt(subject), key),
    }
    f = tmp_path / "result.sigstore.json"
    f.write_text(json.dumps(bundle))
    [p] = _import(capsys, named, "in-toto", f, CLAIM)
    assert p["measurements"]["container"] == ["sigstore-bundle"]
    assert p["measurements"]["signature_verified"] is False  # no key trusted: said so
    pem = tmp_path / "ci.pub"
    pem.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    [p] = _import(capsys, named, "in-toto", f, CLAIM, extra=("--trusted-key", str(pem)))
    assert p["measurements"]["signature_verified"] is True and p["outcome"] == "passed"


def test_a_sigstore_bundle_that_does_not_verify_is_refused(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    signer, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    subject = [{"name": "trainer", "digest": {"gitCommit": named.head.commit.hexsha}}]
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "dsseEnvelope": _envelope(_stmt(subject), signer),
    }
    f = tmp_path / "result.sigstore.json"
    f.write_text(json.dumps(bundle))
    pem = tmp_path / "other.pub"
    pem.write_bytes(
        other.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    assert "no signature verifies" in _refused(capsys, named, f, "--trusted-key", str(pem))


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None = None,
    san: str | None = None,
) -> x509.Certificate:
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = (
        (x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]), issuer[1])
        if issuer
        else (name, key)
    )
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(minutes=10))
    )
    if san:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(san)]), critical=False
        )
    return b.sign(issuer_key, hashes.SHA256())


def test_a_sigstore_bundle_is_verified_up_to_a_trusted_root(
    named: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    root = _cert("test root", root_key)
    who = "https://github.com/acme/trainer/.github/workflows/ci.yml@refs/heads/main"
    leaf = _cert("sigstore", leaf_key, ("test root", root_key), san=who)
    subject = [{"name": "trainer", "digest": {"gitCommit": named.head.commit.hexsha}}]
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "certificate": {
                "rawBytes": base64.b64encode(leaf.public_bytes(serialization.Encoding.DER)).decode()
            },
            "tlogEntries": [],
        },
        "dsseEnvelope": _envelope(_stmt(subject), leaf_key),
    }
    f = tmp_path / "keyless.sigstore.json"
    f.write_text(json.dumps(bundle))
    pem = tmp_path / "root.pem"
    pem.write_bytes(root.public_bytes(serialization.Encoding.PEM))
    [p] = _import(capsys, named, "in-toto", f, CLAIM, extra=("--trusted-root", str(pem)))
    assert p["measurements"]["signature_verified"] is True
    assert p["measurements"]["signer_identity"] == [who]
    # The same root as a Sigstore trusted_root.json.
    der = base64.b64encode(root.public_bytes(serialization.Encoding.DER)).decode()
    trusted_root = tmp_path / "trusted_root.json"
    trusted_root.write_text(
        json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
                "certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": der}]}}],
            }
        )
    )
    [p] = _import(capsys, named, "in-toto", f, CLAIM, extra=("--trusted-root", str(trusted_root)))
    assert p["measurements"]["signature_verified"] is True
    other = tmp_path / "other-root.pem"
    other_root = _cert("test root", ec.generate_private_key(ec.SECP256R1()))
    other.write_bytes(other_root.public_bytes(serialization.Encoding.PEM))
    err = _refused(capsys, named, f, "--trusted-root", str(other))
    assert "does not chain to the trusted root" in err
