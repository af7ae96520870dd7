"""A log read over HTTP for the monitor: the served checkpoint, checked against
trusted ledger keys or a policy, then every entry up to its size, whose
leaves must hash to its signed root. What the monitor judges is then the log
the ledger key signed, not whatever the server chose to send."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint
from ledger._internal.witness import signed_by_any
from ledger.evidence.entry import LoggedEntry
from ledger.evidence.errors import Error, UsageError, VerificationError
from ledger.evidence.keys import KeyInfo
from ledger.monitor.watch import LogView
from ledger.transparency.policy import Policy

__all__ = [
    "PAGE",
    "checked_note",
    "entries_from",
    "extended",
    "fetch_entries",
    "fetch_page",
    "keys_of",
    "leaf_of",
    "remote_view",
    "verified_checkpoint",
]

PAGE = 1000
"""The most entries a server sends in one answer (`GET /v1/log/entries`)."""


def _entry(doc: Any) -> LoggedEntry:
    try:
        seq, kind, eid, body = int(doc["seq"]), str(doc["kind"]), str(doc["id"]), doc["body"]
        logged_at = doc.get("logged_at")
        return LoggedEntry(seq, kind, eid, str(body).encode(), logged_at)
    except (KeyError, TypeError, ValueError):
        raise VerificationError("the server sent a malformed log entry") from None


def keys_of(
    entries: Iterable[LoggedEntry], held: Mapping[str, KeyInfo] | None = None
) -> dict[str, KeyInfo]:
    """The key registry as the log's key and revocation entries state it (after
    `held`, the registry of the entries before them): a key's revocation counts only
    where its signature does (`ledger.evidence.signed_revocation`)."""
    keys: dict[str, KeyInfo] = dict(held or {})
    for e in entries:
        try:
            if e.kind == "key":
                k = e.key()
                keys.setdefault(k.keyid, k)
            elif e.kind == "revocation":
                kid, reason = e.revocation()
                k2 = keys.get(kid)
                if k2 is None or k2.revoked_seq is not None:
                    continue
                if e.revocation_signature(keys).problem is None:
                    keys[kid] = k2._replace(revoked_seq=e.seq, revoked_reason=reason)
        except Error:
            continue
    return keys


def verified_checkpoint(
    url: str, trust: list[Ed25519PublicKey], policy: Policy | None, timeout: float = 30
) -> Checkpoint:
    """The checkpoint `url` serves, once signed by `trust` or meeting `policy` (its
    witnesses' quorum)."""
    from ledger.remote import client

    if not trust and policy is None:
        raise UsageError("--server needs --trust LEDGER_KEY_PEM or --policy POLICY")
    return checked_note(client.fetch_checkpoint(url, timeout), trust, policy)


def checked_note(note: bytes, trust: list[Ed25519PublicKey], policy: Policy | None) -> Checkpoint:
    """A checkpoint note however it arrived, once signed by `trust` or meeting `policy`."""
    if not trust and policy is None:
        raise UsageError("--server needs --trust LEDGER_KEY_PEM or --policy POLICY")
    return policy.check(note)[0] if policy is not None else signed_by_any(note, trust)


def entries_from(docs: Any, start: int) -> list[LoggedEntry]:
    """The entries a server sent from `start` on, each the one asked for (not yet
    checked against a root)."""
    if not isinstance(docs, list):
        raise VerificationError("the server sent a malformed log entry")
    got = [_entry(d) for d in docs]
    if any(e.seq != start + i for i, e in enumerate(got)):
        raise VerificationError("the server's log entries are not the ones asked for")
    return got


def fetch_page(url: str, start: int, end: int, timeout: float = 30) -> list[LoggedEntry]:
    """One page of entries from `start` (before `end`; fewer where the log or the page
    ends first), each the one asked for."""
    from ledger.remote import client

    got = [_entry(d) for d in client.fetch_log_entries(url, start, end, timeout)]
    if any(e.seq != start + i for i, e in enumerate(got)):
        raise VerificationError("the server's log entries are not the ones asked for")
    return got


def fetch_entries(url: str, start: int, end: int, timeout: float = 30) -> list[LoggedEntry]:
    """Entries `start`.. before `end`, page by page (not yet checked against a root: the
    caller hashes them with what it holds)."""
    entries: list[LoggedEntry] = []
    while start + len(entries) < end:
        got = fetch_page(url, start + len(entries), end, timeout)
        if not got:
            raise VerificationError("the server's log entries are not the ones asked for")
        entries += got
    return entries


def leaf_of(e: LoggedEntry) -> bytes:
    """An entry's leaf hash: its position, time and body (the body alone before times
    were logged)."""
    if e.logged_at is None:
        return merkle.leaf_hash(e.body)
    return merkle.entry_leaf(e.seq, e.logged_at, e.body)


def extended(
    size: int, nodes: Sequence[bytes], entries: Iterable[LoggedEntry]
) -> tuple[bytes, tuple[bytes, ...]]:
    """The root and compact range (`nodes`) of a tree of `size` leaves once `entries`
    are appended: what a copy kept elsewhere resumes from, without its leaves."""
    tree = merkle.CompactRange(size, nodes)
    tree.extend(leaf_of(e) for e in entries)
    return tree.root(), tree.nodes


def remote_view(
    url: str, trust: list[Ed25519PublicKey], policy: Policy | None, timeout: float = 30
) -> LogView:
    """The log at `url` up to its served checkpoint (signed by `trust`, or meeting `policy`)."""
    cp = verified_checkpoint(url, trust, policy, timeout)
    entries = fetch_entries(url, 0, cp.size, timeout)
    if merkle.root([leaf_of(e) for e in entries]) != cp.root:
        raise VerificationError(
            f"the served entries do not hash to the signed root at size {cp.size}"
        )
    keys = keys_of(entries)
    judged = [e for e in entries if e.kind in ("receipt", "review")]
    return LogView(cp.origin, cp.size, cp.root, judged, keys)
