"""Offline proofs of logging (C2SP tlog-proof, `.tlog-proof` files).

    c2sp.org/tlog-proof@v1
    [extra <base64>]
    index <N>
    <base64 hash>            (zero or more: the RFC 6962 inclusion proof, leaf side first)
    <empty line>
    <the checkpoint, verbatim, cosignatures included>

A ledger's leaf is ``SHA-256(0x00 || "<index>\\n<logged_at>\\n" || entry body)``
(``SHA-256(0x00 || body)`` for entries logged before leaves committed to
their time); ``extra`` carries the logging time, the one part of the leaf a
verifier holding the entry's body cannot know. It is not authenticated by
itself: a wrong time gives a wrong leaf, and the inclusion proof fails.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any, NamedTuple

from ledger._internal import merkle
from ledger._internal.checkpoint import Checkpoint
from ledger.evidence.errors import InputError, VerificationError
from ledger.transparency.policy import Policy

__all__ = [
    "HEADER",
    "TlogProof",
    "format_proof",
    "leaf_of",
    "parse_proof",
    "proof_of_bundle",
    "proof_path",
    "verify_proof",
]

HEADER = "c2sp.org/tlog-proof@v1"
_INDEX = re.compile(r"index (0|[1-9][0-9]*)")


class TlogProof(NamedTuple):
    extra: bytes | None
    leaf_index: int
    proof: list[bytes]
    checkpoint: bytes


def _b64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"tlog-proof: {what} is not base64") from None
    if base64.b64encode(raw).decode() != text:
        raise InputError(f"tlog-proof: {what} is not canonical base64")
    return raw


def format_proof(p: TlogProof) -> bytes:
    lines = [HEADER]
    if p.extra is not None:
        lines.append("extra " + base64.b64encode(p.extra).decode())
    lines.append(f"index {p.leaf_index}")
    lines += [base64.b64encode(h).decode() for h in p.proof]
    return "".join(line + "\n" for line in lines).encode() + b"\n" + p.checkpoint


def parse_proof(data: bytes) -> TlogProof:
    """Parse a `.tlog-proof`; InputError with the reason (the checkpoint is not checked here)."""
    head, sep, checkpoint = data.partition(b"\n\n")
    if not sep or not checkpoint:
        raise InputError("tlog-proof: no empty line before the checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise InputError("tlog-proof: the header is not ASCII") from None
    if lines[0] != HEADER:
        raise InputError(f"tlog-proof: the first line is not {HEADER}")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = _b64(rest.pop(0).removeprefix("extra "), "extra")
    m = _INDEX.fullmatch(rest.pop(0)) if rest else None
    if m is None:
        raise InputError("tlog-proof: no `index N` line")
    proof = []
    for i, line in enumerate(rest):
        h = _b64(line, f"proof line {i + 1}")
        if len(h) != merkle.HASH_SIZE:
            raise InputError(f"tlog-proof: proof line {i + 1} is not one SHA-256 hash")
        proof.append(h)
    return TlogProof(extra, int(m.group(1)), proof, checkpoint)


def leaf_of(index: int, body: bytes, extra: bytes | None) -> bytes:
    """The ledger's leaf hash of an entry, from its body and the proof's extra."""
    if extra is None:
        return merkle.leaf_hash(body)
    return merkle.leaf_hash(b"%d\n" % index + extra + b"\n" + body)


def proof_of_bundle(doc: dict[str, Any]) -> bytes:
    """The `.tlog-proof` of an exported bundle's entry (its checkpoint, cosigned or not)."""
    entry = doc["entry"]
    logged_at = entry.get("logged_at")
    return format_proof(
        TlogProof(
            None if logged_at is None else str(logged_at).encode(),
            int(entry["index"]),
            [bytes.fromhex(h) for h in entry["proof"]],
            str(doc["checkpoint"]).encode(),
        )
    )


def proof_path(bundle: Path) -> Path:
    """Where `export --proof` writes: beside the bundle, `.json` replaced by `.tlog-proof`."""
    if bundle.suffix == ".json":
        return bundle.with_suffix(".tlog-proof")
    return bundle.with_name(bundle.name + ".tlog-proof")


def verify_proof(data: bytes, body: bytes, policy: Policy) -> tuple[Checkpoint, set[str]]:
    """Check a `.tlog-proof` of the entry `body` offline: its checkpoint under
    `policy` (log signature and witness quorum), then the entry's inclusion.
    Returns the checkpoint and the witnesses that cosigned it."""
    p = parse_proof(data)
    cp, cosigned = policy.check(p.checkpoint)
    try:
        merkle.verify_inclusion(
            p.leaf_index, cp.size, leaf_of(p.leaf_index, body, p.extra), p.proof, cp.root
        )
    except merkle.MerkleError as e:
        raise VerificationError(
            f"tlog-proof: the entry is not in the checkpointed log: {e}"
        ) from None
    return cp, cosigned
