"""Mesh handoff on 2 GPUs: memory outside the allocator pool across a re-shard.

Each rank (a child process, NCCL backend) holds one shard of a weight. The
handoff to an evaluation mesh is done two ways: kept in place (the renamed
sharding: no exchange) and re-sharded to a full replica by
``all_gather_into_tensor``. Per rank, memory outside the pool (device used less
reserved, and NVML per-process used less reserved) is sampled before the
handoff, after the in-place handoff, after the first and a second all-gather,
and after ``destroy_process_group``. The first all-gather opens the NCCL
communicator whose buffers live outside the pool (on H200 about +0.82 GiB per
rank, not returned by ``destroy_process_group``).

Outcome: for ``mode`` ("keep" or "gather") the handoff passes iff, on every
rank, outside-pool memory after that handoff (and, for gather, after
destroy) stays within ``flat_tolerance_bytes`` of the level before it, and the
gathered weight equals the concatenated shards. Both paths are always measured.

``python -m runners.checks.mesh_handoff --worker ...`` is the rank entry; on CPU
the same code runs on gloo as a functional test of the path (device_kind=cpu,
outcome inconclusive: there is no allocator pool to measure).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import runners
from runners.checks.base import CheckContext, ParamError, Session, Verdict, execute, infra_result
from runners.checks.base import int_param as _int
from runners.harness import nvml
from runners.harness.probe import MiB
from runners.result import CheckResult, Json

NAME = "mesh-handoff"
VERSION = "1"
DEFAULTS: dict[str, Json] = {
    "world_size": 2,
    "rows": 8192,
    "cols": 4096,
    "dtype": "bfloat16",
    "mode": "keep",
    "flat_tolerance_bytes": 16 * MiB,
    "timeout_s": 300,
}
"""The full weight is ``rows`` x ``cols`` of ``dtype``, split by rows over the ranks."""

POINTS = (
    "before",
    "after_keep",
    "after_first_allgather",
    "after_second_allgather",
    "after_destroy",
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --- rank side -----------------------------------------------------------------------


def _sample(device: torch.device) -> dict[str, int | None]:
    if device.type != "cuda":
        return {
            "outside_pool_bytes": None,
            "process_outside_pool_bytes": None,
            "reserved_bytes": None,
            "allocated_bytes": None,
        }
    torch.cuda.synchronize(device)
    free, total = (int(x) for x in torch.cuda.mem_get_info(device))
    reserved = int(torch.cuda.memory_reserved(device))
    uuid = nvml.normalise_uuid(str(torch.cuda.get_device_properties(device).uuid))
    proc = nvml.process_used_bytes(uuid)
    return {
        "outside_pool_bytes": (total - free) - reserved,
        "process_outside_pool_bytes": None if proc is None else proc - reserved,
        "reserved_bytes": reserved,
        "allocated_bytes": int(torch.cuda.memory_allocated(device)),
        "used_bytes": total - free,
    }


def rank_main(args: argparse.Namespace) -> dict[str, Any]:
    """One rank: shard, keep, gather twice, destroy; samples at each point."""
    import torch.distributed as dist

    rank, world = args.rank, args.world_size
    cuda = args.backend == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    info: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "device": str(device)}
    if cuda:
        torch.cuda.set_device(device)
        torch.cuda.init()  # type: ignore[no-untyped-call]
        info["gpu_uuid"] = nvml.normalise_uuid(str(torch.cuda.get_device_properties(device).uuid))
    # No device_id: the communicator is then created lazily, by the first collective.
    dist.init_process_group(
        backend=args.backend, init_method=f"file://{args.init_file}", rank=rank, world_size=world
    )
    dtype = _DTYPES[args.dtype]
    rows = args.rows // world
    gen = torch.Generator().manual_seed(1234)
    full = torch.randn(args.rows, args.cols, generator=gen).to(dtype)
    shard = full[rank * rows : (rank + 1) * rows].clone().to(device)
    expected = full.to(device)
    del full
    samples: dict[str, dict[str, int | None]] = {}
    times: dict[str, int] = {}
    samples["before"] = _sample(device)

    # In-place handoff: the evaluation mesh's sharding names the same placement.
    eval_weight = shard
    samples["after_keep"] = _sample(device)
    info["keep_aliases_shard"] = eval_weight.data_ptr() == shard.data_ptr()

    replica = torch.empty(rows * world, args.cols, dtype=dtype, device=device)
    t0 = time.perf_counter_ns()
    dist.all_gather_into_tensor(replica, shard)
    if cuda:
        torch.cuda.synchronize(device)
    times["first_allgather_ns"] = time.perf_counter_ns() - t0
    samples["after_first_allgather"] = _sample(device)
    info["gather_matches"] = bool(torch.equal(replica, expected))
    t0 = time.perf_counter_ns()
    dist.all_gather_into_tensor(replica, shard)
    if cuda:
        torch.cuda.synchronize(device)
    times["second_allgather_ns"] = time.perf_counter_ns() - t0
    samples["after_second_allgather"] = _sample(device)
    del replica, expected, eval_weight, shard
    dist.destroy_process_group()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    samples["after_destroy"] = _sample(device)
    info["dist_initialized_after_destroy"] = dist.is_initialized()
    info["samples"] = samples
    info["times"] = times
    return info


def _worker_cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.checks.mesh_handoff --worker")
    ap.add_argument("--worker", action="store_true", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    ap.add_argument("--init-file", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, required=True)
    ap.add_argument("--dtype", choices=sorted(_DTYPES), required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    info = rank_main(args)
    Path(args.out).write_text(json.dumps(info, sort_keys=True))
    return 0


# --- check side ----------------------------------------------------------------------


def run(ctx: CheckContext, params: dict[str, Json]) -> list[CheckResult]:
    p = {**DEFAULTS, **params}
    world = p.get("world_size")
    if ctx.device.type == "cuda" and (
        not isinstance(world, int) or torch.cuda.device_count() < world
    ):
        return [
            infra_result(
                ctx,
                check=NAME,
                version=VERSION,
                params=p,
                reason=f"needs {world} CUDA devices; {torch.cuda.device_count()} visible",
            )
        ]
    return [execute(ctx, check=NAME, version=VERSION, params=p, body=lambda s: _body(s, p))]


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def _body(sess: Session, p: dict[str, Json]) -> Verdict:
    world = _int(p, "world_size", 2)
    rows, cols = _int(p, "rows", 8192), _int(p, "cols", 4096)
    dtype = p.get("dtype")
    mode = p.get("mode")
    if dtype not in _DTYPES or mode not in ("keep", "gather") or rows % world:
        raise ParamError(f"dtype {dtype!r}, mode {mode!r}, rows {rows} (must divide by {world})")
    tol = _int(p, "flat_tolerance_bytes", 16 * MiB)
    cuda = sess.device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    work = sess.registry.make_tempdir("mesh-handoff-")
    env = dict(os.environ)
    here = str(Path(runners.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (here, env.get("PYTHONPATH")) if x)
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(world):
        argv = [
            sys.executable,
            "-m",
            "runners.checks.mesh_handoff",
            "--worker",
            "--rank",
            str(rank),
            "--world-size",
            str(world),
            "--backend",
            backend,
            "--init-file",
            str(work / "store"),
            "--rows",
            str(rows),
            "--cols",
            str(cols),
            "--dtype",
            str(dtype),
            "--out",
            str(work / f"rank{rank}.json"),
        ]
        log = open(work / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed once the rank exits
        procs.append(
            sess.registry.spawn(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
        )
        log.close()
    sess.progress(f"mesh handoff: {world} ranks on {backend}")
    deadline = time.monotonic() + _int(p, "timeout_s", 300)
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    m: dict[str, Json] = {
        "backend": backend,
        "world_size": world,
        "mode": str(mode),
        "flat_tolerance_bytes": tol,
        "weight_bytes": rows * cols * _DTYPES[str(dtype)].itemsize,
        "returncodes": [c for c in codes],  # a list[Json] by inference
    }
    ranks: list[dict[str, Any]] = []
    for rank in range(world):
        path = work / f"rank{rank}.json"
        if codes[rank] != 0 or not path.exists():
            tail = (work / f"rank{rank}.log").read_text(errors="replace")[-2000:]
            return Verdict(
                outcome="infra-error",
                reason=f"rank {rank} exited {codes[rank]} without a result: {tail.strip()}",
                measurements=m,
            )
        ranks.append(json.loads(path.read_text()))
    scope: dict[str, str | int] = {"world_size": world, "backend": backend}
    # The check's own sharded weight is the workload here, not the plan's model.
    spec = json.dumps({"rows": rows, "cols": cols, "dtype": dtype, "world": world}, sort_keys=True)
    sess.workload_scope = {
        "workload": "mesh-handoff-weight",
        "workload_digest": hashlib.sha256(spec.encode()).hexdigest(),
        "dtype": str(dtype),
    }
    problems: list[str] = []
    for info in ranks:
        r = info["rank"]
        s = info["samples"]
        for point in POINTS:
            for k, v in s[point].items():
                m[f"rank{r}_{point}_{k}"] = v
        for key in ("outside_pool_bytes", "process_outside_pool_bytes"):
            before = s["before"][key]
            m[f"rank{r}_keep_{key}_delta"] = _delta(before, s["after_keep"][key])
            m[f"rank{r}_first_allgather_{key}_delta"] = _delta(
                s["after_keep"][key], s["after_first_allgather"][key]
            )
            m[f"rank{r}_second_allgather_{key}_delta"] = _delta(
                s["after_first_allgather"][key], s["after_second_allgather"][key]
            )
            m[f"rank{r}_after_destroy_{key}_delta"] = _delta(before, s["after_destroy"][key])
        m[f"rank{r}_gather_matches"] = info["gather_matches"]
        m[f"rank{r}_gpu_uuid"] = info.get("gpu_uuid")
        m[f"rank{r}_first_allgather_ns"] = info["times"]["first_allgather_ns"]
        m[f"rank{r}_second_allgather_ns"] = info["times"]["second_allgather_ns"]
        if not info["gather_matches"]:
            problems.append(f"rank {r}: gathered weight differs from the shards")
        if info["dist_initialized_after_destroy"]:
            problems.append(f"rank {r}: process group still initialised after destroy")
        if cuda:
            key = "outside_pool_bytes"
            if mode == "keep":
                d = m[f"rank{r}_keep_{key}_delta"]
                what = "in-place handoff"
            else:
                d = m[f"rank{r}_after_destroy_{key}_delta"]
                what = "all-gather handoff (after destroy_process_group)"
            if isinstance(d, int) and d > tol:
                problems.append(
                    f"rank {r}: memory outside the pool grew {d} bytes across the {what} "
                    f"(tolerance {tol}); first all-gather delta "
                    f"{m[f'rank{r}_first_allgather_{key}_delta']}"
                )
    if problems:
        return Verdict(outcome="failed", reason="; ".join(problems), measurements=m, scope=scope)
    if not cuda:
        return Verdict(
            outcome="inconclusive",
            reason="device_kind=cpu: gloo functional run of the handoff path; memory outside "
            "an allocator pool is not measured on CPU",
            measurements=m,
            scope=scope,
        )
    return Verdict(outcome="passed", reason=None, measurements=m, scope=scope)


if __name__ == "__main__":
    raise SystemExit(_worker_cli(sys.argv[1:]))
