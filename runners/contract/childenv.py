"""The environment of a claim's processes (fork servers, spawned children).

A module of its own, outside `runners.harness` (whose package imports torch):
`ledger qualify` launches its fork servers with it before the parent imports
torch, so that both imports run at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import runners

__all__ = ["env"]


def env() -> dict[str, str]:
    """The child's environment: this one, with this harness first on the path."""
    out = dict(os.environ)
    here = str(Path(runners.__file__).resolve().parent.parent)
    out["PYTHONPATH"] = os.pathsep.join(x for x in (here, out.get("PYTHONPATH")) if x)
    return out
