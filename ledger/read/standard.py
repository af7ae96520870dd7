"""Receipts and answers in the predicates other tools read.

- A receipt as an in-toto test-result v0.1 Statement
  (``https://in-toto.io/attestation/test-result/v0.1``): the claim is the
  test; ``passed`` is PASSED, ``failed`` FAILED, anything else WARNED (not a
  pass, not a counterexample). The subject is the revision.
- A status answer about a PR head as a SLSA verification summary
  (``https://slsa.dev/verification_summary/v1``): the subject is the head
  commit with ``annotations.sourceRefs``, ``verifiedLevels`` names each
  qualified claim as ``LEDGER_QUALIFIED_<claim>``, ``policy`` is the governing
  plan's digest, ``inputAttestations`` the receipts that qualify. It is
  computed from the status answer, never re-derived.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ledger.evidence.models import QualificationPredicate

__all__ = [
    "LEVEL_PREFIX",
    "STATEMENT_V1",
    "TEST_RESULT",
    "VERIFICATION_SUMMARY",
    "test_result",
    "verification_summary",
]

STATEMENT_V1 = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
VERIFICATION_SUMMARY = "https://slsa.dev/verification_summary/v1"
LEVEL_PREFIX = "LEDGER_QUALIFIED_"

_RESULT = {"passed": "PASSED", "failed": "FAILED"}


def _hex(receipt_id: str) -> str:
    return receipt_id.removeprefix("sha256:")


def _subject(repo: str, commit: str, refs: Sequence[str] = ()) -> dict[str, Any]:
    subject: dict[str, Any] = {"uri": f"git+{repo}", "digest": {"gitCommit": commit}}
    if refs:
        subject["annotations"] = {"sourceRefs": list(refs)}
    return subject


def test_result(receipt_id: str, p: QualificationPredicate) -> dict[str, Any]:
    """One receipt as a test-result Statement about its revision."""
    result = _RESULT.get(p.outcome, "WARNED")
    test = p.claim
    config = [
        {
            "name": f"ledger receipt ({p.check.name} v{p.check.version}, {p.outcome})",
            "digest": {"sha256": _hex(receipt_id)},
        },
        *({"name": a.name, "digest": {"sha256": a.digest["sha256"]}} for a in p.artifacts),
    ]
    refs = [f"refs/pull/{p.source.pr}/head"] if p.source.pr else []
    return {
        "_type": STATEMENT_V1,
        "subject": [_subject(p.source.repo, p.source.commit, refs)],
        "predicateType": TEST_RESULT,
        "predicate": {
            "result": result,
            "configuration": config,
            "passedTests": [test] if result == "PASSED" else [],
            "warnedTests": [test] if result == "WARNED" else [],
            "failedTests": [test] if result == "FAILED" else [],
        },
    }


def verification_summary(
    doc: Mapping[str, Any],
    *,
    plan_sha256: str | None,
    plan_uri: str,
    verifier_id: str,
    when: datetime | None = None,
) -> dict[str, Any]:
    """The `status --json` answer `doc` as a verification-summary Statement."""
    s = doc["subject"]
    refs = [f"refs/pull/{s['pr']}/head"] if s.get("pr") else []
    required = [r for r in doc["claims"] if r["scope_role"] == "required"]
    qualified = [r for r in required if r["state"] == "qualified"]
    inputs = sorted({rid for r in qualified for rid in r["receipts"]})
    predicate: dict[str, Any] = {
        "verifier": {"id": verifier_id},
        "timeVerified": (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resourceUri": f"git+{s['repo']}",
        "verificationResult": "PASSED" if doc["qualified"] else "FAILED",
        "verifiedLevels": [f"{LEVEL_PREFIX}{r['claim']}" for r in qualified],
        "inputAttestations": [
            {"uri": f"ledger:receipt/{rid}", "digest": {"sha256": _hex(rid)}} for rid in inputs
        ],
    }
    if plan_sha256 is not None:
        predicate["policy"] = {"uri": plan_uri, "digest": {"sha256": plan_sha256}}
    return {
        "_type": STATEMENT_V1,
        "subject": [_subject(s["repo"], s["commit"], refs)],
        "predicateType": VERIFICATION_SUMMARY,
        "predicate": predicate,
    }
