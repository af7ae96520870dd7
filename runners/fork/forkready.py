"""What a fork server reports once it is ready to fork: its ready document.

The server (`runners.fork.forkserver`) writes it as one JSON line after its imports and
builds; the parent (`runners.fork.forkparent`) reads it back into `Ready`, and every
reader (the run's progress line, whether a claim forks, the benchmarks) reads its
fields by name. The wire stays JSON, its keys the fields' names. Imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ready"]


def _strs(doc: Mapping[str, Any], key: str) -> list[str]:
    got = doc.get(key) or []
    if not isinstance(got, list):
        raise ValueError(f"fork server ready: {key} is not a list")
    return [str(x) for x in got]


def _str_or_none(doc: Mapping[str, Any], key: str) -> str | None:
    got = doc.get(key)
    return None if got is None else str(got)


@dataclass(frozen=True)
class Ready:
    """A fork server's report at ready: what it imported and built before the first
    claim, and whether it will fork at all."""

    seconds: float
    """From the start of its imports to ready."""
    preloaded: list[str] = field(default_factory=list)
    """The workload entry points whose modules it imported."""
    not_preloaded: list[str] = field(default_factory=list)
    """Those it could not import, or prepare, each with why (the claim reports it)."""
    modules: list[str] = field(default_factory=list)
    """Further modules it imported: `runners.fork.forkparent.ALWAYS`, the plan's ``preload``
    and what earlier runs of the tree learned (`runners.fork.preload`)."""
    modules_failed: list[str] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    """Workloads with a ``prepare()`` built and prepared once, inherited through fork."""
    prebuilt: list[str] = field(default_factory=list)
    """Workloads without one, set up twice or more: built once, each setup a copy."""
    not_prebuilt: list[str] = field(default_factory=list)
    """Those that could not be built once, each with why."""
    cuda_initialized: bool = False
    cuda_initialized_by: str | None = None
    """Where CUDA was first initialised in it (`runners.fork.forksafety.witness`)."""
    threads_started_by: list[str] = field(default_factory=list)
    learn: bool = True
    """Whether it imports what its claims were seen to import (off for measuring)."""
    threads: list[str] = field(default_factory=list)
    """Its threads by name at ready."""
    fork_refused: str | None = None
    """Why it will refuse every fork (`runners.fork.forksafety.refusal`), or None."""
    claim_threads: int = 0
    """The intra-op thread count a forked claim gets back."""

    def __getitem__(self, key: str) -> object:
        """A field by its key on the wire, for readers of the document as JSON."""
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> Ready:
        """The document a server printed; ValueError where it is not one."""
        if not isinstance(doc, Mapping):
            raise ValueError("fork server ready: not a JSON object")
        try:
            return cls(
                seconds=float(doc["seconds"]),
                preloaded=_strs(doc, "preloaded"),
                not_preloaded=_strs(doc, "not_preloaded"),
                modules=_strs(doc, "modules"),
                modules_failed=_strs(doc, "modules_failed"),
                prepared=_strs(doc, "prepared"),
                prebuilt=_strs(doc, "prebuilt"),
                not_prebuilt=_strs(doc, "not_prebuilt"),
                cuda_initialized=bool(doc.get("cuda_initialized", False)),
                cuda_initialized_by=_str_or_none(doc, "cuda_initialized_by"),
                threads_started_by=_strs(doc, "threads_started_by"),
                learn=bool(doc.get("learn", True)),
                threads=_strs(doc, "threads"),
                fork_refused=_str_or_none(doc, "fork_refused"),
                claim_threads=int(doc.get("claim_threads", 0)),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"fork server ready: {e}") from None


_FIELDS = frozenset(f.name for f in dataclasses.fields(Ready))
