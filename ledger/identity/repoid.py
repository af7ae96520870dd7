"""One repository, one identity: the canonical id a receipt speaks of.

Two clones of one origin by different URL forms (scp-style, https, ssh://,
with or without credentials, port or `.git`) must see the same receipts, so
the id is the remote URL normalised: host lower-cased, scheme, user, port,
trailing `.git` and `/` removed. A remote that is a local path is its
absolute real path, so `../origin.git` and `file:///abs/origin.git` agree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["canonical_repo"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# scp-like `user@host:path`: a colon before any slash, and not a Windows drive.
_SCP = re.compile(r"^(?:[^@/]+@)?(?P<host>[^/:]+):(?P<path>.*)$")


def _strip(path: str) -> str:
    path = path.rstrip("/")
    while path.endswith(".git") or path.endswith("/"):
        path = path.removesuffix(".git").rstrip("/")
    return path


def canonical_repo(url: str, base_dir: Path | None = None) -> str:
    """The canonical id of a remote URL (or of a value logged under a raw URL).

    `base_dir` is where a relative local-path remote is resolved from (the
    repository's git dir); without it a bare path is kept as written, which
    is how already-logged ids are re-read (the function is idempotent).
    """
    u = url.strip()
    if u.lower().startswith("file://"):
        return os.path.realpath(unquote(urlsplit(u).path)).rstrip("/") or "/"
    if _URL.match(u):
        parts = urlsplit(u)
        host = (parts.hostname or "").lower()
        return f"{host}/{_strip(unquote(parts.path)).lstrip('/')}"
    m = _SCP.match(u)
    if m and not re.match(r"^[A-Za-z]:[\\/]", u) and not u.startswith(("/", ".")):
        return f"{m['host'].lower()}/{_strip(m['path']).lstrip('/')}"
    if base_dir is not None:
        return os.path.realpath(base_dir / u).rstrip("/") or "/"
    return u.rstrip("/") or u
