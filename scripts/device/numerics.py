"""Benign changes and planted defects judged by gradient-compare's reference rule.

``python -m scripts.device.numerics --out DIR [--workload qwen3] [--device cuda]
[--size h200]`` makes the cases repository (`scripts.numerics_cases`: one commit per
case, each a pull request on ``main``), qualifies each pull request with ``ledger
qualify --pr N --offline`` (receipts signed here, keys kept outside ``DIR``) and
writes into ``DIR``: ``qualify.json`` (every receipt), ``bundles/`` (one per
receipt), ``ledger.db``, ``ledger.pub.pem``, ``runner.pub.pem``, ``audit.txt``,
``environment.json`` and ``cases.json``: per case its kind, commit and the
comparison's figures. Prints one line per case.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.numerics_cases import CASES, WorkloadName, make_cases_repo

SIZES: dict[str, dict[WorkloadName, str]] = {
    "tiny": {
        "qwen3": "vocab = 128, hidden = 32, layers = 2, heads = 2, kv_heads = 1, head_dim = 16, "
        "experts = 4, top_k = 2, moe_ff = 32, lora_rank = 4, lora_alpha = 8",
        "moe": "vocab = 128, d_model = 32, n_layers = 2, n_heads = 2, n_experts = 4, d_ff = 64, "
        "lora_rank = 4",
    },
    "h200": {
        "qwen3": "vocab = 32768, hidden = 1024, layers = 8, heads = 16, kv_heads = 4, "
        "head_dim = 64, experts = 16, top_k = 4, moe_ff = 512, lora_rank = 16, "
        'dtype = "bfloat16"',
        "moe": "vocab = 32000, d_model = 1024, n_layers = 4, n_heads = 16, n_experts = 16, "
        'top_k = 2, d_ff = 2048, lora_rank = 16, dtype = "bfloat16"',
    },
}
"""Workload parameters per size: ``tiny`` for a CPU check of this script, ``h200`` the
example plan's H200 profile (bf16) with 16 experts instead of 32 (each arm builds the
model on the CPU first: this keeps five arms per case well inside a minute)."""

SHAPES = {"tiny": "batch = 2, seq = 16", "h200": "batch = 2, seq = 512"}


def plan(workload: WorkloadName, size: str, dtype: str | None = None) -> str:
    """One gradient comparison; arms in parallel (numerics only: no memory evidence).
    ``dtype`` overrides the size's."""
    from scripts.numerics_cases import WORKLOAD_REF

    params = SIZES[size][workload]
    if dtype is not None:
        params = params.replace(', dtype = "bfloat16"', "") + f', dtype = "{dtype}"'
    return (
        f'workload = "{WORKLOAD_REF[workload]}"\n'
        f"workload_params = {{ {params} }}\n\n"
        "[[claims]]\n"
        'name = "numerics.gradient-compare"\n'
        'check = "gradient-compare"\n'
        f"params = {{ {SHAPES[size]}, parallel_arms = true }}\n"
    )


def _predicate(bundle: Path) -> dict[str, Any]:
    env = json.loads(json.loads(bundle.read_text())["entry"]["body"])
    return json.loads(base64.b64decode(env["payload"]))["predicate"]  # type: ignore[no-any-return]


def figures(pred: dict[str, Any]) -> dict[str, Any]:
    """What ``cases.json`` keeps of a gradient-compare receipt."""
    m = pred["measurements"]
    fams = m.get("families") or []
    worst: dict[str, Any] = max(fams, key=lambda f: f.get("multiple") or 0.0, default={})
    fn = [f for f in fams if f.get("function_allowed")]
    fn_worst = max(fn, key=lambda f: f["err_function"] / f["function_allowed"], default=None)
    return {
        "outcome": pred["outcome"],
        "reason": pred.get("reason"),
        "dtype": pred["scope"].get("dtype"),
        "reference_dtype": m.get("reference_dtype"),
        "tensors_compared": m.get("tensors_compared"),
        "tensors_beyond_rule": m.get("tensors_beyond_rule"),
        "failed_tensors": m.get("failed_tensors"),
        "worst_precision": {
            k: worst.get(k)
            for k in ("worst", "err_candidate", "err_base", "multiple", "floor_from")
        },
        "worst_function": None
        if fn_worst is None
        else {
            "worst": fn_worst["worst"],
            "err_function": fn_worst["err_function"],
            "function_allowed": fn_worst["function_allowed"],
            "ratio": fn_worst["err_function"] / fn_worst["function_allowed"],
        },
        "max_noise_rel_l2": m.get("max_noise_rel_l2"),
        "routing": m.get("routing"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.device.numerics")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workload", choices=sorted(CASES), default="qwen3")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(SIZES), default="h200")
    ap.add_argument("--dtype", help="the workload's dtype, over the size's (e.g. bfloat16)")
    ap.add_argument("--case-timeout", type=int, default=150, help="seconds per case")
    ap.add_argument("--sandbox", default="auto", help="passed to ledger qualify")
    args = ap.parse_args(argv)
    out: Path = args.out
    (out / "bundles").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="numerics-"))
    made = make_cases_repo(work / "repo", args.workload, plan(args.workload, args.size, args.dtype))
    env = {**os.environ, "LEDGER_DB": str(out / "ledger.db"), "LEDGER_KEYS": str(work / "keys")}

    def ledger(*a: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ledger", *a],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    ledger("init")
    ledger("keys", "new", "numerics", "--role", "runner")
    receipts: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for case in CASES[args.workload]:
        t0 = time.monotonic()
        try:
            got = ledger(
                "qualify",
                "--pr",
                str(made.prs[case.name]),
                "--offline",
                "--repo",
                str(made.path),
                "--device",
                args.device,
                "--key",
                "numerics",
                "--sandbox",
                args.sandbox,
                "--json",
                timeout=args.case_timeout,
            )
            doc = json.loads(got.stdout) if got.stdout.strip() else {}
            (out / f"qualify-{case.name}.log").write_text(got.stderr[-20000:])
        except subprocess.TimeoutExpired as e:
            # What it printed before the limit says where the case spent its time.
            said = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            (out / f"qualify-{case.name}.log").write_text(said[-20000:] + "\n(case timed out)\n")
            doc = {}
        row: dict[str, Any] = {
            "case": case.name,
            "kind": case.kind,
            "pr": made.prs[case.name],
            "commit": made.commits[case.name],
            "seconds": round(time.monotonic() - t0, 1),
        }
        for r in doc.get("receipts", []):
            receipts.append(r)
            bundle = out / "bundles" / f"{r['id'][7:19]}.json"
            ledger("export", r["id"], "-o", str(bundle))
            row.update(receipt=r["id"], **figures(_predicate(bundle)))
        cases.append(row)
        print(
            f"{case.kind:6} {case.name:17} {row.get('outcome', 'no receipt'):12} "
            f"worst x{(row.get('worst_precision') or {}).get('multiple')} "
            f"function {(row.get('worst_function') or {}).get('ratio')} ({row['seconds']} s)",
            flush=True,
        )
    (out / "qualify.json").write_text(json.dumps({"receipts": receipts}, indent=2))
    (out / "cases.json").write_text(
        json.dumps(
            {"workload": args.workload, "size": args.size, "device": args.device, "cases": cases},
            indent=2,
        )
    )
    (out / "ledger.pub.pem").write_text(ledger("keys", "export", "ledger").stdout)
    (out / "runner.pub.pem").write_text(ledger("keys", "export", "numerics").stdout)
    (out / "audit.txt").write_text(ledger("audit").stdout)
    (out / "environment.json").write_text(json.dumps(_environment(), indent=2))
    return 0


def _environment() -> dict[str, Any]:
    from importlib import metadata

    import torch

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "transformers": version("transformers"),
        "peft": version("peft"),
    }


if __name__ == "__main__":
    raise SystemExit(main())
