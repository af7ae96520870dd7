"""The environment's part of a package identity: lock files and installed distributions.

A plan's ``[package]`` may name lock or requirements files (read from the
revision, by git blob id) and distributions (read from the environment that
runs the checks or asks the question: their installed versions, and for
torch its CUDA build). They join the files' digest in the package digest, so
a pass under torch 2.11+cu128 does not carry over to torch 2.11+cu130, nor to
a peft upgrade. Read without importing the distributions (torch stays out of
`ledger`): versions from their metadata, torch's CUDA build from its
installed ``torch/version.py``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import re
from collections.abc import Mapping, Sequence

import git

from ledger.evidence.canonical import canonical_bytes

_CUDA = re.compile(r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]?([^'\"\s]+)['\"]?", re.MULTILINE)


def distribution_version(name: str) -> str:
    """``VERSION`` of an installed distribution (``missing`` if none); torch as
    ``VERSION cuda CUDA`` (``cuda none`` for a CPU build)."""
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return "missing"
    version = dist.version
    if name.lower() == "torch":
        cuda = "none"
        for f in dist.files or ():
            if str(f).replace("\\", "/") == "torch/version.py":
                m = _CUDA.search(f.read_text() or "")
                if m and m.group(1) not in ("None", "none"):
                    cuda = m.group(1)
        version = f"{version} cuda {cuda}"
    return version


def identity_parts(
    commit: git.Commit, lock: Sequence[str], distributions: Sequence[str]
) -> dict[str, str]:
    """``lock:PATH`` -> git blob id (``missing``) and ``dist:NAME`` -> version."""
    parts: dict[str, str] = {}
    for path in lock:
        try:
            parts[f"lock:{path}"] = (commit.tree / path).hexsha
        except KeyError:
            parts[f"lock:{path}"] = "missing"
    for name in distributions:
        parts[f"dist:{name}"] = distribution_version(name)
    return parts


def parts_digest(parts: Mapping[str, str]) -> str:
    """sha256 hex over the canonical JSON of the parts."""
    return hashlib.sha256(canonical_bytes(dict(parts))).hexdigest()


WORKLOAD_PART = "workload"
"""The package identity's part for the workload definition the plan resolves to
(`ledger.qualification.workload_source.definition`)."""


def prior_digest(parts: Mapping[str, str]) -> str:
    """The package digest of `parts` without the workload definition: what a receipt
    recorded before the definition joined the package identity names (the files' digest
    alone, or that of the files with lock files and distributions), so it is still found
    and judged by what its commit's definition was."""
    rest = {k: v for k, v in parts.items() if k != WORKLOAD_PART}
    return rest.get("files", "") if set(rest) == {"files"} else parts_digest(rest)


def differing(recorded: Mapping[str, str] | None, now: Mapping[str, str] | None) -> list[str]:
    """Which identity parts differ between a receipt's package and the revision's, each as
    ``part: recorded -> now`` (a part only one side has shows as ``absent``)."""
    a = dict(recorded or {})
    b = dict(now or {})
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(f"{key}: {a.get(key, 'absent')} -> {b.get(key, 'absent')}")
    return out
