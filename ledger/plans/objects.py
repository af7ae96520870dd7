"""Git objects read and proved without git: ids recomputed from their bytes, a
commit's tree and a tree's entries parsed, a path walked from a commit to a blob."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.evidence.errors import RefusedError

__all__ = ["GitObject", "object_id", "raw_objects", "walk"]

GitObject = tuple[str, bytes]
"""(type, body): ``commit``, ``tree`` or ``blob`` and the object's bytes after its header."""


def object_id(kind: str, body: bytes) -> str:
    """The object's git id (SHA-1 over ``"<type> <size>\\0"`` and the body)."""
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body, usedforsecurity=False).hexdigest()


def raw_objects(repo: Any, commit: str, path: str) -> list[GitObject]:
    """The commit, every tree on `path` and the blob at it, as stored in `repo`."""
    c = repo.commit(commit)
    out: list[GitObject] = [("commit", _raw(repo, c.binsha))]
    tree = c.tree
    parts = path.split("/")
    for part in parts[:-1]:
        out.append(("tree", _raw(repo, tree.binsha)))
        tree = tree / part
    out.append(("tree", _raw(repo, tree.binsha)))
    out.append(("blob", _raw(repo, (tree / parts[-1]).binsha)))
    return out


def _raw(repo: Any, binsha: bytes) -> bytes:
    return bytes(repo.odb.stream(binsha).read())


def _tree_entries(body: bytes) -> dict[str, str]:
    """A tree object's entries: name -> object id."""
    out: dict[str, str] = {}
    i = 0
    while i < len(body):
        sp = body.find(b" ", i)
        nul = body.find(b"\0", sp + 1)
        if sp < 0 or nul < 0 or nul + 21 > len(body):
            raise RefusedError("a tree object does not parse")
        out[body[sp + 1 : nul].decode("utf-8", "surrogateescape")] = body[nul + 1 : nul + 21].hex()
        i = nul + 21
    return out


def walk(objects: Sequence[GitObject], commit: str, path: str) -> tuple[str, bytes]:
    """The blob at `path` in `commit`, proved by `objects` alone: (blob id, bytes).
    RefusedError naming the first link that does not hold."""
    by_id: Mapping[str, GitObject] = {object_id(k, b): (k, b) for k, b in objects}
    kind, body = by_id.get(commit, ("", b""))
    if kind != "commit":
        raise RefusedError(f"commit {commit[:12]} is not among the plan's objects")
    first = body.split(b"\n", 1)[0]
    if not first.startswith(b"tree ") or len(first) != 45:
        raise RefusedError(f"commit {commit[:12]} names no tree")
    at = first[5:].decode()
    parts = path.split("/")
    for i, part in enumerate(parts):
        kind, body = by_id.get(at, ("", b""))
        if kind != "tree":
            raise RefusedError(f"tree {at[:12]} on the plan's path is not among its objects")
        at = _tree_entries(body).get(part, "")
        if not at:
            raise RefusedError(f"{'/'.join(parts[: i + 1])} is not in commit {commit[:12]}")
    kind, body = by_id.get(at, ("", b""))
    if kind != "blob":
        raise RefusedError(f"blob {at[:12]} at {path} is not among the plan's objects")
    return at, body
