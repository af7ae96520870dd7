"""A claim's GPU health made evidence: its results judged by it (`faults.judge`), the
whole document an artifact of every receipt, and a one-line summary in the receipt's
``runner.environment``."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.fleet.faults import judge, summary

if TYPE_CHECKING:
    from runners.contract.result import Stamped

__all__ = ["ARTIFACT", "health_evidence"]

ARTIFACT = "gpu-health.json"


def _dcgm(health: Mapping[str, Any]) -> str | None:
    got = [d for d in health.get("devices") or [] if isinstance(d.get("dcgm_diag"), Mapping)]
    if not got:
        return None
    results = {str(d["dcgm_diag"].get("result")) for d in got}
    level = got[0]["dcgm_diag"].get("level", 1)
    if results == {"not installed"}:
        return "not installed"
    return f"-r {level}: " + ", ".join(f"{d['uuid']} {d['dcgm_diag'].get('result')}" for d in got)


def health_evidence(
    results: Sequence[Stamped], health: Mapping[str, Any] | None, folder: Path, tag: str
) -> tuple[list[Stamped], dict[str, str]]:
    """``results`` judged by ``health``, which is written to ``folder`` (named by
    ``tag``) as an artifact of each (new values: a stamped result is never changed in
    place), and the environment entries; the results as they are and nothing where
    there is no health (no GPU visible)."""
    if health is None:
        return list(results), {}
    judged = judge(results, health)
    from runners.contract.result import Artifact

    # The folder is one the claims' sandbox can write: a name they cannot guess,
    # created here, never a file or link they left.
    path = folder / f"gpu-health-{tag}-{secrets.token_hex(8)}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(health, indent=1, sort_keys=True))
    report = Artifact(name=ARTIFACT, path=str(path), media_type="application/json")
    judged = [dataclasses.replace(r, artifacts=(*r.artifacts, report)) for r in judged]
    out = {"gpu_health": summary(health)}
    dcgm = _dcgm(health)
    if dcgm is not None:
        out["dcgm_diag"] = dcgm
    return judged, out
