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

``python -m runners.checks.mesh_handoff RANK.request.json RANK.json`` is the rank
entry when the check starts its own ranks. Inside the multi-rank harness (a
claim with ``world_size = N``) every rank runs the handoff in process, over a
process group of its own that it creates and destroys. On CPU the same
code runs on gloo as a functional test of the path (device_kind=cpu, outcome
inconclusive: there is no allocator pool to measure).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch

from runners.checks.context import CheckContext, Session, Verdict, could_not_run
from runners.checks.execute import execute
from runners.checks.params import CheckParams, ParamError
from runners.contract.names import MESH_HANDOFF
from runners.contract.result import CheckResult, Json
from runners.harness import child
from runners.harness.collect import collect
from runners.harness.distributed import is_distributed
from runners.harness.probe import CudaProbe, MiB

NAME = MESH_HANDOFF
VERSION = "1"


@dataclass(kw_only=True, slots=True, frozen=True)
class Params(CheckParams):
    world_size: int = 2
    """Ranks, one child process each (on CUDA one GPU each)."""
    rows: int = 8192
    """Rows of the full weight, split evenly over the ranks."""
    cols: int = 4096
    """Columns of the full weight."""
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Element type of the weight."""
    mode: Literal["keep", "gather"] = "keep"
    """The handoff the outcome is about: ``keep`` (in place) or ``gather`` (all-gather to a
    full replica, judged after destroy_process_group). Both are always measured."""
    flat_tolerance_bytes: int = 16 * MiB
    """Allowed growth of memory outside the pool across the handoff, per rank."""
    timeout_s: int = 300
    """Seconds all ranks together may take."""

    def constrain(self) -> None:
        if self.world_size < 1 or self.rows % self.world_size:
            raise ParamError(
                f"parameter 'rows' must divide by world_size {self.world_size}, got {self.rows}"
            )


POINTS = (
    "before",
    "after_keep",
    "after_first_allgather",
    "after_second_allgather",
    "after_destroy",
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --- rank side -----------------------------------------------------------------------


def _sample(device: torch.device, probe: CudaProbe | None) -> dict[str, int | None]:
    if probe is None:
        return {
            "outside_pool_bytes": None,
            "process_outside_pool_bytes": None,
            "reserved_bytes": None,
            "allocated_bytes": None,
        }
    torch.cuda.synchronize(device)
    s = probe.sample()
    return {
        "outside_pool_bytes": s.outside_pool_bytes,
        "process_outside_pool_bytes": s.process_outside_pool_bytes,
        "reserved_bytes": s.reserved_bytes,
        "allocated_bytes": s.allocated_bytes,
        "used_bytes": s.total_bytes - s.free_bytes,
    }


def rank_main(req: dict[str, Any]) -> dict[str, Any]:
    """One rank started by this check: its own default group, handed off, destroyed."""
    import torch.distributed as dist

    rank, world = int(req["rank"]), int(req["world_size"])
    cuda = req["backend"] == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    probe: CudaProbe | None = None
    if cuda:
        torch.cuda.set_device(device)
        probe = CudaProbe(device)
    # No device_id: the communicator is then created lazily, by the first collective.
    dist.init_process_group(
        backend=req["backend"],
        init_method=f"file://{req['init_file']}",
        rank=rank,
        world_size=world,
    )

    def destroy() -> bool:
        dist.destroy_process_group()
        return dist.is_initialized()

    return handoff(req, rank, world, device, probe, None, destroy)


def handoff(
    req: dict[str, Any],
    rank: int,
    world: int,
    device: torch.device,
    probe: CudaProbe | None,
    group: Any,
    destroy: Callable[[], bool],
) -> dict[str, Any]:
    """Shard, keep, gather twice over ``group``, ``destroy`` it; samples at each point.

    ``destroy`` returns whether the group is still usable afterwards."""
    import torch.distributed as dist

    cuda = device.type == "cuda"
    info: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "device": str(device)}
    if probe is not None:
        info["gpu_uuid"] = probe.uuid
    dtype = _DTYPES[req["dtype"]]
    rows = int(req["rows"]) // world
    gen = torch.Generator().manual_seed(1234)
    full = torch.randn(int(req["rows"]), int(req["cols"]), generator=gen).to(dtype)
    shard = full[rank * rows : (rank + 1) * rows].clone().to(device)
    expected = full.to(device)
    del full
    samples: dict[str, dict[str, int | None]] = {}
    times: dict[str, int] = {}
    samples["before"] = _sample(device, probe)

    # In-place handoff: the evaluation mesh's sharding names the same placement.
    eval_weight = shard
    samples["after_keep"] = _sample(device, probe)
    info["keep_aliases_shard"] = eval_weight.data_ptr() == shard.data_ptr()

    replica = torch.empty(rows * world, int(req["cols"]), dtype=dtype, device=device)
    t0 = time.perf_counter_ns()
    dist.all_gather_into_tensor(replica, shard, group=group)
    if cuda:
        torch.cuda.synchronize(device)
    times["first_allgather_ns"] = time.perf_counter_ns() - t0
    samples["after_first_allgather"] = _sample(device, probe)
    info["gather_matches"] = bool(torch.equal(replica, expected))
    t0 = time.perf_counter_ns()
    dist.all_gather_into_tensor(replica, shard, group=group)
    if cuda:
        torch.cuda.synchronize(device)
    times["second_allgather_ns"] = time.perf_counter_ns() - t0
    samples["after_second_allgather"] = _sample(device, probe)
    del replica, expected, eval_weight, shard
    info["dist_initialized_after_destroy"] = destroy()
    collect(final=True)
    if cuda:
        torch.cuda.empty_cache()
    samples["after_destroy"] = _sample(device, probe)
    info["samples"] = samples
    info["times"] = times
    return info


def _in_harness(sess: Session, p: Params) -> dict[str, Any]:
    """This rank's handoff inside the multi-rank harness: over a group of its own (the
    harness's default group outlives the check), created and destroyed here, so the
    communicator it creates on its first collective is the one measured."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if p.world_size != world:
        raise ParamError(f"parameter 'world_size' is {p.world_size}, the claim runs {world} ranks")
    probe = sess.probe if isinstance(sess.probe, CudaProbe) else None
    group = dist.new_group(backend=dist.get_backend())

    def destroy() -> bool:
        dist.destroy_process_group(group)
        try:
            dist.get_rank(group)
        except (ValueError, RuntimeError):
            return False  # no longer registered: destroyed
        return True

    req = {"rows": p.rows, "cols": p.cols, "dtype": p.dtype}
    return handoff(req, rank, world, sess.device, probe, group, destroy)


# --- check side ----------------------------------------------------------------------


def run(ctx: CheckContext, p: Params, recorded: dict[str, Json]) -> list[CheckResult]:
    if ctx.device.type == "cuda" and torch.cuda.device_count() < p.world_size:
        # Not the code's failure nor the host's fault: what it was handed (the parent
        # decides this before it starts; here only where it was started all the same).
        why = f"needs {p.world_size} CUDA devices; {torch.cuda.device_count()} handed"
        return [could_not_run(ctx, check=NAME, version=VERSION, params=recorded, why=why)]
    body = partial(_body, p=p)
    return [execute(ctx, check=NAME, version=VERSION, params=p, recorded=recorded, body=body)]


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


def _body(sess: Session, p: Params) -> Verdict:
    world = p.world_size
    cuda = sess.device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if is_distributed():
        return _verdict(sess, p, [_in_harness(sess, p)], {"harness": "multi-rank"})
    work = sess.registry.make_tempdir("mesh-handoff-")
    procs = _spawn_ranks(sess, p, work, backend)
    sess.progress(f"mesh handoff: {world} ranks on {backend}")
    deadline = time.monotonic() + p.timeout_s
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    m: dict[str, Json] = {"returncodes": [c for c in codes]}  # a list[Json] by inference
    ranks: list[dict[str, Any]] = []
    for rank in range(world):
        # Read as data, beneath the folder: the ranks ran the pull request's code.
        got = child.read_result(work / f"rank{rank}.json") if codes[rank] == 0 else None
        if not isinstance(got, dict):
            tail = (work / f"rank{rank}.log").read_text(errors="replace")[-2000:]
            # No result to judge: the harness cannot say whose (an infra-error is only
            # ever the parent's own reading).
            return Verdict(
                outcome="inconclusive",
                reason=f"rank {rank} exited {codes[rank]} without a result: {tail.strip()}",
                measurements=m,
            )
        ranks.append(got)
    return _verdict(sess, p, ranks, m)


def _verdict(sess: Session, p: Params, ranks: list[dict[str, Any]], m: dict[str, Json]) -> Verdict:
    """The handoff's verdict from the ranks' samples (all ranks, or this one)."""
    world, rows, cols, dtype, mode = p.world_size, p.rows, p.cols, p.dtype, p.mode
    cuda = sess.device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    m.update(
        {
            "backend": backend,
            "world_size": world,
            "mode": str(mode),
            "flat_tolerance_bytes": p.flat_tolerance_bytes,
            "weight_bytes": rows * cols * _DTYPES[str(dtype)].itemsize,
        }
    )
    scope: dict[str, str | int] = {"world_size": world, "backend": backend}
    # The check's own sharded weight is the workload here, not the plan's model.
    spec = json.dumps({"rows": rows, "cols": cols, "dtype": dtype, "world": world}, sort_keys=True)
    sess.workload_scope = {
        "workload": "mesh-handoff-weight",
        "workload_digest": hashlib.sha256(spec.encode()).hexdigest(),
        "dtype": str(dtype),
    }
    problems = [x for info in ranks for x in _rank_problems(info, m, p, cuda)]
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


def _spawn_ranks(
    sess: Session, p: Params, work: Path, backend: str
) -> list[subprocess.Popen[bytes]]:
    """Start one owned child per rank; each writes ``rank{N}.json`` and ``rank{N}.log``."""
    world, rows, cols, dtype = p.world_size, p.rows, p.cols, p.dtype
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(world):
        request = {
            "rank": rank,
            "world_size": world,
            "backend": backend,
            "init_file": str(work / "store"),
            "rows": rows,
            "cols": cols,
            "dtype": dtype,
        }
        child.write_request(work / f"rank{rank}.request.json", request)
        argv = child.argv(
            "runners.checks.mesh_handoff",
            work / f"rank{rank}.request.json",
            work / f"rank{rank}.json",
        )
        log = open(work / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed once the rank exits
        procs.append(
            sess.registry.spawn(
                argv, stdout=log, stderr=subprocess.STDOUT, env=child.env(), cwd=str(work)
            )
        )
        log.close()
    return procs


def _rank_problems(info: dict[str, Any], m: dict[str, Json], p: Params, cuda: bool) -> list[str]:
    """Record one rank's samples and deltas in ``m``; what went wrong on it."""
    mode, tol = p.mode, p.flat_tolerance_bytes
    problems: list[str] = []
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
    return problems


if __name__ == "__main__":
    sys.exit(child.serve(rank_main))
