"""One rank of a claim, inside its process: the request read, the check run, the
results written with the process's own report of its peak and its timeline.

The parent (`runners.claim.isolated`) wrote the request (`runners.api.run_claim`'s
arguments, and ``rank_session`` for a rank of a process group) and reads the result
once the process exited; nothing here trusts or stamps the host's facts.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from runners.contract.result import Json
from runners.harness import child, timeline
from runners.harness.outside import REPORTED

__all__ = ["serve"]


def serve(req: dict[str, Json]) -> list[dict[str, Any]]:
    """What one rank of a claim writes for ``req`` (the request file the parent wrote):
    each result as a document, with the process's peak and its timeline."""
    from runners.api import run_claim

    timeline.mark("serving")

    base = req.pop("base_root", None)
    art = req.pop("artifact_dir", None)
    ranked = req.pop("rank_session", None)
    sess = None
    if isinstance(ranked, dict):
        from runners.harness.distributed import RankSession

        sess = RankSession.from_request(ranked)
        sess.start()
    from runners.harness import selfview
    from runners.harness.collect import freeze

    selfview.install()
    # What the process imported stays out of the claim's collections.
    freeze()
    results = run_claim(
        progress=child.say,
        repo_root=Path(str(req.pop("repo_root"))),
        base_root=None if base is None else Path(str(base)),
        artifact_dir=None if art is None else Path(str(art)),
        **req,  # type: ignore[arg-type]
    )
    if sess is not None:
        from runners.harness.distributed import add_rank_proofs

        add_rank_proofs(results, sess, sess.finish())
    from runners.harness.hostpid import adopt_note

    # Started afresh in the sandbox, this process learns its host pid (the key of
    # NVML's per-process memory) from the parent's note, written once it saw it.
    adopt_note(sys.argv[2] + ".host")
    peak = selfview.peak_bytes()
    stamps = timeline.stamps()
    for r in results:
        r.measurements[REPORTED] = peak
        r.measurements[timeline.MEASUREMENT] = dict[str, Json](stamps)
    return [dataclasses.asdict(r) for r in results]
