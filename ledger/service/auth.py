"""Bearer tokens for the writes that no signature authorises, each naming its
holder and the roles it may use (least authority):

- `runner`: upload artifacts (and push an outbox, whose receipts are signed);
- `keys`: register and revoke runner and reviewer keys;
- `operator`: sign checkpoints, run the audit, revoke a receipt on the operator's word;
- `reviewer`: revoke a receipt on the holder's own signed dispute of it, which the
  revocation names (a pass only where the plan says so: `[review] revoke_pass`);
- `plans`: record which plan governs a base branch (`POST /v1/plans`): the job that
  runs on the base branch after a merge (trusted code), never a pull request's job,
  whose runner token runs the pull request's code.

No token registers, revokes or renames the ledger key: that is the operator's,
on the ledger's own host (`ledger init`, `ledger keys ...` with --db).

`ledger serve --tokens FILE` reads one `HOLDER sha256:HEX ROLE[,ROLE...]` line
per token (no roles: `runner`; blank lines and `#` comments skipped), and
reads it again whenever it changes, so a revoked or removed token stops
working within a request, without a restart. Only the SHA-256 of a token is
kept: a token is 32 random bytes, so a plain hash is as hard to invert as the
token is to guess, and a leaked file does not let anyone write.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from ledger.evidence.errors import Error, ForbiddenError, UsageError
from ledger.evidence.keys import check_not_world_writable

__all__ = [
    "ROLES",
    "AuthError",
    "ForbiddenError",
    "Grant",
    "TokenRole",
    "Tokens",
    "check_not_world_writable",
    "list_tokens",
    "new_token",
    "revoke_token",
]

TokenRole = Literal["runner", "keys", "operator", "plans", "read", "reviewer"]
ROLES: tuple[TokenRole, ...] = get_args(TokenRole)

_HOLDER = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_LINE = re.compile(r"^([A-Za-z0-9._@-]{1,64})\s+sha256:([0-9a-f]{64})(?:\s+([a-z,]+))?$")


class AuthError(Error):
    """No token, or one the server does not hold."""

    http_status = 401


@dataclass(frozen=True, slots=True)
class Grant:
    """One token's holder and roles."""

    holder: str
    roles: frozenset[TokenRole]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _roles(text: str | None, where: str) -> frozenset[TokenRole]:
    if not text:
        return frozenset({"runner"})
    out: set[TokenRole] = set()
    for r in text.split(","):
        if r not in ROLES:
            raise UsageError(f"{where}: unknown role {r!r} ({', '.join(ROLES)})")
        out.add(r)
    return frozenset(out)


def _parse(path: Path) -> dict[str, Grant]:
    check_not_world_writable(path, "tokens file")
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"--tokens {path}: {e.strerror}") from None
    out: dict[str, Grant] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise UsageError(f"--tokens {path}:{n}: expected 'HOLDER sha256:HEX [ROLE,...]'")
        out[m.group(2)] = Grant(m.group(1), _roles(m.group(3), f"--tokens {path}:{n}"))
    return out


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


@dataclass
class Tokens:
    grants: dict[str, Grant]
    """sha256 hex of each token -> its grant."""
    path: Path | None = None
    _seen: tuple[int, int, int, int] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, path: Path | None) -> Tokens:
        if path is None:
            return cls({})
        sig = _signature(path)
        return cls(_parse(path), path, sig)

    def _refresh(self) -> None:
        """Read the file again when it changed (a stat per request: cheap)."""
        if self.path is None:
            return
        sig = _signature(self.path)
        if sig == self._seen:
            return
        with self._lock:
            if sig == self._seen:
                return
            try:
                grants = {} if sig is None else _parse(self.path)
            except Error as e:
                # Fail closed: a file that no longer reads grants nothing.
                sys.stderr.write(f"ledger serve: tokens refused until fixed: {e.reason()}\n")
                grants = {}
            self.grants, self._seen = grants, sig

    def grant(self, authorization: str | None) -> Grant:
        """The grant of the request's bearer token, or AuthError."""
        self._refresh()
        if not self.grants and self.path is None:
            raise AuthError("this server accepts no tokens (start it with --tokens FILE)")
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("this needs a bearer token (Authorization: Bearer TOKEN)")
        got = _hash(token.strip())
        found: Grant | None = None
        for h, g in self.grants.items():
            # Constant time, so the comparison says nothing about near misses.
            if hmac.compare_digest(h, got):
                found = g
        if found is None:
            raise AuthError("unknown token")
        return found

    def holder(self, authorization: str | None, role: TokenRole) -> str:
        """The holder of the request's token when it carries `role`; else 401/403."""
        g = self.grant(authorization)
        if role not in g.roles:
            have = ", ".join(sorted(g.roles))
            raise ForbiddenError(f"token of {g.holder} ({have}) lacks the {role!r} role")
        return g.holder


def _check_holder(holder: str) -> None:
    if not _HOLDER.fullmatch(holder):
        raise UsageError(f"holder {holder!r}: letters, digits and ._@- only (64 at most)")


def _write(path: Path, lines: Iterable[str]) -> None:
    """Replace the file whole (a reader sees the old or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)
    os.replace(tmp, path)


def _lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    _parse(path)  # refuse to edit a file the server could not read
    return path.read_text().splitlines(keepends=True)


def new_token(holder: str, path: Path, roles: Sequence[str] = ("runner",)) -> str:
    """Add a fresh token for `holder` with `roles` to the tokens file; returns the token."""
    _check_holder(holder)
    granted = _roles(",".join(dict.fromkeys(roles)) if roles else None, "--role")
    lines = _lines(path)
    token = "ldg_" + secrets.token_urlsafe(32)
    role_text = ",".join(r for r in ROLES if r in granted)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    _write(path, [*lines, f"{holder} sha256:{_hash(token)} {role_text}\n"])
    return token


def list_tokens(path: Path) -> list[Grant]:
    """The tokens' holders and roles, in file order (the tokens themselves are not kept)."""
    if not path.exists():
        raise UsageError(f"--tokens {path}: no such file")
    return list(_parse(path).values())


def revoke_token(holder: str, path: Path) -> int:
    """Remove every token of `holder`; returns how many were removed."""
    _check_holder(holder)
    lines = _lines(path)
    keep = [
        line
        for line in lines
        if not ((m := _LINE.match(line.strip())) is not None and m.group(1) == holder)
    ]
    removed = len(lines) - len(keep)
    if not removed:
        raise UsageError(f"--tokens {path}: no token of {holder!r}")
    _write(path, keep)
    return removed
