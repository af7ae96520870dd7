"""Recompute the whole log from its rows and name every entry that differs.

One pass over the entries in log order; each kind of entry is checked by its
own function against the derived rows stored for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger._internal import merkle
from ledger.evidence.canonical import sha256_hex
from ledger.evidence.entry import LoggedEntry, envelope_body
from ledger.evidence.errors import Error, VerificationError
from ledger.evidence.keys import KeyInfo
from ledger.store.store import (
    ARTIFACT,
    CHECKPOINT,
    COSIGNATURE,
    FACET,
    KEY,
    RECEIPT,
    RECEIPT_REVOCATION,
    REVIEW,
    REVOCATION,
    Store,
)
from ledger.transparency.checkpoints import ledger_signer
from ledger.verify.envelope import verify_envelope
from ledger.write.ingest import receipt_index, review_index

__all__ = ["AuditReport", "audit"]


@dataclass
class AuditReport:
    entries: int = 0
    checkpoints: int = 0
    root: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """What `ledger audit --json` prints."""
        return {
            "ok": self.ok,
            "entries": self.entries,
            "checkpoints": self.checkpoints,
            "root": self.root,
            "problems": self.problems,
        }


@dataclass
class _Rows:
    """The derived rows, by log position, and which of them an entry explained."""

    receipts: dict[int, dict[str, Any]]
    facets: dict[int, list[dict[str, Any]]]
    reviews: dict[int, dict[str, Any]]
    keys: dict[int, dict[str, Any]]
    revocations: dict[int, dict[str, Any]]
    receipt_revocations: dict[int, dict[str, Any]]
    kinds: dict[int, str] = field(default_factory=dict)
    """The kind of the log entry at each seq: a derived row is explained by an
    entry of its own kind at its seq, whether or not that entry verified (an
    entry that fails is named once, not again through its rows)."""
    artifacts: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    """(mediaType, size) that the receipts name, per artifact digest."""
    unread: bool = False
    """Some receipt could not be read: an artifact it may name is not reported again."""

    @classmethod
    def load(cls, store: Store) -> _Rows:
        facets: dict[int, list[dict[str, Any]]] = {}
        for f in store.table_rows(FACET, FACET.c.seq):
            facets.setdefault(int(f["seq"]), []).append(f)
        return cls(
            receipts={r["seq"]: r for r in store.table_rows(RECEIPT, RECEIPT.c.seq)},
            facets=facets,
            reviews={r["seq"]: r for r in store.table_rows(REVIEW, REVIEW.c.seq)},
            keys={r["seq"]: r for r in store.table_rows(KEY, KEY.c.seq)},
            revocations={r["seq"]: r for r in store.table_rows(REVOCATION, REVOCATION.c.seq)},
            receipt_revocations={
                r["seq"]: r for r in store.table_rows(RECEIPT_REVOCATION, RECEIPT_REVOCATION.c.seq)
            },
        )

    def unexplained(self) -> Iterable[str]:
        for table, rows in (
            ("receipt", self.receipts),
            ("review", self.reviews),
            ("key", self.keys),
            ("revocation", self.revocations),
            ("revocation", self.receipt_revocations),
        ):
            for seq in sorted(s for s in rows if self.kinds.get(s) != table):
                yield f"{table} row {seq} has no matching log entry"


def _named_artifacts(e: LoggedEntry, rows: _Rows) -> None:
    """The artifacts a receipt names, read even when its signature fails (that
    failure is reported once, for the entry; its artifacts are not blamed too)."""
    try:
        artifacts = e.receipt.predicate.artifacts
    except Error:
        rows.unread = True
        return
    for a in artifacts:
        rows.artifacts.setdefault(a.digest["sha256"], set()).add((a.mediaType, a.size))


def _statement(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    if e.kind == "receipt":
        _named_artifacts(e, rows)
    try:
        v = verify_envelope(e.envelope, keys, at_seq=e.seq)
    except Error as err:
        return [err.reason()]
    out = []
    if v.id != e.entry_id:
        out.append(f"id differs from the payload digest {v.id[:19]}")
    if envelope_body(v.envelope) != e.body:
        out.append("body is not the canonical envelope")
    if e.kind == "receipt":
        row, want_facets = receipt_index(e.seq, v)
        have = rows.receipts.get(e.seq)
        if have is not None and have.get("repo_id") != row["repo_id"]:
            # Every question selects by this column: a changed value moves the
            # receipt to another repository's answers, so it is named as such.
            out.append(
                f"receipt row's repository {have.get('repo_id')!r} differs from the"
                f" signed body's {row['repo_id']!r}"
            )
        if have != row:
            out.append("receipt index row differs from the entry")
        got = [
            {"seq": f["seq"], "key": f["key"], "value": f["value"]}
            for f in rows.facets.get(e.seq, [])
        ]
        if sorted(got, key=lambda f: str(f["key"])) != want_facets:
            out.append("scope facets differ from the entry")
    elif rows.reviews.get(e.seq) != review_index(e.seq, v):
        out.append("review index row differs from the entry")
    return out


def _key(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    out = []
    if e.body_id() != e.entry_id:
        out.append("id differs from the body digest")
    try:
        info = e.key()
    except Error as err:
        return [*out, err.reason()]
    kr = rows.keys.get(e.seq)
    data = e.document
    if kr is None or (kr["keyid"], kr["name"], kr["role"], kr["public_key"]) != (
        data.get("keyid"),
        data.get("name"),
        data.get("role"),
        data.get("public_key"),
    ):
        out.append("key row differs from the entry")
    if "hosts" in data:
        from ledger.evidence.hosts import read_hosts

        try:
            read_hosts(data["hosts"])
        except Error as err:
            out.append(err.reason())
    keys[info.keyid] = info
    return out


def _revocation(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    out = []
    if e.body_id() != e.entry_id:
        out.append("id differs from the body digest")
    # The write path logs no revocation whose signature would not count: one here was
    # written behind its back, and counts nowhere (`evidence/signed_revocation.py`).
    problem = e.revocation_signature(keys).problem
    if problem is not None:
        out.append(f"a revocation that counts for nothing: {problem}")
    if e.revokes_receipt:
        return out + _receipt_revocation(e, rows)
    try:
        keyid, reason = e.revocation()
    except Error as err:
        return [*out, err.reason()]
    rr = rows.revocations.get(e.seq)
    if rr is None or (rr["keyid"], rr["reason"]) != (keyid, reason):
        out.append("revocation row differs from the entry")
    old = keys.get(keyid)
    if old is not None and old.revoked_seq is None and problem is None:
        keys[keyid] = old._replace(revoked_seq=e.seq, revoked_reason=reason)
    return out


def _receipt_revocation(e: LoggedEntry, rows: _Rows) -> list[str]:
    """A receipt's revocation: it names a receipt logged before it; its row matches."""
    try:
        rev = e.receipt_revocation()
    except Error as err:
        return [err.reason()]
    out = []
    if not any(r["id"] == rev.receipt and r["seq"] < e.seq for r in rows.receipts.values()):
        out.append(f"it revokes {rev.receipt[:19]}, which is no receipt logged before it")
    rr = rows.receipt_revocations.get(e.seq)
    if rr is None or (rr["receipt_id"], rr["reason"], rr["review"]) != (
        rev.receipt,
        rev.reason,
        rev.review,
    ):
        out.append("receipt revocation row differs from the entry")
    return out


def _plan(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    """A governing plan: its id is its body's digest, its objects recompute to the
    base commit and the blob it names."""
    from ledger.plans.entry import read_plan_entry

    out = []
    if e.body_id() != e.entry_id:
        out.append("id differs from the body digest")
    try:
        read_plan_entry(e.seq, e.entry_id, e.document)
    except Error as err:
        out.append(err.reason())
    return out


def _alias(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    """A repository alias: its id is its body's digest, both ids canonical and distinct."""
    from ledger.identity.aliases import read_alias

    out = []
    if e.body_id() != e.entry_id:
        out.append("id differs from the body digest")
    try:
        read_alias(e.document)
    except Error as err:
        out.append(err.reason())
    return out


def _hosts(e: LoggedEntry, rows: _Rows, keys: dict[str, KeyInfo]) -> list[str]:
    """A change of the hosts a runner key speaks for: its id is its body's digest, and
    it names a runner key registered before it."""
    from ledger.evidence.hosts import read_hosts_entry

    out = []
    if e.body_id() != e.entry_id:
        out.append("id differs from the body digest")
    try:
        change = read_hosts_entry(e.document)
    except Error as err:
        return [*out, err.reason()]
    key = keys.get(change.keyid)
    if key is None or key.role != "runner":
        out.append(f"it names {change.keyid[:12]}, which is no runner key registered before it")
    return out


_CHECKS = {
    "receipt": _statement,
    "review": _statement,
    "key": _key,
    "revocation": _revocation,
    "plan": _plan,
    "alias": _alias,
    "hosts": _hosts,
}


def _entries(store: Store, rows: _Rows, rep: AuditReport) -> tuple[list[bytes], dict[str, KeyInfo]]:
    """Check every entry in log order; returns the leaves and the keys as the log built them."""
    keys: dict[str, KeyInfo] = {}
    leaves: list[bytes] = []
    expected = 0
    legacy = True
    for e in store.entries():
        where = f"entry {e.seq} ({e.entry_id[:19]})"
        if e.seq != expected:
            gone = (
                f"entry {expected} is"
                if e.seq == expected + 1
                else f"entries {expected}..{e.seq - 1} are"
            )
            rep.problems.append(f"sequence gap: {gone} missing")
        expected = e.seq + 1
        rep.entries += 1
        rows.kinds[e.seq] = e.kind
        leaf = merkle.entry_leaf(e.seq, e.logged_at or "", e.body)
        if leaf.hex() == e.stored_leaf_hash:
            legacy = False
        elif legacy and merkle.leaf_hash(e.body).hex() == e.stored_leaf_hash:
            # Ledgers written before leaves committed to seq and time start
            # with body-only leaves; once one entry commits, all later must.
            leaf = merkle.leaf_hash(e.body)
        else:
            rep.problems.append(f"{where}: stored leaf hash differs from its seq, time and body")
        leaves.append(leaf)
        try:
            e.document  # noqa: B018 - a body that is not JSON is one problem, not several
        except Error:
            rep.problems.append(f"{where}: body is not JSON")
            continue
        check = _CHECKS.get(e.kind)
        if check is None:
            rep.problems.append(f"{where}: unknown kind {e.kind!r}")
            continue
        rep.problems.extend(f"{where}: {p}" for p in check(e, rows, keys))
    return leaves, keys


def _artifacts(store: Store, rows: _Rows) -> Iterable[str]:
    """Each stored artifact against its digest and against what a receipt says of it."""
    from ledger.evidence.errors import Error
    from ledger.write.artifacts import for_ledger

    files = for_ledger(store.url)
    for a in store.table_rows(ARTIFACT, ARTIFACT.c.sha256):
        content = bytes(a["content"])
        where = f"artifact {a['sha256'][:12]}"
        if not content and a["size"]:
            # Kept in the artifact store; older ledgers hold the bytes in the row.
            try:
                content = files.get(a["sha256"])
            except Error as e:
                yield f"{where}: {e.reason()}"
                continue
        if sha256_hex(content) != a["sha256"] or len(content) != a["size"]:
            yield f"{where}: content differs from its digest"
        named = rows.artifacts.get(a["sha256"])
        if named is None:
            if not rows.unread:
                yield f"{where}: named by no receipt"
        elif (a["media_type"], a["size"]) not in named:
            yield f"{where}: media type or size differs from the receipts that name it"


def _checkpoints(
    store: Store, leaves: list[bytes], keys: dict[str, KeyInfo], rep: AuditReport
) -> None:
    checkpoints = store.table_rows(CHECKPOINT, CHECKPOINT.c.size)
    roots = _roots_at(leaves, {int(cp["size"]) for cp in checkpoints})
    for cp in checkpoints:
        rep.checkpoints += 1
        size = int(cp["size"])
        if size > len(leaves):
            rep.problems.append(f"checkpoint {size}: larger than the log ({len(leaves)} entries)")
            continue
        want = roots[size]
        if want.hex() != cp["root"]:
            rep.problems.append(f"checkpoint {size}: root differs from the recomputed log")
        try:
            _, c = ledger_signer(keys.values(), cp["note"].encode("utf-8", "surrogateescape"))
        except Error as e:
            why = e.reason().removeprefix("checkpoint: ")
            rep.problems.append(f"checkpoint {size}: signature or root does not hold ({why})")
            continue
        if c.root != want or c.size != size:
            rep.problems.append(
                f"checkpoint {size}: signature or root does not hold (signed root differs)"
            )


def _cosignatures(store: Store, rep: AuditReport) -> None:
    """Each kept cosignature line verifies, by the witness key its row names,
    over the checkpoint of its size."""
    from ledger._internal.checkpoint import parse_checkpoint
    from ledger.transparency.cosignature import cosigned_by
    from ledger.transparency.vkey import WITNESS_ED25519, parse_vkey

    notes = {int(cp["size"]): cp["note"] for cp in store.table_rows(CHECKPOINT, CHECKPOINT.c.size)}
    for row in store.table_rows(COSIGNATURE, COSIGNATURE.c.size):
        size, where = int(row["size"]), f"cosignature on checkpoint {row['size']}"
        try:
            vkey = parse_vkey(row["witness"])
            if vkey.sig_type != WITNESS_ED25519:
                raise VerificationError("not a witness key")
            where = f"cosignature of {vkey.name} on checkpoint {size}"
            if size not in notes:
                raise VerificationError("no checkpoint of that size")
            cp = parse_checkpoint((notes[size] + row["line"]).encode())
            if cosigned_by(cp, vkey) is None:
                raise VerificationError("does not verify over the checkpoint")
        except Error as e:
            rep.problems.append(f"{where}: {e.reason()}")


def audit(store: Store) -> AuditReport:
    rep = AuditReport()
    rows = _Rows.load(store)
    leaves, keys = _entries(store, rows, rep)
    rep.problems.extend(rows.unexplained())
    rep.problems.extend(_artifacts(store, rows))
    rep.root = merkle.root(leaves).hex()
    _checkpoints(store, leaves, keys, rep)
    _cosignatures(store, rep)
    # A byte that is not UTF-8 came back surrogate-escaped: shown as \udcXX, printable.
    rep.problems = [p.encode("utf-8", "backslashreplace").decode() for p in rep.problems]
    return rep


def _roots_at(leaves: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    """The tree root at each size, in one pass over the leaves (not one pass each)."""
    tree = merkle.CompactRange()
    roots = {0: tree.root()} if 0 in sizes else {}
    for i, leaf in enumerate(leaves, 1):
        tree.append(leaf)
        if i in sizes:
            roots[i] = tree.root()
    return roots
