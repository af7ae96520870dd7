"""Ed25519 keys: ids, local private-key files, PEM import/export.

Private keys live under LEDGER_KEYS (default ~/.config/ledger/keys), one PEM
file per key, mode 0600; the database only ever holds public keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NamedTuple

# Not `cryptography...serialization` at import: it loads every key format
# (SSH, PKCS#12), most of `ledger verify BUNDLE`'s start-up; the PEMs this
# ledger writes are read without it (`_ed25519_pem`).
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ledger.evidence.errors import InputError, NotFoundError, UsageError

__all__ = [
    "KeyDir",
    "KeyInfo",
    "LocalKey",
    "Role",
    "active_ledger_key",
    "check_not_world_writable",
    "find_key",
    "key_id",
    "load_public_pem",
    "public_pem",
    "raw_public",
    "valid_key_name",
]

Role = Literal["runner", "reviewer", "ledger"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_key_name(name: str) -> bool:
    """Letters, digits, `.`, `_`, `-` (64 at most): a name that is safe in a file
    name and on a terminal."""
    return bool(_NAME.match(name))


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes_raw()


def key_id(key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key."""
    return hashlib.sha256(raw_public(key)).hexdigest()


def public_pem(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# The DER prefixes of an Ed25519 SubjectPublicKeyInfo and of an unencrypted
# PKCS#8 Ed25519 private key (RFC 8410), each followed by the 32 key bytes.
_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
_PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")
_PEM_FORMS = {
    # label -> (DER prefix, DER length) of the one-line PEMs this ledger writes
    b"PUBLIC": (_SPKI_PREFIX, 44),
    b"PRIVATE": (_PKCS8_PREFIX, 48),
}


def _ed25519_pem(data: bytes) -> Ed25519PublicKey | None:
    """The public key of an Ed25519 PEM exactly as `public_pem` and `KeyDir.create`
    write it (one base64 line); None for any other form, which cryptography's PEM
    reader then reads. Same key either way (tests/ledger/evidence/test_keys_pem.py)."""
    lines = data.split(b"\n")
    if len(lines) != 4 or lines[3] != b"":
        return None
    label = lines[0].removeprefix(b"-----BEGIN ").removesuffix(b" KEY-----")
    form = _PEM_FORMS.get(label)
    if form is None or lines[0] != b"-----BEGIN " + label + b" KEY-----":
        return None
    if lines[2] != b"-----END " + label + b" KEY-----":
        return None
    try:
        der = base64.b64decode(lines[1], validate=True)
    except (binascii.Error, ValueError):
        return None
    prefix, length = form
    if len(der) != length or not der.startswith(prefix):
        return None
    key = der[len(prefix) :]
    if label == b"PUBLIC":
        return Ed25519PublicKey.from_public_bytes(key)
    return Ed25519PrivateKey.from_private_bytes(key).public_key()


def load_public_pem(data: bytes, what: str = "PEM") -> Ed25519PublicKey:
    fast = _ed25519_pem(data)
    if fast is not None:
        return fast
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            # A private key file also yields its public key: convenient for --trust.
            priv = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise InputError(f"{what} is not a PEM public key") from None
        if not isinstance(priv, Ed25519PrivateKey):
            raise InputError(f"{what} is not an Ed25519 key") from None
        return priv.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{what} is not an Ed25519 public key")
    return key


# The records here are NamedTuples, not dataclasses: `ledger verify BUNDLE`
# reads keys, and importing `dataclasses` (and `inspect` with it) and building
# each class would be a fifth of its start-up.
class KeyInfo(NamedTuple):
    """A public key as the log registered it: name, role, position, revocation."""

    keyid: str
    name: str
    role: str
    public: Ed25519PublicKey
    seq: int
    revoked_seq: int | None = None
    revoked_reason: str | None = None
    registered_by: str | None = None
    """The token holder who registered it over HTTP (None: on the ledger's host)."""

    @property
    def active(self) -> bool:
        return self.revoked_seq is None


def find_key(keys: Mapping[str, KeyInfo], ref: str) -> KeyInfo:
    """The one registered key named `ref`, or whose id is or starts with `ref`."""
    want = ref.strip().lower()
    matches = [k for k in keys.values() if k.name == ref or (want and k.keyid.startswith(want))]
    if not matches:
        raise UsageError(f"no registered key matches {ref!r}")
    if len(matches) > 1:
        raise UsageError(f"{ref!r} matches {len(matches)} registered keys; give more of the key id")
    return matches[0]


def active_ledger_key(keys: Mapping[str, KeyInfo]) -> KeyInfo:
    """The newest active key with role `ledger` (it signs checkpoints)."""
    live = [k for k in keys.values() if k.role == "ledger" and k.active]
    if not live:
        raise UsageError("this ledger has no active ledger key; run `ledger init`")
    return max(live, key=lambda k: k.seq)


class LocalKey(NamedTuple):
    name: str
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def keyid(self) -> str:
        return key_id(self.public)

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def check_not_world_writable(path: Path, what: str) -> None:
    """Refuse a file or folder anyone on the host could rewrite (a planted key or token)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & stat.S_IWOTH:
        raise UsageError(f"{what} {path} is writable by anyone; run: chmod o-w {path}")


def default_key_dir() -> Path:
    env = os.environ.get("LEDGER_KEYS")
    if env:
        return Path(env)
    return Path.home() / ".config" / "ledger" / "keys"


class KeyDir(NamedTuple):
    """A folder of private keys, `<name>.pem`, each mode 0600."""

    path: Path

    @classmethod
    def default(cls) -> KeyDir:
        return cls(default_key_dir())

    def file(self, name: str) -> Path:
        if not _NAME.match(name):
            raise UsageError(f"invalid key name {name!r} (letters, digits, . _ -; max 64)")
        return self.path / f"{name}.pem"

    def create(self, name: str) -> LocalKey:
        f = self.file(name)
        if f.exists():
            raise UsageError(f"a private key named {name!r} already exists at {f}")
        check_not_world_writable(self.path, "key folder")
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        from cryptography.hazmat.primitives import serialization

        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # O_EXCL + mode at creation: the key is never readable by others, not even briefly.
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        return LocalKey(name, key)

    def load(self, name: str) -> LocalKey:
        f = self.file(name)
        check_not_world_writable(self.path, "key folder")
        try:
            data = f.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"no private key named {name!r} under {self.path}") from None
        if f.stat().st_mode & 0o077:
            raise UsageError(f"private key {f} is readable by others; chmod 600 it")
        from cryptography.hazmat.primitives import serialization

        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise InputError(f"{f} is not an unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise InputError(f"{f} is not an Ed25519 private key")
        return LocalKey(name, key)

    def names(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(p.stem for p in self.path.glob("*.pem"))
