"""What a verification established, fact by fact, and what it could not.

One "verified" hides what was not checked: a key revoked after the checkpoint a
bundle carries, a receipt revoked since, a checkpoint no witness cosigned. So a
verification states each fact apart, each with what it holds "as of":

- `signature`: the DSSE signature verifies, by a key the log registered before
  the entry, with the role that may sign it (the role at signing time);
- `inclusion`: the entry is in the log up to a signed checkpoint (size, time);
- `witnesses`: the checkpoint carries the quorum of a tlog-policy (the names);
- `key_status`: the signer's key as the key registry given has it (the bundle's
  key and revocation entries, proven up to its checkpoint, or the ledger's own
  table), with its freshness: `fresh` (as of the newest checkpoint the verifier
  holds), `stale` (the verifier holds a newer checkpoint than the registry's:
  anything revoked after it is unseen) or `unknown` (offline, nothing newer held);
- `revocation`: whether the receipt itself is revoked, as of the same checkpoint.

The policy (`Requirements`) decides which facts must be established. By
default: the signature, the inclusion, and the key's and receipt's status as of
the registry given, never `stale`, never revoked; with `--policy`, the witness
quorum; with `--fresh`, freshness `fresh` too. So an offline verification that
holds a checkpoint newer than its bundle's says "key status: unknown after
checkpoint N", not "verified"; today's `ledger verify FILE --trust PEM` (no newer
checkpoint) establishes every fact it requires, as it did.

Which time a receipt states never matters: a key counts for entries logged
before its revocation (by log position), so a revoked key's receipt with a
backdated time never passes.

Not dataclasses: offline verification starts without `dataclasses`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ledger.evidence.signed_revocation import UNSIGNED

if TYPE_CHECKING:
    from ledger.evidence.entry import ReceiptRevocation

__all__ = [
    "FRESHNESS",
    "Fact",
    "Registry",
    "Requirements",
    "RevokedReceipt",
    "establish",
    "freshness",
    "revocation_authority",
    "revoked_receipt",
]

FRESHNESS = ("fresh", "stale", "unknown")
_NOT_FRESH = " (nothing newer held; --fresh needs a --checkpoint of the bundle's size)"


class Fact(NamedTuple):
    """One fact of a verification."""

    name: str
    established: bool
    required: bool
    text: str
    """One line for people: what holds, as of what, or what could not be established."""
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "established": self.established,
            "required": self.required,
            "text": self.text,
            **self.detail,
        }


class RevokedReceipt(NamedTuple):
    """The receipt's revocation as the registry holds it."""

    seq: int
    reason: str
    review: str | None
    authority: str | None
    """Who vouches for it; None: a counterexample's revocation without its
    independent review, which leaves the receipt standing (pending review)."""
    problem: str | None = None
    """Why it counts for nothing: its signature does not verify by a key that may
    assert it (`ledger.evidence.signed_revocation`); the receipt stands."""
    unsigned: bool = False
    """Of the earlier, unsigned form: counted as before, and said to be so."""


class Registry(NamedTuple):
    """The key registry a verification was given, and what it says of this entry."""

    as_of: int
    """The size of the checkpoint the registry is proven up to (the log's size, in
    the ledger itself)."""
    source: str
    """`bundle` (its key and revocation entries) or `ledger` (the ledger's own table)."""
    key_revoked: tuple[int, str] | None = None
    """The signer's key revocation (its log position and reason), if any is held."""
    receipt_revoked: RevokedReceipt | None = None


class Requirements(NamedTuple):
    """What the verifier's policy requires beyond the signature and the inclusion."""

    witnesses: bool = False
    """A tlog-policy was given: its quorum must have cosigned the checkpoint."""
    fresh: bool = False
    """`--fresh`: the key's and receipt's status as of the newest checkpoint held."""


def freshness(registry: Registry, newest: int | None) -> str:
    """`fresh`, `stale` or `unknown`: the registry against the newest checkpoint the
    verifier holds (`newest`: its size, None where it holds none but the bundle's)."""
    if registry.source == "ledger":
        return "fresh"
    if newest is None:
        return "unknown"
    return "fresh" if newest <= registry.as_of else "stale"


def establish(
    *,
    signer: dict[str, Any],
    entry: int,
    checkpoint: dict[str, Any],
    registry: Registry,
    newest: int | None,
    witnesses: list[str] | None,
    required: Requirements,
) -> tuple[Fact, ...]:
    """Every fact of one verification, each with whether the policy requires it.

    `signer`: keyid, name, role and the key's own log position (`registered_at`);
    `checkpoint`: size, origin and time of the checkpoint the inclusion was proven
    against; `witnesses`: the names that cosigned it, where a policy was checked."""
    fresh = freshness(registry, newest)
    after = f"; the newest checkpoint held is at size {newest}" if fresh == "stale" else ""
    unseen = {"fresh": " (fresh)", "unknown": "; after it unknown (nothing newer held)"}
    when = (
        f" ({checkpoint['time_from']}: it existed by {checkpoint['time']})"
        if checkpoint.get("time")
        else " (no time stated: the witnesses' cosignatures give one, with --policy)"
    )
    facts = [
        Fact(
            "signature",
            True,
            True,
            f"signature: verifies by {signer['name']} ({signer['keyid'][:12]}), role "
            f"{signer['role']} when it signed (key registered at entry "
            f"{signer['registered_at']}, before entry {entry})",
            {
                "keyid": signer["keyid"],
                "name": signer["name"],
                "role_at_signing": signer["role"],
                "registered_at": signer["registered_at"],
            },
        ),
        Fact(
            "inclusion",
            True,
            True,
            f"inclusion: entry {entry} is in the log up to checkpoint {checkpoint['size']}" + when,
            {"index": entry, "checkpoint": checkpoint},
        ),
    ]
    if witnesses is None:
        facts.append(
            Fact(
                "witnesses",
                False,
                required.witnesses,
                "witnesses: not checked (no --policy names a quorum)",
                {"quorum": None},
            )
        )
    else:
        facts.append(
            Fact(
                "witnesses",
                True,
                required.witnesses,
                f"witnesses: the quorum cosigned checkpoint {checkpoint['size']} "
                f"({', '.join(witnesses) or 'none'})",
                {"quorum": witnesses},
            )
        )
    facts.append(_key_status(registry, fresh, entry, after, unseen.get(fresh, ""), required))
    facts.append(_revocation(registry, fresh, after, unseen.get(fresh, ""), required))
    return tuple(facts)


def _key_status(
    registry: Registry, fresh: str, entry: int, after: str, unseen: str, required: Requirements
) -> Fact:
    n = registry.as_of
    status, revoked_at, reason = "active", None, None
    if registry.key_revoked is not None:
        revoked_at, reason = registry.key_revoked
        status = "revoked"
    detail = {
        "status": status,
        "revoked_at": revoked_at,
        "reason": reason,
        "as_of": n,
        "freshness": fresh,
    }
    if revoked_at is not None and revoked_at < entry:
        # verify_envelope refuses this before any fact is stated; kept for the record.
        return Fact(
            "key_status",
            False,
            True,
            f"key status: revoked at entry {revoked_at}, before entry {entry} was logged: {reason}",
            detail,
        )
    if fresh == "stale" or (required.fresh and fresh != "fresh"):
        return Fact(
            "key_status",
            False,
            True,
            f"key status: unknown after checkpoint {n}{after or _NOT_FRESH}",
            {**detail, "status": "unknown"},
        )
    text = f"key status: active as of checkpoint {n}"
    if revoked_at is not None:
        text = (
            f"key status: revoked at entry {revoked_at} ({reason}), after entry {entry}: "
            f"entries logged before its revocation keep counting (as of checkpoint {n})"
        )
    return Fact("key_status", True, True, f"{text}{unseen}", detail)


def _revocation(
    registry: Registry, fresh: str, after: str, unseen: str, required: Requirements
) -> Fact:
    n = registry.as_of
    rev = registry.receipt_revoked
    detail: dict[str, Any] = {"status": "not revoked", "as_of": n, "freshness": fresh}
    if rev is not None:
        detail.update(
            status="revoked"
            if rev.authority is not None
            else "not counted"
            if rev.problem is not None
            else "pending",
            seq=rev.seq,
            reason=rev.reason,
            review=rev.review,
            authority=rev.authority,
            signature=UNSIGNED if rev.unsigned else rev.problem or "signed",
        )
    # A revocation the registry holds stands, whatever was logged after it.
    if rev is not None and rev.authority is not None:
        how = f", {UNSIGNED}" if rev.unsigned else ""
        return Fact(
            "revocation",
            False,
            True,
            f"revoked: {rev.reason} (entry {rev.seq}, {rev.authority}{how}; as of checkpoint {n})",
            detail,
        )
    if fresh == "stale" or (required.fresh and fresh != "fresh"):
        return Fact(
            "revocation",
            False,
            True,
            f"revocation status: unknown after checkpoint {n}{after or _NOT_FRESH}",
            {**detail, "status": "unknown"},
        )
    text = f"revocation: not revoked as of checkpoint {n}"
    if rev is not None and rev.problem is not None:
        text = (
            f"revocation: not revoked as of checkpoint {n} (entry {rev.seq} does not count:"
            f" {rev.problem})"
        )
    elif rev is not None:
        text = (
            f"revocation: pending review as of checkpoint {n} (entry {rev.seq}: "
            f"{rev.reason}; a counterexample's revocation needs an independent dispute)"
        )
    return Fact("revocation", True, True, f"{text}{unseen}", detail)


def revocation_authority(
    outcome: str,
    signer: str,
    review: str | None,
    before: int,
    reviews: list[tuple[Any, ...]],
    by: str = "operator",
    revoker: str | None = None,
) -> str | None:
    """Who vouches for revoking a receipt signed by `signer` with `outcome`, by a
    revocation logged at `before` naming `review` on the word of `by`; None when
    nobody does.

    The judge's rule (`ledger.qualification.revocation.authority`), for a verifier
    that has no judge: a counterexample's revocation needs an independent dispute,
    and so does a reviewer's revocation of anything. A verifier has no plan: a
    reviewer's revocation of a pass on such a dispute refuses the receipt here,
    wherever the plan leaves revoking a pass to the operator (failing closed).
    `reviews`: (id, verdict, signer key id, log position) of verified reviews of it.
    A reviewer's signed revocation (`revoker`, its key id) rests on its own dispute.
    """
    if outcome != "failed" and by != "reviewer":
        return "the ledger's operator"
    own = by == "reviewer" and revoker is not None
    for rid, verdict, of, seq in reviews:
        if own and of != revoker:
            continue
        if rid == review and verdict == "dispute" and of != signer and seq < before:
            return f"review {rid.removeprefix('sha256:')[:12]} disputes it"
    return None


def revoked_receipt(
    rev: ReceiptRevocation, outcome: str, signer: str, reviews: list[tuple[Any, ...]]
) -> RevokedReceipt:
    """The receipt's revocation `rev` as the registry holds it, weighed: by nobody where
    its signature does not count (`rev.problem`), else by `revocation_authority`."""
    who = None
    if rev.problem is None:
        who = revocation_authority(
            outcome, signer, rev.review, rev.seq, reviews, rev.by, rev.signer
        )
    return RevokedReceipt(rev.seq, rev.reason, rev.review, who, rev.problem, rev.unsigned)
