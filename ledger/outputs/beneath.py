"""Reading a file a sandboxed process could have written, beneath the folder it was
given, without following anything it could have planted.

The folder itself is opened by the path Ledger (or the person running it) chose,
before or after the run; everything below it is reached one component at a time
with ``O_NOFOLLOW`` (folders also ``O_DIRECTORY``), relative to the folder's open
descriptor, so no symbolic link, on the way or at the end, is ever followed and
no ``..`` leaves it. Only a regular file with one link, on the folder's device
and within the size limit is read; the checks are made on the opened descriptor
(``fstat``), the read is bounded, and a FIFO or a device is never opened (its
kind is known from ``lstat`` first, and ``O_NONBLOCK`` keeps a FIFO swapped in
between from blocking). Anything else raises `Refused`, saying why.

Python has no ``openat2`` wrapper (``RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS``); the
walk by components gives the same guarantee on every Linux kernel.
Standard library only: `runners` and `ledger` both read outputs through it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from types import TracebackType

__all__ = ["Folder", "Refused", "parts_of", "why_not"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1024 * 1024


class Refused(Exception):
    """An output that is not read: its ``path`` below the folder, and ``why``."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def why_not(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is no output (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def parts_of(rel: str | PurePosixPath) -> list[str]:
    """The components of a path below a folder; ValueError for one that is absolute,
    empty, or climbs out (``..``)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(x in ("..", ".") for x in p.parts):
        raise ValueError(f"{str(rel)!r} is not a path below its folder")
    return list(p.parts)


class Folder:
    """A folder opened once, by its path; what lies below it is reached never
    through a link. Use as a context manager (it holds a descriptor)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dev = os.fstat(self._fd).st_dev

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(
        self,
        t: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _open_dir(self, parts: list[str]) -> int:
        """A new descriptor of the folder ``parts`` below this one. `Refused` names
        the first component that is a link, not a folder, or on another device;
        FileNotFoundError when one is missing."""
        fd = os.dup(self._fd)
        for i, name in enumerate(parts):
            where = "/".join(parts[: i + 1])
            try:
                nfd = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                raise
            except OSError as e:
                why = _lwhy(fd, name, folder=True) or e.strerror or "cannot be opened"
                os.close(fd)
                raise Refused(where, why) from None
            os.close(fd)
            fd = nfd
            if os.fstat(fd).st_dev != self.dev:
                os.close(fd)
                raise Refused(where, "on another device than its folder")
        return fd

    def listing(self, rel: str | PurePosixPath | None = None) -> list[tuple[str, int]]:
        """(name, ``st_mode`` not following links) of each entry of a folder below."""
        parts = [] if rel is None else parts_of(rel)
        fd = self._open_dir(parts)
        try:
            out = []
            for name in sorted(os.listdir(fd)):
                try:
                    out.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode))
                except FileNotFoundError:
                    continue  # removed while listed
            return out
        except OSError as e:
            raise Refused("/".join(parts) or ".", e.strerror or "cannot be listed") from None
        finally:
            os.close(fd)

    def read(self, rel: str | PurePosixPath, limit: int) -> bytes:
        """The bytes of the regular file ``rel`` below the folder: one link, on the
        folder's device, at most ``limit`` bytes. `Refused` otherwise;
        FileNotFoundError when it (or a folder on its way) does not exist."""
        parts = parts_of(rel)
        where = "/".join(parts)
        dfd = self._open_dir(parts[:-1])
        try:
            # Its kind first: a FIFO or a device is never opened at all.
            try:
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                raise
            except OSError as e:
                raise Refused(where, e.strerror or "cannot be examined") from None
            self._check(where, st, limit)
            try:
                fd = os.open(parts[-1], _FILE, dir_fd=dfd)
            except FileNotFoundError:
                raise
            except OSError as e:
                why = _lwhy(dfd, parts[-1], folder=False) or e.strerror or "cannot be opened"
                raise Refused(where, why) from None
            try:
                # What counts is what was opened (it may have been swapped since).
                self._check(where, os.fstat(fd), limit)
                data = _bounded(fd, limit)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)
        if len(data) > limit:
            raise Refused(where, f"over the {limit}-byte limit (it grew while read)")
        return data

    def remove(self, rel: str | PurePosixPath) -> None:
        """Unlink ``rel`` (never a folder) below the folder if it is there; a link on
        the way is not followed and nothing is removed."""
        try:
            parts = parts_of(rel)
            dfd = self._open_dir(parts[:-1])
        except (FileNotFoundError, Refused):
            return
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
        finally:
            os.close(dfd)

    def _check(self, where: str, st: os.stat_result, limit: int) -> None:
        why = why_not(st.st_mode)
        if why is None and st.st_nlink != 1:
            why = f"a hard link ({st.st_nlink} links)"
        if why is None and st.st_dev != self.dev:
            why = "on another device than its folder"
        if why is None and st.st_size > limit:
            why = f"{st.st_size} bytes, over the {limit}-byte limit"
        if why is not None:
            raise Refused(where, why)


def _lwhy(dfd: int, name: str, *, folder: bool) -> str | None:
    """Why ``name`` (not followed) is not the folder or file asked for, when its kind
    says so; None when it is of the kind asked for."""
    try:
        mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
    except OSError:
        return None
    if not folder:
        return why_not(mode)
    return None if stat.S_ISDIR(mode) else why_not(mode) or "not a directory"


def _bounded(fd: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes: one more than allowed tells it grew."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        b = os.read(fd, min(_CHUNK, left))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)
