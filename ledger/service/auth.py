"""Bearer tokens for the writes that no signature authorises: key registration
and revocation, artifact uploads, signing a checkpoint, the audit.

`ledger serve --tokens FILE` reads one `HOLDER sha256:HEX` line per token
(blank lines and `#` comments skipped); `ledger token new HOLDER --tokens FILE`
appends one and prints the token once. Only the SHA-256 of a token is kept:
a token is 32 random bytes, so a plain hash is as hard to invert as the token
is to guess, and a leaked file does not let anyone write.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import Error, UsageError

__all__ = ["AuthError", "Tokens", "new_token"]

_LINE = re.compile(r"^([A-Za-z0-9._@-]{1,64})\s+sha256:([0-9a-f]{64})$")


class AuthError(Error):
    """No token, or one the server does not hold."""

    http_status = 401


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    hashes: dict[str, str]
    """sha256 hex of each token -> its holder."""

    @classmethod
    def load(cls, path: Path | None) -> Tokens:
        if path is None:
            return cls({})
        try:
            text = path.read_text()
        except OSError as e:
            raise UsageError(f"--tokens {path}: {e.strerror}") from None
        out: dict[str, str] = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _LINE.match(line)
            if not m:
                raise UsageError(f"--tokens {path}:{n}: expected 'HOLDER sha256:HEX'")
            out[m.group(2)] = m.group(1)
        return cls(out)

    def holder(self, authorization: str | None) -> str:
        """The holder of the request's bearer token, or AuthError."""
        if not self.hashes:
            raise AuthError("this server accepts no tokens (start it with --tokens FILE)")
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("this needs a bearer token (Authorization: Bearer TOKEN)")
        got = _hash(token.strip())
        for h, holder in self.hashes.items():
            # Constant time, so the comparison says nothing about near misses.
            if hmac.compare_digest(h, got):
                return holder
        raise AuthError("unknown token")


def new_token(holder: str, path: Path) -> str:
    """Append a fresh token for `holder` to the tokens file; returns the token."""
    if not re.fullmatch(r"[A-Za-z0-9._@-]{1,64}", holder):
        raise UsageError(f"holder {holder!r}: letters, digits and ._@- only (64 at most)")
    if path.exists():
        Tokens.load(path)  # refuse to append to a file the server could not read
    token = "ldg_" + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{holder} sha256:{_hash(token)}\n")
    path.chmod(0o600)
    return token
