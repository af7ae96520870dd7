"""Predicted against measured peak increments of the built-in estimator, per model family.

    python -m benchmarks.estimator_accuracy --device cpu|cuda --size cpu|gpu --out DIR

For each family the ready adapter builds the model (no estimator named), the
built-in estimator calibrates on the device (shapes up to 1/8 of the family's
largest token count, as a plan would), and every shape of the family's list is
then measured in both phases under the harness's probe, warm: the measured
reset-to-peak increment beside the prediction (the upper bound), the point, and
what accelerate's documented rule gives for the same parameter counts (inference:
weights + 20 %; training with Adam: 4x the weights; shown as the increment above
the resident weights the rule implies: 0.2 W and 3 W). Every shape is reported,
none dropped. Families are marked ``development`` (what the method was frozen on:
GPT-2, the Qwen3-MoE example) or ``held-out`` (Llama, Mixtral, transformers' ViT and
BERT, a team-style CNN; ViT informed method 4 and BERT method 5, docs/estimator.md; DeiT
added once method 5 was fixed). Writes
``estimator_accuracy.json`` and ``estimator_accuracy.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ledger.units.numbers import iec, number
from runners.adapt.library import causal_lm, module
from runners.harness.probe import CpuProbe, make_probe
from runners.harness.steps import measure_step
from runners.protocol import PHASES, Shape
from runners.workloads.envelope import VERSION

LM_SHAPES = [(1, 32), (1, 64), (1, 128), (2, 64), (2, 128), (4, 32), (4, 128), (1, 512)]
LM_SHAPES += [(2, 256), (4, 256), (8, 128), (8, 256)]
VIT_SHAPES = [(1, 8), (1, 16), (1, 32), (2, 16), (2, 32), (4, 8), (4, 32), (1, 64)]
VIT_SHAPES += [(2, 64), (4, 64), (8, 32), (8, 64)]
CNN_SHAPES = [(1, 16), (1, 32), (2, 16), (2, 32), (4, 32), (1, 64), (2, 64), (4, 64)]
CNN_SHAPES += [(8, 32), (8, 64)]

LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}


def _families(size: str) -> list[dict[str, Any]]:
    """Each family: name, role, the adapter's parameters, its shapes (``seq`` scaled by
    ``scale`` on a GPU)."""
    gpu = size == "gpu"
    dtype = "bfloat16" if gpu else "float32"
    k = 4 if gpu else 1  # a GPU's shapes: four times the sequence
    lm = [(b, s * k) for b, s in LM_SHAPES]
    gpt2 = {"n_embd": 768 if gpu else 64, "n_layer": 12 if gpu else 2, "n_head": 12 if gpu else 4}
    gpt2 |= {"vocab_size": 50257 if gpu else 512, "n_positions": 4096}
    qwen = {
        "vocab_size": 32000 if gpu else 512,
        "hidden_size": 512 if gpu else 64,
        "intermediate_size": 1024 if gpu else 128,
        "moe_intermediate_size": 256 if gpu else 32,
        "num_hidden_layers": 4 if gpu else 2,
        "num_attention_heads": 8 if gpu else 4,
        "num_key_value_heads": 4 if gpu else 2,
        "head_dim": 64 if gpu else 16,
        "num_experts": 16 if gpu else 4,
        "num_experts_per_tok": 4 if gpu else 2,
        "tie_word_embeddings": False,
    }
    llama = {
        "vocab_size": 32000 if gpu else 512,
        "hidden_size": 1024 if gpu else 64,
        "intermediate_size": 2816 if gpu else 176,
        "num_hidden_layers": 8 if gpu else 2,
        "num_attention_heads": 16 if gpu else 4,
        "num_key_value_heads": 8 if gpu else 2,
        "max_position_embeddings": 8192,
    }
    mixtral = {
        "vocab_size": 32000 if gpu else 512,
        "hidden_size": 512 if gpu else 64,
        "intermediate_size": 1024 if gpu else 128,
        "num_hidden_layers": 4 if gpu else 2,
        "num_attention_heads": 8 if gpu else 4,
        "num_key_value_heads": 4 if gpu else 2,
        "num_local_experts": 8 if gpu else 4,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 8192,
    }
    vit = {"hidden": 768 if gpu else 64, "layers": 12 if gpu else 2, "heads": 12 if gpu else 4}
    ref = "benchmarks.estimator_families"

    def cal(shapes: list[tuple[int, int]]) -> dict[str, int]:
        # As a plan would: fit up to 1/8 of its largest step, validate at the largest.
        top = max(b * s for b, s in shapes)
        return {"max_tokens": top // 8, "validate_tokens": top}

    lm_common = {"attention": "eager", "dtype": dtype, "calibration": cal(lm)}

    def team(name: str, params: dict[str, int], shapes: list[tuple[int, int]]) -> dict[str, Any]:
        """A held-out family through the adapter's ``module`` route, as a team writes it
        (`benchmarks.estimator_families`)."""
        return {
            "family": name,
            "role": "held-out",
            "make": lambda: module(
                factory=f"{ref}:{name}",
                loss=f"{ref}:{name}_loss",
                batch=f"{ref}:{name}_batch",
                factory_params=params,
                dtype=dtype,
                calibration=cal(shapes),
            ),
            "shapes": shapes,
        }

    return [
        {
            "family": "gpt2",
            "role": "development",
            "make": lambda: causal_lm(model_type="gpt2", config=gpt2, **lm_common),
            "shapes": lm,
        },
        {
            "family": "qwen3_moe+lora",
            "role": "development",
            "make": lambda: causal_lm(model_type="qwen3_moe", config=qwen, lora=LORA, **lm_common),
            "shapes": lm,
        },
        {
            "family": "llama+lora",
            "role": "held-out",
            "make": lambda: causal_lm(model_type="llama", config=llama, lora=LORA, **lm_common),
            "shapes": lm,
        },
        {
            "family": "mixtral",
            "role": "held-out",
            "make": lambda: causal_lm(model_type="mixtral", config=mixtral, **lm_common),
            "shapes": lm,
        },
        team("vit", vit, VIT_SHAPES),
        # Added while method 5 was made: its backward at 8x128 on CPU showed the fresh
        # envelope fall short beyond the grid, so BERT informed method 5 as ViT's H100
        # record informed method 4; Llama, Mixtral and the CNN have informed none.
        team("bert", vit, lm),
        team("cnn", {"width": 64 if gpu else 8}, CNN_SHAPES),
        # Added once method 5 was fixed, and measured by it unchanged: a vision transformer
        # no method was made from (ViT informed method 4).
        team("deit", vit, VIT_SHAPES),
    ]


def _measure(w: Any, device: torch.device, shape: Shape, grad: bool) -> int:
    probe = make_probe(device)
    try:
        with probe.session():
            w.zero_grad()
            batch = w.make_batch(shape, 0)

            def step() -> Any:
                out = w.forward(batch, grad=grad)
                if grad:
                    w.backward(out)
                return out

            rec = measure_step(probe, f"{shape}", step)
            w.zero_grad()
            if not rec.ok:
                raise RuntimeError(f"{shape}: {rec.outcome.sentence()}")
            return int(rec.increment_bytes)
    finally:
        if isinstance(probe, CpuProbe):
            probe.close()


def _family(f: dict[str, Any], device: torch.device, say: Callable[[str], None]) -> dict[str, Any]:
    w = f["make"]()
    w.setup(device, 0)
    weights = sum(p.numel() * p.element_size() for p in w.model.parameters())
    params = sum(p.numel() for p in w.model.parameters())
    t0 = time.monotonic()
    cal = w.calibration()
    took = time.monotonic() - t0
    errors = ", ".join(
        f"{p} {stated_error(cal.phases[p].error_bytes, cal.phases[p].error_permille)}"
        for p in PHASES
    )
    say(f"{f['family']}: {params:,} parameters, calibrated in {took:.1f} s, stated error {errors}")
    rows = []
    for phase in PHASES:
        grad = phase == "forward_backward"
        rule = weights // 5 if not grad else 3 * weights
        for b, s in f["shapes"]:
            shape = Shape(batch=b, seq=s)
            est = w.estimate(shape, phase)
            measured = _measure(w, device, shape, grad)
            rows.append(
                {
                    "phase": phase,
                    "batch": b,
                    "seq": s,
                    "tokens": b * s,
                    "measured_bytes": measured,
                    "predicted_bytes": est.predicted_bytes,
                    "point_bytes": est.point_bytes,
                    "measured_over_predicted": round(measured / est.predicted_bytes, 4),
                    "within_calibration": b * s <= cal.measured_up_to_tokens,
                    "accelerate_increment_bytes": rule,
                    "measured_over_accelerate": round(measured / rule, 4),
                }
            )
            say(f"  {phase} {shape}: measured {measured:,} predicted {est.predicted_bytes:,}")
    w.teardown()
    ratios = [r["measured_over_predicted"] for r in rows]
    return {
        "family": f["family"],
        "role": f["role"],
        "parameters": params,
        "weights_bytes": weights,
        "trainable_bytes": cal.model.trainable_bytes,
        "calibration": {
            "id": cal.id,
            "seconds": round(took, 2),
            "measured_up_to_tokens": cal.measured_up_to_tokens,
            "error_bytes": {p: cal.phases[p].error_bytes for p in PHASES},
            "error_permille": {p: cal.phases[p].error_permille for p in PHASES},
            "routing": cal.routing,
        },
        "rows": rows,
        "summary": {
            "shapes": len(rows),
            "measured_above_predicted": sum(r > 1 for r in ratios),
            "median_measured_over_predicted": round(statistics.median(ratios), 4),
            "min_measured_over_predicted": min(ratios),
            "max_measured_over_predicted": max(ratios),
            "accelerate_below_measured": sum(
                r["measured_bytes"] > r["accelerate_increment_bytes"] for r in rows
            ),
        },
    }


def stated_error(error_bytes: int, error_permille: int) -> str:
    """A stated error as people read it: its bytes in IEC units and its share of the
    point in percent, three significant digits each (``2.5 MiB + 1.3 %``)."""
    return f"{iec(error_bytes)} + {number(error_permille / 10)} %"


def _markdown(doc: dict[str, Any]) -> str:
    out = [
        f"# Built-in estimator: predicted against measured ({doc['device']})",
        "",
        "| family | role | shapes | measured > predicted | median m/p | min m/p | max m/p "
        "| accelerate's rule below measured | calibration s | stated error: forward_nograd "
        "| forward_backward | routing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in doc["families"]:
        s, c = f["summary"], f["calibration"]
        routing = c["routing"].get("share_permille", "") if c["routing"] else "-"
        # A table of method 2 has no error_bytes: its stated error was the permille alone.
        err = [
            stated_error(c.get("error_bytes", {}).get(p, 0), c["error_permille"][p]) for p in PHASES
        ]
        out.append(
            f"| {f['family']} | {f['role']} | {s['shapes']} | {s['measured_above_predicted']} "
            f"| {s['median_measured_over_predicted']} | {s['min_measured_over_predicted']} "
            f"| {s['max_measured_over_predicted']} | {s['accelerate_below_measured']} "
            f"| {c['seconds']} | {err[0]} | {err[1]} | {routing} |"
        )
    out += ["", "| family | phase | shape | measured | predicted | m/p | accelerate | m/a |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for f in doc["families"]:
        for r in f["rows"]:
            ext = "" if r["within_calibration"] else " (extrapolated)"
            out.append(
                f"| {f['family']} | {r['phase']} | {r['batch']}x{r['seq']}{ext} "
                f"| {r['measured_bytes']:,} | {r['predicted_bytes']:,} "
                f"| {r['measured_over_predicted']} | {r['accelerate_increment_bytes']:,} "
                f"| {r['measured_over_accelerate']} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="", help="Comma-separated families.")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    only = {x for x in a.only.split(",") if x}
    fams = [f for f in _families(a.size) if not only or f["family"] in only]
    a.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "device": f"{device.type} ({card or platform.machine()})",
        "size": a.size,
        "versions": {d: metadata.version(d) for d in ("torch", "transformers", "peft")},
        "method": VERSION,
        "families": [],
    }
    for f in fams:
        doc["families"].append(_family(f, device, lambda m: print(m, flush=True)))
        (a.out / "estimator_accuracy.json").write_text(json.dumps(doc, indent=1) + "\n")
    (a.out / "estimator_accuracy.md").write_text(_markdown(doc))
    print(_markdown(doc))


if __name__ == "__main__":
    main()
