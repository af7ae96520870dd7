"""Writing a file a person named, safely: the bytes go to a fresh temporary file
beside it, created exclusively and never through a link (O_EXCL|O_NOFOLLOW),
then renamed over the target. A planted `FILE.part` symlink, or any file of
that name, is never followed nor overwritten."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` through an exclusive temporary file in its folder."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
