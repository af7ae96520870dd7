"""Shared by the device scripts: size presets and writing results as JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from runners.contract.result import CheckResult, Json, Stamped

WORKLOAD = "runners.workloads.moe:make_workload"
REPO_ROOT = Path(__file__).resolve().parents[2]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "workload_params": {
            "vocab": 128,
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "n_experts": 4,
            "d_ff": 64,
            "lora_rank": 4,
        },
        "checks": {
            "admission": {"batches": [1, 2], "seqs": [8, 16]},
            "regression-24view": {"seq": 8},
            "full-prefix-backward": {"batch": 2, "seq": 16, "prefix_backwards": 2},
            "gradient-compare": {"batch": 1, "seq": 8},
            "cleanup": {"batch": 1, "seq": 8},
            "mesh-handoff": {"rows": 64, "cols": 16, "dtype": "float32"},
        },
        "overhead": {"batch": 2, "seq": 16, "steps": 4},
    },
    "small": {
        "workload_params": {},
        "checks": {
            "admission": {"batches": [1, 2, 4], "seqs": [16, 64]},
            "regression-24view": {"seq": 32},
            "full-prefix-backward": {"batch": 4, "seq": 64, "prefix_backwards": 3},
            "gradient-compare": {"batch": 2, "seq": 32},
            "cleanup": {"batch": 2, "seq": 32},
            "mesh-handoff": {},
        },
        "overhead": {"batch": 4, "seq": 64, "steps": 20},
    },
    "medium": {
        "workload_params": {
            "vocab": 32000,
            "d_model": 1024,
            "n_layers": 4,
            "n_heads": 16,
            "n_experts": 16,
            "top_k": 2,
            "d_ff": 2048,
            "lora_rank": 16,
            "dtype": "bfloat16",
        },
        "checks": {
            "admission": {"batches": [1, 4, 16], "seqs": [512, 2048]},
            # bf16 logits: chunked and unchunked GEMMs may round differently.
            "regression-24view": {"seq": 512, "nll_rtol": 1e-3},
            "full-prefix-backward": {"batch": 8, "seq": 1024, "prefix_backwards": 3},
            "gradient-compare": {"batch": 2, "seq": 256},
            "cleanup": {"batch": 4, "seq": 512},
            "mesh-handoff": {},
        },
        "overhead": {"batch": 8, "seq": 1024, "steps": 20},
    },
}
"""Workload sizes and check parameters: ``tiny`` for CPU tests, ``small`` the reference
defaults, ``medium`` a bf16 model that gives an H200 real memory to account for."""


def result_dict(r: CheckResult | Stamped, out_dir: Path) -> dict[str, Json]:
    """``dataclasses.asdict(r)`` with artifact paths relative to ``out_dir`` (where
    possible), so the output folder can be moved before signing."""
    d: dict[str, Any] = dataclasses.asdict(r)
    for a in d["artifacts"]:
        p = Path(a["path"])
        if p.is_relative_to(out_dir):
            a["path"] = str(p.relative_to(out_dir))
    return d


def write_json(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")


class Log:
    """Progress lines to stdout and to ``progress.log`` in the output folder."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / "progress.log"

    def __call__(self, msg: str) -> None:
        print(msg, flush=True)
        with open(self.path, "a") as f:
            f.write(msg + "\n")
