"""The exact shape of envelopes and statements, checked by hand.

`ledger.evidence.models` (pydantic) is the reference for what a DSSE envelope and a
statement may hold; building those models costs more than everything else
`ledger verify BUNDLE` does. `envelope_fits` and `statement_fits` answer True
only for a document the models accept (envelopes as `Envelope.model_validate`
reads a decoded document; statements as `model_validate_json(strict=True)`
reads their canonical payload). False means "ask the models": they then
refuse with their own one-line reason, or accept. So these checks choose
which code decides, never the verdict; tests/ledger/evidence/test_shape.py holds them
to the models on valid, tampered and malformed documents.

Where the models accept more than is ever written (a `type_` key for
`_type`; a non-ASCII digit in a timestamp, which pydantic's regex engine
counts as a digit), the check answers False and the models decide.

The rules that are code rather than shape (an outcome other than passed
needs a reason; bytes and ns figures are exact integers; a complete cleanup
releases every resource; a review's subject is its receipt) are written once,
here, and the models' validators call them.
"""

from __future__ import annotations

import re
from typing import Any

from ledger.evidence.kinds import QUALIFICATION_PREDICATE, REVIEW_PREDICATE, STATEMENT_TYPE

__all__ = [
    "OUTCOMES",
    "envelope_fits",
    "inexact_figure",
    "missing_reason",
    "statement_fits",
    "unreleased_but_complete",
    "wrong_review_subject",
]

OUTCOMES = ("passed", "failed", "inconclusive", "refused", "infra-error")

# Whole-string patterns: pydantic's `^...$` matches the whole text (its `$`
# allows no trailing newline, unlike Python's), as fullmatch does.
_HEX40 = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RECEIPT_ID = re.compile(r"sha256:[0-9a-f]{64}")
_FACET = re.compile(r"[a-z][a-z0-9_.-]*")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z")

# Byte and nanosecond figures must be exact integers: a float here means a
# lossy conversion happened somewhere (e.g. GiB) and the receipt would lie.
_EXACT_KEY = re.compile(r"(^|_)(bytes|ns)$")


# --- the rules the models' validators share ---------------------------------------------


def missing_reason(outcome: str, reason: str | None) -> str | None:
    """Why a predicate's outcome lacks the reason it needs, or None."""
    if outcome != "passed" and not (reason and reason.strip()):
        return f"outcome {outcome!r} needs a reason"
    return None


def inexact_figure(value: Any, path: str) -> str | None:
    """Where a bytes or ns figure (by key name, at any depth) is a float, in words; else None."""
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}"
            if _EXACT_KEY.search(k) and isinstance(v, float):
                return f"{where} must be an exact integer (bytes and ns are never floats)"
            found = inexact_figure(v, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = inexact_figure(v, f"{path}[{i}]")
            if found:
                return found
    return None


def unreleased_but_complete(complete: bool, released: list[bool]) -> str | None:
    if complete and not all(released):
        return "cleanup.complete is true but a resource is not released"
    return None


def wrong_review_subject(receipt: str, subject_sha256: list[str | None]) -> str | None:
    if subject_sha256 != [receipt.removeprefix("sha256:")]:
        return "review subject must be exactly the reviewed receipt's digest"
    return None


# --- shapes -----------------------------------------------------------------------------


def _object(value: Any, required: frozenset[str], optional: frozenset[str] = frozenset()) -> bool:
    """A JSON object with every required key and no key beyond the optional ones."""
    if type(value) is not dict:
        return False
    keys = value.keys()
    return required <= keys and keys <= required | optional


def _text(value: Any, min_length: int = 0) -> bool:
    return type(value) is str and len(value) >= min_length


def _matches(value: Any, pattern: re.Pattern[str]) -> bool:
    return type(value) is str and pattern.fullmatch(value) is not None


def _count(value: Any, minimum: int) -> bool:
    """A JSON integer (never a bool: strict mode) of at least `minimum`."""
    return type(value) is int and value >= minimum


def _texts(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def _text_map(value: Any, min_length: int = 0) -> bool:
    return (
        type(value) is dict
        and len(value) >= min_length
        and all(type(v) is str for v in value.values())
    )


def envelope_fits(data: Any) -> bool:
    """A decoded DSSE envelope the `Envelope` model accepts (`model_validate`, lax mode;
    from decoded JSON only a string is a string and only an array a list)."""
    if not _object(data, frozenset({"payloadType", "payload", "signatures"})):
        return False
    sigs = data["signatures"]
    return (
        type(data["payloadType"]) is str
        and type(data["payload"]) is str
        and type(sigs) is list
        and len(sigs) >= 1
        and all(
            _object(s, frozenset({"keyid", "sig"})) and _text(s["keyid"], 1) and _text(s["sig"], 1)
            for s in sigs
        )
    )


def _subject(s: Any) -> bool:
    return (
        _object(s, frozenset({"name", "digest"}))
        and _text(s["name"], 1)
        and _text_map(s["digest"], 1)
    )


def _check(c: Any) -> bool:
    return (
        _object(c, frozenset({"name", "version"}), frozenset({"parameters"}))
        and _text(c["name"], 1)
        and _text(c["version"], 1)
        and type(c.get("parameters", {})) is dict
    )


def _package(p: Any) -> bool:
    return (
        _object(p, frozenset({"paths", "digest"}), frozenset({"parts"}))
        and _texts(p["paths"])
        and _matches(p["digest"], _HEX64)
        and (p.get("parts") is None or _text_map(p["parts"]))
    )


def _source(s: Any) -> bool:
    return (
        _object(
            s,
            frozenset({"repo", "commit", "tree", "dirty"}),
            frozenset({"parents", "pr", "base", "package"}),
        )
        and _text(s["repo"], 1)
        and _matches(s["commit"], _HEX40)
        and _matches(s["tree"], _HEX40)
        and type(s.get("parents", [])) is list
        and all(_matches(p, _HEX40) for p in s.get("parents", []))
        and (s.get("pr") is None or _count(s["pr"], 1))
        and (s.get("base") is None or _matches(s["base"], _HEX40))
        and type(s["dirty"]) is bool
        and (s.get("package") is None or _package(s["package"]))
    )


def _resource(r: Any) -> bool:
    return (
        _object(r, frozenset({"kind", "id", "released"}), frozenset({"proof"}))
        and _text(r["kind"], 1)
        and _text(r["id"], 1)
        and type(r["released"]) is bool
        and _text(r.get("proof", ""))
    )


def _cleanup(c: Any) -> bool:
    if not (
        _object(c, frozenset({"complete"}), frozenset({"resources", "tolerance_bytes"}))
        and type(c["complete"]) is bool
        and type(c.get("resources", [])) is list
        and all(_resource(r) for r in c.get("resources", []))
        and _count(c.get("tolerance_bytes", 0), 0)
    ):
        return False
    released = [r["released"] for r in c.get("resources", [])]
    return unreleased_but_complete(c["complete"], released) is None


def _artifact(a: Any) -> bool:
    return (
        _object(a, frozenset({"name", "digest", "size"}), frozenset({"mediaType"}))
        and _text(a["name"], 1)
        and type(a["digest"]) is dict
        and all(k == "sha256" and _matches(v, _HEX64) for k, v in a["digest"].items())
        and _count(a["size"], 0)
        and _text(a.get("mediaType", ""))
    )


def _runner(r: Any) -> bool:
    return (
        _object(
            r,
            frozenset({"started", "finished", "ledger_version"}),
            frozenset({"host", "gpu_uuids", "environment"}),
        )
        and _text(r.get("host", ""))
        and _texts(r.get("gpu_uuids", []))
        and _matches(r["started"], _TIMESTAMP)
        and _matches(r["finished"], _TIMESTAMP)
        and _text(r["ledger_version"])
        and _text_map(r.get("environment", {}))
    )


def _supersedes(s: Any) -> bool:
    return (
        _object(s, frozenset({"id", "reason"}))
        and _matches(s["id"], _RECEIPT_ID)
        and _text(s["reason"], 1)
    )


def _scope(s: Any) -> bool:
    # `str | int` in strict mode: a bool is neither, nor is a float.
    return type(s) is dict and all(
        _FACET.fullmatch(k) is not None and type(v) in (str, int) for k, v in s.items()
    )


def _qualification(p: Any) -> bool:
    if not (
        _object(
            p,
            frozenset({"claim", "check", "scope", "source", "outcome", "observer", "runner"}),
            frozenset({"reason", "measurements", "cleanup", "artifacts", "supersedes"}),
        )
        and _text(p["claim"], 1)
        and _check(p["check"])
        and _scope(p["scope"])
        and _source(p["source"])
        and type(p["outcome"]) is str
        and p["outcome"] in OUTCOMES
        and (p.get("reason") is None or _text(p["reason"]))
        and type(p.get("measurements", {})) is dict
        and type(p["observer"]) is str
        and p["observer"] in ("on", "off")
        and (p.get("cleanup") is None or _cleanup(p["cleanup"]))
        and type(p.get("artifacts", [])) is list
        and all(_artifact(a) for a in p.get("artifacts", []))
        and _runner(p["runner"])
        and type(p.get("supersedes", [])) is list
        and all(_supersedes(s) for s in p.get("supersedes", []))
    ):
        return False
    return (
        missing_reason(p["outcome"], p.get("reason")) is None
        and inexact_figure(p.get("measurements", {}), "measurements") is None
    )


def _review(p: Any, subject: list[Any]) -> bool:
    if not (
        _object(
            p, frozenset({"receipt", "verdict", "reviewed", "ledger_version"}), frozenset({"note"})
        )
        and _matches(p["receipt"], _RECEIPT_ID)
        and type(p["verdict"]) is str
        and p["verdict"] in ("concur", "dispute")
        and _text(p.get("note", ""))
        and _matches(p["reviewed"], _TIMESTAMP)
        and _text(p["ledger_version"])
    ):
        return False
    return wrong_review_subject(p["receipt"], [s["digest"].get("sha256") for s in subject]) is None


def statement_fits(doc: Any) -> bool:
    """A decoded statement the model of its predicateType accepts in strict mode."""
    if not (
        _object(doc, frozenset({"_type", "subject", "predicateType", "predicate"}))
        and type(doc["_type"]) is str
        and doc["_type"] == STATEMENT_TYPE
        and type(doc["subject"]) is list
        and len(doc["subject"]) >= 1
        and all(_subject(s) for s in doc["subject"])
    ):
        return False
    ptype = doc["predicateType"]
    if type(ptype) is not str:
        return False
    if ptype == QUALIFICATION_PREDICATE:
        return _qualification(doc["predicate"])
    if ptype == REVIEW_PREDICATE:
        return _review(doc["predicate"], doc["subject"])
    return False
