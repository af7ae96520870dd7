"""An --artifact glob expanded below its folder without following any link.

The syntax is `glob.glob`'s with ``recursive=True``: ``*``, ``?`` and ``[...]``
within one name, ``**`` for any number of folders, and names starting with a dot
matched only by a pattern that starts with one. Unlike `glob.glob`, a symbolic
link is never entered nor taken: one that a pattern component matches is
refused, as is a FIFO, socket or device the pattern names; a folder the last
component matches is skipped (a folder is no artifact) unless it was named
literally, then it is refused too. Files found are only candidates: they are
read (and checked again) by `beneath.Folder.read`.
"""

from __future__ import annotations

import fnmatch
import stat
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ledger.outputs.beneath import Folder, Refused, parts_of, why_not

__all__ = ["Matches", "has_magic", "match"]

_MAGIC = frozenset("*?[")


def has_magic(part: str) -> bool:
    return any(c in _MAGIC for c in part)


@dataclass
class Matches:
    """Regular files a pattern matched (paths below the folder) and what it refused."""

    files: list[str] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)

    def _hit(self, path: str, mode: int, literal: bool) -> None:
        if stat.S_ISDIR(mode) and not literal:
            return
        why = why_not(mode)
        if why is None:
            if path not in self.files:
                self.files.append(path)
        elif path not in {r.path for r in self.refused}:
            self.refused.append(Refused(path, why))


def match(folder: Folder, pattern: str | PurePosixPath) -> Matches:
    """The files and refusals of ``pattern`` (relative) below ``folder``."""
    out = Matches()
    _walk(folder, [], parts_of(pattern), out)
    return out


def _walk(folder: Folder, at: list[str], parts: list[str], out: Matches) -> None:
    head, rest = parts[0], parts[1:]
    try:
        entries = folder.listing("/".join(at) if at else None)
    except FileNotFoundError:
        return
    except Refused as r:  # swapped for a link since it was listed
        out.refused.append(r)
        return
    if head == "**":
        if not rest:  # everything below, at any depth
            for name, mode in entries:
                if name.startswith("."):
                    continue
                if stat.S_ISDIR(mode):
                    _walk(folder, [*at, name], parts, out)
                else:
                    out._hit("/".join([*at, name]), mode, literal=False)
            return
        _walk(folder, at, rest, out)  # zero folders
        for name, mode in entries:
            if stat.S_ISDIR(mode) and not name.startswith("."):
                _walk(folder, [*at, name], parts, out)
        return
    literal = not has_magic(head)
    hidden = head.startswith(".")
    for name, mode in entries:
        if literal:
            if name != head:
                continue
        elif (name.startswith(".") and not hidden) or not fnmatch.fnmatchcase(name, head):
            continue
        path = "/".join([*at, name])
        if not rest:
            out._hit(path, mode, literal)
        elif stat.S_ISDIR(mode):
            _walk(folder, [*at, name], rest, out)
        elif stat.S_ISLNK(mode):
            out._hit(path, mode, literal)
