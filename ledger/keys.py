"""Ed25519 keys: ids, local private-key files, PEM import/export.

Private keys live under LEDGER_KEYS (default ~/.config/ledger/keys), one PEM
file per key, mode 0600; the database only ever holds public keys.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ledger.errors import InputError, NotFoundError, UsageError

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
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key."""
    return hashlib.sha256(raw_public(key)).hexdigest()


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_public_pem(data: bytes, what: str = "PEM") -> Ed25519PublicKey:
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


@dataclass(frozen=True, slots=True)
class KeyInfo:
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


@dataclass(frozen=True, slots=True)
class LocalKey:
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


@dataclass(frozen=True, slots=True)
class KeyDir:
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
