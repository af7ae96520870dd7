"""A served checkout (`ledger serve --repo PATH`) fetched before a question is judged in
it: the PR heads and branches of its remote, so a force-pushed head is judged, never the
one the checkout last saw. Bounded: at most once per `interval_s` per checkout (a page
that lists many PRs fetches once), each fetch stopped after `FETCH_TIMEOUT_S`. A fetch
that fails is a note on the answer (the checkout as last fetched is judged), never an
error: the team's own fetch may still keep it current."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["FETCH_EVERY_S", "FETCH_TIMEOUT_S", "MirrorFetch"]

FETCH_EVERY_S = 30.0
"""Default bound: a checkout's remote is asked at most this often."""
FETCH_TIMEOUT_S = 60
"""A fetch not finished by then is stopped: a hung remote delays one answer, not all."""


def _refspecs(bare: bool, remote: str) -> list[str]:
    # A mirror clone keeps branches as its own; a working clone tracks them.
    heads = "+refs/heads/*:refs/heads/*" if bare else f"+refs/heads/*:refs/remotes/{remote}/*"
    return [
        heads,
        "+refs/pull/*/head:refs/pull/*/head",
        "+refs/merge-requests/*/head:refs/merge-requests/*/head",
    ]


def fetch_remote(path: Path) -> str | None:
    """Fetch the checkout's remote (origin, else the first); None when done or when it
    has no remote, else git's one-line reason."""
    import git

    # Here, not at the top: the server imports this module before it reads a checkout.
    from ledger.identity.source import fetch_refs

    url = ""
    try:
        repo = git.Repo(path)
        remotes = list(repo.remotes)
        remote = next((r for r in remotes if r.name == "origin"), remotes[0] if remotes else None)
        if remote is None:
            return None
        url, name = remote.url, remote.name
        why = fetch_refs(repo, remote, _refspecs(repo.bare, remote.name), timeout_s=FETCH_TIMEOUT_S)
        # The remote by its name: its URL may carry a path or credentials of the server.
        return why.replace(url, name) if why and url else why
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


class MirrorFetch:
    """Fetches each served checkout at most once per `interval_s` (0: before every
    question), and keeps the last fetch's failure to name until the next one."""

    def __init__(
        self,
        interval_s: float = FETCH_EVERY_S,
        fetch: Callable[[Path], str | None] = fetch_remote,
    ) -> None:
        self.interval_s = interval_s
        self._fetch = fetch
        self._lock = threading.Lock()
        self._each: dict[Path, threading.Lock] = {}
        self._last: dict[Path, tuple[float, str | None]] = {}

    def refresh(self, mirrors: Sequence[Path]) -> list[str]:
        """Fetch the checkouts due; the notes of those whose last fetch failed."""
        notes = []
        for path in mirrors:
            with self._lock:
                one = self._each.setdefault(path, threading.Lock())
            # One fetch per checkout at a time: a question that arrives meanwhile waits
            # for it and judges what it fetched.
            with one:
                last = self._last.get(path)
                if last is None or time.monotonic() - last[0] >= self.interval_s:
                    last = (time.monotonic(), self._fetch(path))
                    self._last[path] = last
            if last[1] is not None:
                notes.append(
                    f"the server's checkout could not fetch its remote ({last[1]}): "
                    "judged as last fetched"
                )
        return notes
