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
    """The child's environment: this one, with this harness first on the path and
    OpenMP's threads waiting asleep unless this one says otherwise."""
    out = dict(os.environ)
    # A claim's OpenMP threads wait for work asleep: spinning (GNU OpenMP's default) on a
    # host whose cores other processes hold stalls every parallel region until the
    # spinner is scheduled again, a small check several times slower. The thread count,
    # and so what each check computes, stays as it was. Read once, as torch loads OpenMP
    # (in a fork server: every claim forked from it inherits it).
    out.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    here = str(Path(runners.__file__).resolve().parent.parent)
    out["PYTHONPATH"] = os.pathsep.join(x for x in (here, out.get("PYTHONPATH")) if x)
    return out
