"""A log read over HTTP for the monitor: the served checkpoint, checked against
trusted ledger keys or a policy, then every entry up to its size, whose
leaves must hash to its signed root. What the monitor judges is then the log
the ledger key signed, not whatever the server chose to send."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.witness import signed_by_any
from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error, UsageError, VerificationError
from ledger.evidence.keys import KeyInfo
from ledger.monitor.watch import LogView
from ledger.transparency.policy import Policy

__all__ = ["remote_view"]


def _entry(doc: Any) -> LoggedEntry:
    try:
        seq, kind, eid, body = int(doc["seq"]), str(doc["kind"]), str(doc["id"]), doc["body"]
        logged_at = doc.get("logged_at")
        return LoggedEntry(seq, kind, eid, str(body).encode(), logged_at)
    except (KeyError, TypeError, ValueError):
        raise VerificationError("the server sent a malformed log entry") from None


def _keys(entries: list[LoggedEntry]) -> dict[str, KeyInfo]:
    keys: dict[str, KeyInfo] = {}
    for e in entries:
        try:
            if e.kind == "key":
                k = e.key()
                keys.setdefault(k.keyid, k)
            elif e.kind == "revocation":
                kid, reason = e.revocation()
                k2 = keys.get(kid)
                if k2 is not None and k2.revoked_seq is None:
                    keys[kid] = k2._replace(revoked_seq=e.seq, revoked_reason=reason)
        except Error:
            continue
    return keys


def remote_view(
    url: str, trust: list[Ed25519PublicKey], policy: Policy | None, timeout: float = 30
) -> LogView:
    """The log at `url` up to its served checkpoint (signed by `trust`, or meeting `policy`)."""
    from ledger.remote import client

    if not trust and policy is None:
        raise UsageError("--server needs --trust LEDGER_KEY_PEM or --policy POLICY")
    note = client.fetch_checkpoint(url, timeout)
    cp = policy.check(note)[0] if policy is not None else signed_by_any(note, trust)
    entries: list[LoggedEntry] = []
    while len(entries) < cp.size:
        page = client.fetch_log_entries(url, len(entries), cp.size, timeout)
        got = [_entry(d) for d in page]
        if not got or any(e.seq != len(entries) + i for i, e in enumerate(got)):
            raise VerificationError("the server's log entries are not the ones asked for")
        entries += got
    leaves = [
        merkle.leaf_hash(e.body)
        if e.logged_at is None
        else merkle.entry_leaf(e.seq, e.logged_at, e.body)
        for e in entries
    ]
    if merkle.root(leaves) != cp.root:
        raise VerificationError(
            f"the served entries do not hash to the signed root at size {cp.size}"
        )
    keys = _keys(entries)
    judged = [e for e in entries if e.kind in ("receipt", "review")]
    return LogView(cp.origin, cp.size, cp.root, judged, keys)
