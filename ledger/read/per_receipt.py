"""A question's evidence from a `ledger serve` of an earlier release, which has no
`POST /v1/evidence`: read as it was read then, per receipt.

The server's history of the subject (`POST /v1/history`, the same question) names each
receipt and review with its signer, its role and the problems the server found; each
receipt's statement is read back (`GET /v1/entries/ID`, one request per receipt), and
who registered each signing key comes from the key table (`GET /v1/keys`). The evidence
is then what `POST /v1/evidence` would have sent: the same receipts, reviews, signers'
standing and unreadable entries, so a client of this release judges alike against
either server.

What an earlier server does not say, and how it is read: a signer's problem and the
position of its key's revocation are read from the problems its history names (the
judge's own words, `qualification/rules.py`); a key revoked after the entry was logged
is not said to be revoked there, so its revocation's position is unknown here (None)
and the entry counts as it does on the server (it was logged before). Where the
question names claims, the history's unreadable entries are all named (the server
does not say whose claim an entry that does not read was of).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.evidence.entry import ReceiptRevocation
from ledger.evidence.errors import RefusedError
from ledger.evidence.models import QualificationStatement
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, short_id
from ledger.qualification.revocation import with_revocations
from ledger.qualification.rules import KEY_REVOKED, SIGNATURE
from ledger.read.evidence import Evidence
from ledger.read.question import Question

__all__ = ["per_receipt_evidence"]

_REVOKED_AT = re.compile(r"revoked at seq (\d+)\Z")


def per_receipt_evidence(url: str, question: Question) -> Evidence:
    """The evidence on the question's subject, from the server's history, entries and
    keys (an earlier release's routes)."""
    from ledger.remote.client import fetch_entry, fetch_history, fetch_keys

    doc = fetch_history(url, question.to_json())
    registered = {str(k.get("keyid")): k.get("registered_by") for k in fetch_keys(url)}
    wanted = set(question.claims)
    try:
        items = [i for i in doc.get("entries") or [] if isinstance(i, Mapping)]
        receipts: list[ReceiptEvidence] = []
        revoked: dict[str, ReceiptRevocation] = {}
        for item in items:
            if item.get("kind") != "receipt" or (wanted and item.get("claim") not in wanted):
                continue
            shown = fetch_entry(url, str(item["id"]))
            receipts.append(
                ReceiptEvidence(
                    statement=QualificationStatement.model_validate(shown["statement"]),
                    **_signer(item, registered, f"{short_id(str(item['id']))}: "),
                )
            )
            if isinstance(rev := shown.get("revocation"), Mapping):
                revoked[str(item["id"])] = ReceiptRevocation(
                    int(rev["seq"]),
                    str(item["id"]),
                    str(rev["reason"]),
                    None if rev.get("review") is None else str(rev["review"]),
                    by="reviewer" if rev.get("by") == "reviewer" else "operator",
                    signer=None if rev.get("signer") is None else str(rev["signer"]),
                    problem=None if rev.get("problem") is None else str(rev["problem"]),
                )
        ids = {r.id for r in receipts}
        reviews = [
            ReviewEvidence(
                receipt=str(item["receipt"]),
                verdict=item["verdict"],
                note=str(item["note"]),
                **_signer(item, registered, ""),
            )
            for item in items
            if item.get("kind") == "review" and item.get("receipt") in ids
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise RefusedError(f"the server's history does not read: {e}") from None
    unreadable = [str(u) for u in doc.get("problems") or []]
    return Evidence(with_revocations(receipts, reviews, revoked), reviews, unreadable)


def _signer(item: Mapping[str, Any], registered: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The signer fields of a history item, its problems read back into them."""
    signer = str(item["signer"])
    by = registered.get(signer)
    return {
        "id": str(item["id"]),
        "seq": int(item["seq"]),
        "signer": signer,
        "signer_role": str(item["signer_role"]),
        "signer_revoked_seq": _revoked_seq(item.get("problems") or []),
        "signer_registered_by": None if by is None else str(by),
        "problem": _problem(item.get("problems") or [], prefix),
    }


def _problem(problems: Sequence[Any], prefix: str) -> str | None:
    """The signer's problem as the server's history words it (`signature: ...`)."""
    lead = f"{SIGNATURE}: {prefix}"
    return next((str(p)[len(lead) :] for p in problems if str(p).startswith(lead)), None)


def _revoked_seq(problems: Sequence[Any]) -> int | None:
    """Where the signer's key was revoked, where the entry was logged after it."""
    for p in problems:
        if str(p).startswith(f"{KEY_REVOKED}: ") and (m := _REVOKED_AT.search(str(p))):
            return int(m.group(1))
    return None
