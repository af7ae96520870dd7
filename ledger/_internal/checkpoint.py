"""Log checkpoints as C2SP signed notes (tlog-checkpoint, signed-note, Ed25519).

Body (the signed text)::

    <origin>\\n<size>\\n<base64(root)>\\n[<extension line>\\n ...]

Note: the body, a blank line, then one line per signature::

    — <key name> <base64(key hint || signature)>\\n

The key hint is the first 4 bytes of ``SHA-256(name || "\\n" || 0x01 || raw public key)``
and the signature is Ed25519 over the body bytes exactly as they appear in the note.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger.evidence.errors import CheckpointError

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "NoteSignature",
    "format_body",
    "key_hint",
    "parse_checkpoint",
    "sign_checkpoint",
    "verify_by_key",
    "verify_checkpoint",
]

_SIG_PREFIX = "— "  # em dash U+2014, then a space
_ED25519_ALG = b"\x01"
_HINT_SIZE = 4
_ED25519_SIG_SIZE = 64
_ROOT_SIZE = 32
_MAX_SIZE = 2**64 - 1
# Same cap as the Go reference: parsing a note must not cost unbounded work.
_MAX_SIGNATURES = 100
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


# NamedTuples, not dataclasses: offline verification starts without `dataclasses`.
class NoteSignature(NamedTuple):
    """One signature line: who signed (name and 4-byte key hint) and the signature bytes."""

    name: str
    key_hint: bytes
    signature: bytes


class Checkpoint(NamedTuple):
    """A parsed checkpoint: the log's origin, tree size and root, and the note's signatures."""

    origin: str
    size: int
    root: bytes
    signatures: tuple[NoteSignature, ...] = ()
    extensions: tuple[str, ...] = ()

    @property
    def timestamp(self) -> str | None:
        """The `timestamp <UTC time>` extension line, when the note has one."""
        for line in self.extensions:
            if line.startswith("timestamp "):
                return line.removeprefix("timestamp ")
        return None

    @property
    def body(self) -> bytes:
        """The signed text of this checkpoint."""
        return format_body(self.origin, self.size, self.root, extensions=self.extensions)


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def _has_control(text: str) -> bool:
    return any(c < " " for c in text)


def _b64decode_canonical(text: str) -> bytes:
    """Decode standard padded base64, refusing any other spelling of the same bytes."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CheckpointError(f"bad base64 {text!r}") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise CheckpointError(f"non-canonical base64 {text!r}")
    return raw


def _raw_public_key(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes_raw()


def key_hint(key_name: str, public_key: Ed25519PublicKey) -> bytes:
    """Return the signed-note key hint: ``SHA-256(name || "\\n" || 0x01 || key)[:4]``."""
    digest = hashlib.sha256(
        key_name.encode("utf-8") + b"\n" + _ED25519_ALG + _raw_public_key(public_key)
    ).digest()
    return digest[:_HINT_SIZE]


def format_body(origin: str, size: int, root: bytes, *, extensions: Sequence[str] = ()) -> bytes:
    """Return the checkpoint body ``origin\\nsize\\nbase64(root)\\n`` (plus extension lines).

    Raises ValueError for an empty origin or one with control characters, a size
    outside 0..2**64-1, a root that is not 32 bytes, or an empty extension line.
    """
    if not origin or _has_control(origin):
        raise ValueError(
            f"origin must be one non-empty line without control characters: {origin!r}"
        )
    if not 0 <= size <= _MAX_SIZE:
        raise ValueError(f"tree size {size} is outside 0..2**64-1")
    if len(root) != _ROOT_SIZE:
        raise ValueError(f"root must be {_ROOT_SIZE} bytes, got {len(root)}")
    for line in extensions:
        if not line or _has_control(line):
            raise ValueError(f"extension lines must be non-empty single lines: {line!r}")
    lines = [origin, str(size), base64.b64encode(root).decode("ascii"), *extensions]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def sign_checkpoint(
    origin: str,
    size: int,
    root: bytes,
    *,
    key_name: str,
    private_key: Ed25519PrivateKey,
    extensions: Sequence[str] = (),
) -> bytes:
    """Return the signed note for a checkpoint, signed by ``private_key`` under ``key_name``.

    Raises ValueError for an invalid key name or body (see ``format_body``).
    """
    if not _valid_name(key_name):
        raise ValueError(f"key name must be non-empty, without spaces or '+': {key_name!r}")
    body = format_body(origin, size, root, extensions=extensions)
    hint = key_hint(key_name, private_key.public_key())
    signature = private_key.sign(body)
    line = f"{_SIG_PREFIX}{key_name} {base64.b64encode(hint + signature).decode('ascii')}\n"
    return body + b"\n" + line.encode("utf-8")


def _split_note(note: bytes) -> tuple[bytes, str, str]:
    """Split a note into (body bytes, body text, signature block text)."""
    try:
        text = note.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError("checkpoint note is not UTF-8") from exc
    if any(c < " " and c != "\n" for c in text):
        raise CheckpointError("checkpoint note contains control characters")
    # The signature block follows the last blank line; a body has no blank lines.
    split = text.rfind("\n\n")
    if split < 0:
        raise CheckpointError("checkpoint note lacks the blank line before its signatures")
    body_text, sig_block = text[: split + 1], text[split + 2 :]
    if not sig_block:
        raise CheckpointError("checkpoint note has no signature lines after its last blank line")
    if not sig_block.endswith("\n"):
        raise CheckpointError("checkpoint note does not end with a newline")
    return body_text.encode("utf-8"), body_text, sig_block


def _parse_signatures(sig_block: str) -> tuple[NoteSignature, ...]:
    lines = sig_block[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise CheckpointError(f"checkpoint note has more than {_MAX_SIGNATURES} signatures")
    signatures: list[NoteSignature] = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_SIG_PREFIX):
            raise CheckpointError(f"signature line {number} does not start with '— '")
        name, sep, encoded = line[len(_SIG_PREFIX) :].partition(" ")
        if not sep or not encoded:
            raise CheckpointError(f"signature line {number} has no signature after the name")
        if not _valid_name(name):
            raise CheckpointError(f"signature line {number} has an invalid key name {name!r}")
        raw = _b64decode_canonical(encoded)
        if len(raw) <= _HINT_SIZE:
            raise CheckpointError(f"signature line {number} is too short")
        signatures.append(NoteSignature(name, raw[:_HINT_SIZE], raw[_HINT_SIZE:]))
    return tuple(signatures)


def _parse_body(body_text: str) -> tuple[str, int, bytes, tuple[str, ...]]:
    lines = body_text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("checkpoint body needs origin, size and root lines")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise CheckpointError("checkpoint origin is empty")
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError(f"checkpoint size {size_text!r} is not a decimal integer")
    size = int(size_text)
    if size > _MAX_SIZE:
        raise CheckpointError(f"checkpoint size {size_text} exceeds 2**64-1")
    root = _b64decode_canonical(root_text)
    if len(root) != _ROOT_SIZE:
        raise CheckpointError(f"checkpoint root is {len(root)} bytes, not {_ROOT_SIZE}")
    if any(not line for line in extensions):
        raise CheckpointError("checkpoint body has an empty line")
    return origin, size, root, tuple(extensions)


def _parse(note: bytes) -> tuple[Checkpoint, bytes]:
    body, body_text, sig_block = _split_note(note)
    origin, size, root, extensions = _parse_body(body_text)
    signatures = _parse_signatures(sig_block)
    return Checkpoint(origin, size, root, signatures, extensions), body


def parse_checkpoint(note: bytes) -> Checkpoint:
    """Parse a signed checkpoint note without checking any signature.

    Raises CheckpointError with the reason if the note is malformed.
    """
    return _parse(note)[0]


def verify_checkpoint(note: bytes, *, key_name: str, public_key: Ed25519PublicKey) -> Checkpoint:
    """Parse ``note`` and check its signature by ``public_key`` under ``key_name``.

    Every signature line carrying this key's name and hint must verify; lines of
    other keys (cosigners) are ignored. Raises CheckpointError with the reason.
    """
    if not _valid_name(key_name):
        raise CheckpointError(f"invalid key name {key_name!r}")
    checkpoint, body = _parse(note)
    hint = key_hint(key_name, public_key)
    named = [s for s in checkpoint.signatures if s.name == key_name]
    mine = [s for s in named if s.key_hint == hint]
    if not mine:
        if named:
            raise CheckpointError(
                f"checkpoint is signed by a different key named {key_name!r} "
                f"(key hint {named[0].key_hint.hex()}, expected {hint.hex()})"
            )
        names = ", ".join(sorted({s.name for s in checkpoint.signatures}))
        raise CheckpointError(f"checkpoint has no signature by {key_name!r} (signed by {names})")
    for sig in mine:
        if len(sig.signature) != _ED25519_SIG_SIZE:
            raise CheckpointError(
                f"signature by {key_name!r} is {len(sig.signature)} bytes, not {_ED25519_SIG_SIZE}"
            )
        try:
            public_key.verify(sig.signature, body)
        except InvalidSignature:
            raise CheckpointError(
                f"signature by {key_name!r} does not verify over the checkpoint body"
            ) from None
    return checkpoint


def verify_by_key(note: bytes, public_key: Ed25519PublicKey) -> Checkpoint:
    """Parse ``note`` and check every signature line of ``public_key``, whatever name
    it carries (a line is this key's when its hint is the key's under that name).

    One line of the key that does not verify refuses the note. Raises
    CheckpointError when none is there or one fails."""
    checkpoint, _ = _parse(note)
    names = {s.name for s in checkpoint.signatures if s.key_hint == key_hint(s.name, public_key)}
    if not names:
        raise CheckpointError("checkpoint has no signature by this key")
    for name in sorted(names):
        verify_checkpoint(note, key_name=name, public_key=public_key)
    return checkpoint
