"""A verifier's policy applied where a checkpoint is read: a bundle's, the
ledger's own. Each refuses with the one line `Policy.check` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.evidence.errors import VerificationError
from ledger.transparency.policy import parse_policy, witnessed_line

if TYPE_CHECKING:
    from ledger.store.store import Store

__all__ = ["quorum_in_ledger", "quorum_of", "witnessed_bundle", "witnessed_in_ledger"]


def witnessed_bundle(raw: bytes, policy: bytes) -> str:
    """The quorum line for a (verified) bundle's checkpoint."""
    from ledger.evidence.limits import load_json

    doc = load_json(raw, "bundle")
    return witnessed_line(parse_policy(policy), str(doc["checkpoint"]).encode())


def witnessed_in_ledger(store: Store, entry_id: str, policy: bytes) -> str:
    """The quorum line for the newest checkpoint covering `entry_id` (the entry's
    inclusion in its signed root checked), with the cosignatures kept for it."""
    from ledger.transparency.proofs import inclusion

    entry = store.resolve(entry_id)
    latest = store.latest_checkpoint()
    if latest is None or latest.size <= entry.seq:
        raise VerificationError(
            f"no checkpoint covers entry {entry.seq} yet: run `ledger log checkpoint --witnesses`"
        )
    return witnessed_line(parse_policy(policy), inclusion(store, entry.seq, None).note)


def quorum_of(note: bytes, policy: bytes) -> tuple[list[str], str | None]:
    """The names of the witnesses whose cosignatures make the policy's quorum on the
    checkpoint `note`, and the earliest time they cosigned it (UTC): the checkpoint
    existed by then (None where no cosignature gives a time). VerificationError
    naming what is missing where they do not make it."""
    import time

    from ledger.transparency.cosignature import cosigned_by

    parsed = parse_policy(policy)
    cp, cosigned = parsed.check(note)
    times = [
        t for name in cosigned if (t := cosigned_by(cp, parsed.witnesses[name].vkey)) is not None
    ]
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(times))) if times else None
    return sorted(cosigned), when


def quorum_in_ledger(store: Store, entry_id: str, policy: bytes) -> tuple[list[str], str | None]:
    """`quorum_of` the checkpoint that proves `entry_id`'s inclusion in this ledger."""
    from ledger.transparency.proofs import inclusion

    entry = store.resolve(entry_id)
    return quorum_of(inclusion(store, entry.seq, None).note, policy)
