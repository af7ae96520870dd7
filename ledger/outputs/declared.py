"""What `ledger run` declared the command writes (--artifact globs, a --result
file), each split at the folder it is read beneath, and collected after the run
as files to digest and outputs refused.

A relative path is read beneath the command's working directory (the run's own
worktree). An absolute one is read beneath the nearest folder above its literal
part that exists, as a folder and not as a link, when the run starts: the same
folder the sandbox lets the command write. Below that folder nothing is followed
(`beneath`), and ``..`` is refused before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ledger.evidence.errors import UsageError
from ledger.evidence.statement import ArtifactFile, describe_artifact
from ledger.outputs.beneath import Folder, Refused, parts_of
from ledger.outputs.match import has_magic, match

__all__ = ["Collected", "Declared", "collect", "declare", "refusal"]


@dataclass(frozen=True, slots=True)
class Declared:
    """A declared output: ``rel`` (a glob or a path) below ``folder``."""

    text: str
    """As the person wrote it."""
    folder: Path
    rel: PurePosixPath
    relative: bool

    def shown(self, below: str) -> str:
        """How a receipt names a path below the folder: as the person would write it."""
        return below if self.relative else str(self.folder / below)

    def read(self, limit: int) -> bytes:
        """The declared file (no glob): `beneath.Folder.read`, named as declared."""
        try:
            folder = Folder(self.folder)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise Refused(self.text, e.strerror or "its folder cannot be opened") from None
        try:
            with folder:
                return folder.read(self.rel, limit)
        except Refused as r:
            raise Refused(self.shown(r.path), r.why) from None

    def remove(self) -> None:
        """Remove the declared file before the run, never through a link."""
        try:
            with Folder(self.folder) as f:
                f.remove(self.rel)
        except OSError:
            pass


def declare(path: str | Path, cwd: Path | None) -> Declared:
    """Split a declared path at its folder; UsageError for one that climbs (``..``)."""
    text = str(path)
    p = PurePosixPath(text)
    if ".." in p.parts:
        raise UsageError(f"{text}: an output path may not contain '..'")
    if not p.is_absolute():
        try:
            parts_of(p)
        except ValueError:
            raise UsageError(f"{text!r} names no file") from None
        return Declared(text, cwd if cwd is not None else Path.cwd(), p, True)
    parts = p.parts[1:]
    if not parts:
        raise UsageError(f"{text!r} names no file")
    literal: list[str] = []
    for x in parts[:-1]:
        if has_magic(x):
            break
        literal.append(x)
    k = len(literal)
    while k > 0 and not _real_folder(Path("/", *literal[:k])):
        k -= 1
    return Declared(text, Path("/", *literal[:k]), PurePosixPath(*parts[k:]), False)


def _real_folder(p: Path) -> bool:
    """A folder that is one, not a link to one (a link there may be a run's doing)."""
    try:
        return p.is_dir() and not p.is_symlink()
    except OSError:
        return False


def refusal(r: Refused) -> dict[str, str]:
    """How a receipt names an output it did not read (under ``refused_outputs``)."""
    return {"path": r.path, "why": r.why}


@dataclass
class Collected:
    files: list[ArtifactFile] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    """Declared globs that matched nothing at all (neither a file nor a refusal)."""


def collect(declared: Sequence[Declared], limit: int) -> Collected:
    """Every declared artifact read beneath its folder, or refused, or unmatched."""
    out = Collected()
    seen: set[str] = set()
    for d in declared:
        try:
            folder = Folder(d.folder)
        except FileNotFoundError:
            out.unmatched.append(d.text)
            continue
        except OSError as e:
            out.refused.append(Refused(d.text, e.strerror or "cannot be opened"))
            continue
        with folder:
            m = match(folder, d.rel)
            if not m.files and not m.refused:
                out.unmatched.append(d.text)
            for r in m.refused:
                _once(out.refused, seen, Refused(d.shown(r.path), r.why))
            for rel in m.files:
                shown = d.shown(rel)
                if shown in seen:
                    continue
                try:
                    content = folder.read(rel, limit)
                except FileNotFoundError:
                    continue  # removed since it was listed: by the command's leftovers
                except Refused as r:
                    _once(out.refused, seen, Refused(d.shown(r.path), r.why))
                    continue
                seen.add(shown)
                out.files.append(describe_artifact(content, PurePosixPath(rel).name))
    return out


def _once(refused: list[Refused], seen: set[str], r: Refused) -> None:
    if r.path not in seen:
        seen.add(r.path)
        refused.append(r)
