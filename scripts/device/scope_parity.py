"""The scope a claim process computes against the one the parent observes.

``python -m scripts.device.scope_parity --out DIR [--device cpu|cuda]``

Earlier releases signed the host facets a claim process computed for itself
(`runners.harness.fingerprint`: torch's device properties, its CUDA build, NCCL, the
installed distributions); the parent now reads them from outside
(`runners.claim.authors.observe`: NVML and the CUDA driver without a context, its own
interpreter). A receipt keeps its scope only where the two agree. This starts a
claim-like child (a fresh interpreter with the claim's environment) that
fingerprints the device, observes the same from here, and writes
``parity.json``: both, the facets that differ, and whether this process created a
CUDA context (it must not). Exit 0 when every facet, the GPU UUIDs and the host
agree.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from scripts.device.common import REPO_ROOT, write_json

_CHILD = (
    "import json, torch; from runners.harness.fingerprint import fingerprint; "
    "f = fingerprint(torch.device({device!r})); "
    "print(json.dumps({{'scope': f.scope(), 'uuids': list(f.gpu_uuids), 'host': f.host}}))"
)


def parity(device: str) -> dict[str, Any]:
    from runners.claim.authors import observe
    from runners.harness.child import env

    code = _CHILD.format(device=device)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    child = json.loads(done.stdout)
    seen = observe(device)
    import torch

    facets = set(child["scope"]) | set(seen.scope)
    differ = {
        k: {"claim": child["scope"].get(k), "parent": seen.scope.get(k)}
        for k in sorted(facets)
        if child["scope"].get(k) != seen.scope.get(k)
    }
    return {
        "device": device,
        "claim": child,
        "parent": {"scope": seen.scope, "uuids": list(seen.gpu_uuids), "host": seen.host},
        "differ": differ,
        "uuids_agree": child["uuids"] == list(seen.gpu_uuids),
        "host_agrees": child["host"] == seen.host,
        "parent_cuda_initialized": bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    a = ap.parse_args(argv)
    doc = parity(a.device)
    a.out.mkdir(parents=True, exist_ok=True)
    write_json(a.out / "parity.json", doc)
    print(json.dumps(doc, indent=2))
    ok = (
        not doc["differ"]
        and doc["uuids_agree"]
        and doc["host_agrees"]
        and not doc["parent_cuda_initialized"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
