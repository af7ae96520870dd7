"""in-toto test-result predicates (``https://in-toto.io/attestation/test-result/v0.1``).

The statement may come bare or inside a DSSE envelope (its signature is not
what the receipt vouches for, and is not verified here: the receipt records
``envelope_signature_verified: false``). ``result`` FAILED, or any entry in
``failedTests``, is failed with the failed tests as counterexamples; WARNED
(or any ``warnedTests``) is inconclusive, a warning is not a pass; PASSED
with no failed or warned test is passed. Every claim gets the whole result
unless its pattern selects test names, in which case only those count.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from pathlib import Path
from typing import Any

from ledger.errors import InputError
from ledger.importers import ClaimMap, Finding

__all__ = ["PREDICATE_TYPE", "read"]

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")


def _statement(path: Path) -> tuple[dict[str, Any], bool]:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise InputError(f"{path.name}: not JSON: {e}") from None
    enveloped = isinstance(doc, dict) and "payload" in doc and "payloadType" in doc
    if enveloped:
        try:
            doc = json.loads(base64.b64decode(doc["payload"], validate=True))
        except (ValueError, binascii.Error) as e:
            raise InputError(f"{path.name}: DSSE payload is not base64 JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("_type") not in _STATEMENT_TYPES:
        raise InputError(f"{path.name}: not an in-toto Statement")
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise InputError(
            f"{path.name}: predicateType is {doc.get('predicateType')!r}, not {PREDICATE_TYPE}"
        )
    pred = doc.get("predicate")
    if not isinstance(pred, dict) or pred.get("result") not in ("PASSED", "WARNED", "FAILED"):
        raise InputError(f"{path.name}: predicate.result must be PASSED, WARNED or FAILED")
    return doc, enveloped


def _names(pred: dict[str, Any], key: str) -> list[str]:
    v = pred.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise InputError(f"predicate.{key} must be a list of test names")
    return v


def read(path: Path, claims: ClaimMap) -> dict[str, Finding]:
    doc, enveloped = _statement(path)
    pred = doc["predicate"]
    lists = {k: _names(pred, k) for k in ("passedTests", "warnedTests", "failedTests")}
    subjects = [
        {"name": s.get("name"), "digest": s.get("digest")}
        for s in doc.get("subject", [])
        if isinstance(s, dict)
    ]
    out: dict[str, Finding] = {}
    for claim, pat in claims:
        whole = pat == "*"
        sel = {k: [t for t in v if fnmatch.fnmatchcase(t, pat)] for k, v in lists.items()}
        m: dict[str, Any] = {
            "result": pred["result"],
            "passed_count": len(sel["passedTests"]),
            "warned_count": len(sel["warnedTests"]),
            "failed_count": len(sel["failedTests"]),
            "counterexamples": sel["failedTests"],
            "warned": sel["warnedTests"],
            "subjects": subjects,
            "configuration": pred.get("configuration", []),
            "url": pred.get("url"),
            "envelope_signature_verified": False if enveloped else None,
        }
        failed = sel["failedTests"] or (whole and pred["result"] == "FAILED")
        warned = sel["warnedTests"] or (whole and pred["result"] == "WARNED")
        if failed:
            what = ", ".join(sel["failedTests"][:5]) or "no test named"
            out[claim] = Finding("failed", f"test result FAILED: {what}", m)
        elif warned:
            what = ", ".join(sel["warnedTests"][:5]) or "no test named"
            out[claim] = Finding("inconclusive", f"test result WARNED (not a pass): {what}", m)
        elif not sel["passedTests"] and not whole:
            out[claim] = Finding("inconclusive", f"no test matches {pat!r}", m)
        else:
            out[claim] = Finding("passed", None, m)
    return out
