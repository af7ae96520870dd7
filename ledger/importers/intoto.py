"""in-toto test-result predicates (``https://in-toto.io/attestation/test-result/v0.1``).

A Statement comes bare, inside a DSSE envelope, one per line in an
``.intoto.jsonl`` bundle, or as a Sigstore bundle's ``dsseEnvelope``. It must
be about the question: a subject whose ``gitCommit`` or ``gitTree`` digest is
the revision's (and whose URI, when it has one, names this repository); a
statement about anything else is refused with both names. A signature is
verified when trusted keys are given, and a Sigstore bundle's also when a
trusted root is (its certificate chain to the root, then the signature with
the certificate's key); one that does not verify is refused. Otherwise the
receipt records ``signature_verified: false``. ``result``
FAILED, or any entry in ``failedTests``, is failed with the failed tests as
counterexamples; WARNED (or any ``warnedTests``) is inconclusive; PASSED with
no failed or warned test is passed. A claim's pattern selects test names (an
exact name first), and a selection of nothing is refused.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from ledger.evidence.dsse import pae
from ledger.evidence.errors import InputError
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.importers.reader import ClaimMap, Context, Finding, planned
from ledger.importers.sigstore import identity as _identity
from ledger.importers.sigstore import leaf as sigstore_leaf

__all__ = ["PREDICATE_TYPE", "load_trusted_key", "read"]

CHECK = "import-in-toto"

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
_SIGSTORE = "application/vnd.dev.sigstore.bundle"
_LISTS = ("passedTests", "warnedTests", "failedTests")
_AT_REF = re.compile(r"@(refs/.*|[0-9a-fA-F]{7,64})$")


@dataclass(frozen=True, slots=True)
class _Signed:
    statement: dict[str, Any]
    where: str
    container: str
    """bare, dsse or sigstore-bundle."""
    verified: bool | None
    """True: a trusted key verified it; False: signed, not verified; None: unsigned."""
    identity: list[str] | None = None
    """The signing certificate's subject alternative names, when a root verified it."""


def load_trusted_key(path: Path) -> Any:
    """An Ed25519 or ECDSA public key from a PEM file."""
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a PEM public key: {e}") from None
    if not isinstance(key, Ed25519PublicKey | ec.EllipticCurvePublicKey):
        raise InputError(f"{path}: only Ed25519 and ECDSA keys are supported")
    return key


def _verifies(key: Any, sig: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, Ed25519PublicKey):
            key.verify(sig, data)
        else:
            key.verify(sig, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _envelope(
    env: dict[str, Any], where: str, keys: Sequence[Any], what: str = "the trusted key(s)"
) -> tuple[dict[str, Any], bool]:
    """The envelope's statement, and whether one of `keys` verified a signature
    (False: no key to verify with); refused when keys are given and none verifies."""
    try:
        payload = base64.b64decode(env["payload"], validate=True)
        doc = json.loads(payload)
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise InputError(f"{where}: DSSE payload is not base64 JSON: {e}") from None
    if not keys:
        return doc, False
    data = pae(str(env.get("payloadType", "")), payload)
    for s in env.get("signatures") or []:
        try:
            sig = base64.b64decode(s.get("sig", ""), validate=True)
        except (ValueError, binascii.Error, AttributeError):
            continue
        if any(_verifies(k, sig, data) for k in keys):
            return doc, True
    raise InputError(f"{where}: no signature verifies with {what}; nothing written")


def _unnamed(stmts: Sequence[_Signed], want: object) -> str | None:
    """Why the statements are not all signed by identity `want` (None: they are, or the
    plan names no identity). Only a certificate verified up to a trusted root names one."""
    if want is None:
        return None
    for s in stmts:
        if s.verified is not True or s.identity is None:
            return (
                f"{s.where}: signer identity not verified (a Sigstore bundle verified with "
                "--trusted-root names it)"
            )
        if want not in s.identity:
            return f"{s.where}: signed by {', '.join(s.identity) or 'no identity'}"
    return None


def _unwrap(doc: Any, where: str, ctx: Context) -> _Signed:
    if isinstance(doc, dict) and str(doc.get("mediaType", "")).startswith(_SIGSTORE):
        env = doc.get("dsseEnvelope")
        if not isinstance(env, dict):
            raise InputError(f"{where}: a Sigstore bundle without a dsseEnvelope")
        identity = None
        keys = list(ctx.trusted_keys)
        what = "the trusted key(s)"
        if ctx.trusted_roots and not keys:
            leaf = sigstore_leaf(doc, where, ctx.trusted_roots)
            keys, what, identity = [leaf.public_key()], "the certificate's key", _identity(leaf)
        stmt, ok = _envelope(env, where, keys, what)
        return _Signed(stmt, where, "sigstore-bundle", ok, identity)
    if isinstance(doc, dict) and "payload" in doc and "payloadType" in doc:
        stmt, ok = _envelope(doc, where, ctx.trusted_keys)
        return _Signed(stmt, where, "dsse", ok)
    return _Signed(doc, where, "bare", None)


def _documents(path: Path) -> list[tuple[str, Any]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path.name}: {e}") from None
    if not path.name.endswith(".jsonl"):
        try:
            return [(path.name, json.loads(text))]
        except ValueError as e:
            raise InputError(f"{path.name}: not JSON: {e}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((f"{path.name}:{n}", json.loads(line)))
            except ValueError as e:
                raise InputError(f"{path.name}:{n}: not JSON: {e}") from None
    return out


def _subjects(stmt: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: s[k] for k in ("name", "uri", "digest") if k in s}
        for s in stmt.get("subject") or []
        if isinstance(s, dict)
    ]


def _repo_of(uri: str) -> str:
    """The repository a subject URI names (``git+https://host/o/r@refs/heads/main``)."""
    return canonical_repo(_AT_REF.sub("", uri.removeprefix("git+")))


def _bound(stmt: dict[str, Any], rev: Revision) -> bool:
    for s in _subjects(stmt):
        d = s.get("digest") if isinstance(s.get("digest"), dict) else {}
        assert isinstance(d, dict)
        if d.get("gitCommit") != rev.commit and d.get("gitTree") != rev.tree:
            continue
        uri = s.get("uri")
        if isinstance(uri, str) and _repo_of(uri) != rev.repo:
            continue
        return True
    return False


def _named(stmt: dict[str, Any]) -> str:
    parts = []
    for s in _subjects(stmt)[:3]:
        d = s.get("digest") if isinstance(s.get("digest"), dict) else {}
        assert isinstance(d, dict)
        digest = ", ".join(f"{k} {str(v)[:12]}" for k, v in sorted(d.items()))
        parts.append(f"{s.get('uri') or s.get('name') or '(unnamed)'} ({digest or 'no digest'})")
    return "; ".join(parts) or "no subject"


def _check(sig: _Signed, rev: Revision) -> None:
    doc = sig.statement
    if not isinstance(doc, dict) or doc.get("_type") not in _STATEMENT_TYPES:
        raise InputError(f"{sig.where}: not an in-toto Statement")
    pred = doc.get("predicate")
    if not isinstance(pred, dict) or pred.get("result") not in ("PASSED", "WARNED", "FAILED"):
        raise InputError(f"{sig.where}: predicate.result must be PASSED, WARNED or FAILED")
    for k in _LISTS:
        v = pred.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise InputError(f"{sig.where}: predicate.{k} must be a list of test names")
    if not _bound(doc, rev):
        raise InputError(
            f"{sig.where}: the statement is about {_named(doc)}, not {rev.repo} at commit "
            f"{rev.commit[:12]} (tree {rev.tree[:12]}); nothing written"
        )


def _statements(path: Path, ctx: Context) -> tuple[list[_Signed], list[str]]:
    """The test-result statements, each checked; other predicate types' lines."""
    docs = [_unwrap(d, where, ctx) for where, d in _documents(path)]
    results, others = [], []
    for s in docs:
        ptype = s.statement.get("predicateType") if isinstance(s.statement, dict) else None
        if ptype == PREDICATE_TYPE:
            _check(s, ctx.revision)
            results.append(s)
        else:
            others.append(f"{s.where}: {ptype}")
    if not results:
        first = others[0] if others else path.name
        raise InputError(f"{first}: predicateType is not {PREDICATE_TYPE}")
    return results, others


def _select(names: list[str], pat: str) -> list[str]:
    if pat == "*":
        return names
    # The exact name and the pattern's matches alike: an exact name never masks a pattern.
    return [t for t in names if t == pat or fnmatch.fnmatchcase(t, pat)]


def read(path: Path, claims: ClaimMap, ctx: Context) -> dict[str, Finding]:
    stmts, others = _statements(path, ctx)
    preds = [s.statement["predicate"] for s in stmts]
    lists = {k: [t for p in preds for t in p.get(k, [])] for k in _LISTS}
    worst = next(
        (r for r in ("FAILED", "WARNED", "PASSED") if any(p["result"] == r for p in preds)),
        "PASSED",
    )
    out: dict[str, Finding] = {}
    for claim, pat in claims:
        whole = pat == "*"
        sel = {k: _select(v, pat) for k, v in lists.items()}
        if not whole and not any(sel.values()):
            raise InputError(
                f"claim {claim}: {pat!r} selects no test in {path.name}; nothing recorded"
            )
        m: dict[str, Any] = {
            "result": worst,
            "statements": len(stmts),
            "other_predicate_lines": others,
            "passed_count": len(sel["passedTests"]),
            "warned_count": len(sel["warnedTests"]),
            "failed_count": len(sel["failedTests"]),
            "counterexamples": sel["failedTests"],
            "warned": sel["warnedTests"],
            "subjects": [x for s in stmts for x in _subjects(s.statement)],
            "configuration": [c for p in preds for c in p.get("configuration", [])],
            "url": next((p.get("url") for p in preds if p.get("url")), None),
            "container": sorted({s.container for s in stmts}),
            "signer_identity": sorted({i for s in stmts for i in s.identity or []}),
            # None: nothing was signed; False: signed, and no trusted key was given.
            "signature_verified": (
                None
                if all(s.verified is None for s in stmts)
                else all(s.verified is not False for s in stmts)
            ),
        }
        failed = sel["failedTests"] or (whole and worst == "FAILED")
        warned = sel["warnedTests"] or (whole and worst == "WARNED")
        params = planned(CHECK, ctx.params.get(claim, {}))
        unverified = None
        if m["signature_verified"] is not True:
            unverified = "signature not verified: " + (
                "the statement is unsigned"
                if m["signature_verified"] is None
                else "no --trusted-key or --trusted-root was given"
            )
        if failed:
            what = ", ".join(sel["failedTests"][:5]) or "no test named"
            out[claim] = Finding("failed", f"test result FAILED: {what}", m, parameters=params)
        elif warned:
            what = ", ".join(sel["warnedTests"][:5]) or "no test named"
            out[claim] = Finding(
                "inconclusive", f"test result WARNED (not a pass): {what}", m, parameters=params
            )
        elif (who := _unnamed(stmts, params.get("signer_identity"))) is not None:
            out[claim] = Finding(
                "inconclusive",
                f"{who}; the plan requires a signature by {params['signer_identity']} "
                "(signer_identity)",
                m,
                parameters=params,
            )
        elif unverified and params["require_signature"] is True:
            out[claim] = Finding(
                "inconclusive",
                f"{unverified}; the plan requires a verified signature (require_signature)",
                m,
                parameters=params,
            )
        else:
            out[claim] = Finding("passed", None, m, parameters=params, note=unverified)
    return out
