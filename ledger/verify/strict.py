"""Strict reading of signed bytes: what is logged is exactly what was signed,
and every JSON reader reads it one way.

Store-free. `verify_envelope` runs these checks, so every path that accepts an
envelope (record, attest, the server, bundle verification) refuses the same
inputs with the same one-line reason:

- a byte-order mark (some readers strip it, some refuse it);
- duplicate object keys (readers disagree on which value wins);
- numbers outside the RFC 8785 safe domain (integers beyond +-2^53, NaN,
  infinities: readers round or refuse them);
- a payload that is not the RFC 8785 canonical form of itself (so one
  statement has exactly one id);
- values of the wrong JSON type (pydantic strict mode: `"pr": "7"` is not 7),
  a missing or unknown field, a value outside its pattern or range;
- a subject that disagrees with `predicate.source`;
- any signature not made by a registered, unrevoked key whose role may sign
  that kind of statement; the answer never depends on signature order.

The statement's shape is checked by hand (`ledger.evidence.shape`); the pydantic models
decide only what that check leaves to them, and name the error. So a valid
bundle is verified without building the models, and every input gets the
verdict and the one-line reason the models give.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import InputError, RefusedError, VerificationError
from ledger.evidence.kinds import KIND_FOR, QUALIFICATION_PREDICATE
from ledger.evidence.limits import check_nesting, parse_int
from ledger.evidence.shape import statement_fits

__all__ = [
    "MAX_SAFE_INTEGER",
    "check_json_bytes",
    "check_signers",
    "strict_document",
    "unsafe",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""RFC 8785 (I-JSON) interoperable integer range is +-(2^53 - 1)."""
_BOM = b"\xef\xbb\xbf"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise RefusedError(f"duplicate object key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise RefusedError(f"{name} is not a JSON number (outside the RFC 8785 safe domain)")


def unsafe(value: Any, path: str) -> str | None:
    """Where `value` holds a number outside the JCS safe domain, in words; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        return f"{path} = {value} is beyond +-2^53, outside the RFC 8785 safe integer range"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} = {value} is not a finite number (RFC 8785 has no NaN or infinity)"
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = unsafe(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = unsafe(v, f"{path}[{i}]")
            if found:
                return found
    return None


def check_json_bytes(raw: bytes, what: str) -> Any:
    """Parse JSON bytes one way only: no BOM, no duplicate keys, safe numbers."""
    if raw.startswith(_BOM):
        raise RefusedError(f"{what} starts with a byte-order mark")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RefusedError(f"{what} is not UTF-8") from None
    try:
        # Depth and integer length are bounded before Python's own limits can
        # raise (RecursionError, or ValueError past 4,300 digits).
        check_nesting(text, what)
        doc = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=parse_int,
        )
    except (RefusedError, InputError) as e:
        raise RefusedError(f"{what}: {e.reason()}") from None
    except json.JSONDecodeError as e:
        raise RefusedError(f"{what} is not JSON: {e}") from None
    found = unsafe(doc, what)
    if found:
        raise RefusedError(found)
    return doc


def strict_document(payload: bytes) -> dict[str, Any]:
    """The statement the payload is, read strictly (see the module doc), as its
    decoded JSON document: a receipt or a review, as `KIND_FOR` its predicateType."""
    doc = check_json_bytes(payload, "payload")
    try:
        canonical = canonical_bytes(doc)
    except InputError as e:
        raise RefusedError(f"payload: {e.reason()}") from None
    if canonical != payload:
        raise RefusedError("payload is not in RFC 8785 canonical form (one statement, one id)")
    if not isinstance(doc, dict):
        raise RefusedError("payload is not a JSON object")
    ptype = doc.get("predicateType")
    if not isinstance(ptype, str) or ptype not in KIND_FOR:
        raise RefusedError(f"unknown predicateType {ptype!r}")
    if not statement_fits(doc):
        _models_decide(payload, doc)
    if ptype == QUALIFICATION_PREDICATE:
        src = doc["predicate"]["source"]
        want = [(src["repo"], {"gitCommit": src["commit"], "gitTree": src["tree"]})]
        if [(s["name"], s["digest"]) for s in doc["subject"]] != want:
            raise RefusedError(
                "subject disagrees with predicate.source (repo, commit and tree must match)"
            )
    return doc


def _models_decide(payload: bytes, doc: dict[str, Any]) -> None:
    """The pydantic models' verdict on what the hand check did not vouch for:
    RefusedError with their first error, or nothing when they accept."""
    from pydantic import ValidationError

    from ledger.evidence.errors import first_validation_error
    from ledger.evidence.statement import statement_model

    try:
        # JSON-mode strict validation: no coercion ("no" is not a bool, "7" not an int).
        statement_model(doc).model_validate_json(payload, strict=True)
    except ValidationError as e:
        raise RefusedError(f"malformed in-toto statement: {first_validation_error(e)}") from None


def check_signers(
    accepted: list[str],
    all_keyids: list[str],
    roles: Mapping[str, tuple[str, str, int | None, str | None]],
    want_role: str,
    kind: str,
    at_seq: int | None,
) -> tuple[str, ...]:
    """Every signature's key must be registered, unrevoked at `at_seq` and of
    `want_role`; returns the signers sorted, so order never matters.

    `roles` maps key id -> (name, role, revoked_seq, revoked_reason).
    """
    for kid in sorted(all_keyids):
        if kid not in roles:
            raise VerificationError(f"signed by unknown key {kid[:16]}")
        name, role, revoked_seq, reason = roles[kid]
        if revoked_seq is not None and (at_seq is None or revoked_seq < at_seq):
            raise VerificationError(f"key {name} ({kid[:12]}) was revoked: {reason}")
        if role != want_role:
            raise VerificationError(
                f"key {name} has role {role}; a {kind} must be signed by a {want_role} key"
            )
    missing = set(all_keyids) - set(accepted)
    if missing:
        raise VerificationError(f"signature by key {sorted(missing)[0][:16]} does not verify")
    return tuple(sorted(accepted))
