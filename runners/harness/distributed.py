"""One rank of a multi-rank claim: its process group, its proofs, rank agreement.

Every rank runs the same check on its own device (cuda:RANK under NCCL, the
CPU under gloo) inside a default process group joined through a file
rendezvous. The group is created before the check and destroyed after it;
memory outside the allocator's pool is sampled before the group exists,
after its first collective (NCCL creates its communicator there) and after
`destroy_process_group`, so each rank's cleanup proof covers the
communicator. Checks whose decisions steer collectives (admission) agree on
them through `agree`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from runners.contract.result import CheckResult, CleanupProof, Json, ReleasedResource
from runners.harness.collect import collect
from runners.harness.probe import CudaProbe
from runners.harness.proofs import CUDA_TOLERANCE_BYTES
from runners.protocol import AdmissionDecision

__all__ = [
    "RankSession",
    "add_rank_proofs",
    "agree",
    "agreed_decision",
    "any_rank",
    "is_distributed",
    "rank_and_world",
]


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a process group."""
    if not is_distributed():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def agree(maximum: Mapping[str, int], minimum: Mapping[str, int]) -> dict[str, int]:
    """The MAX over ranks of each ``maximum`` figure and the MIN of each ``minimum``
    figure (as distributed admission controllers agree: the step needs what its
    hungriest rank needs and fits only where the tightest rank has room). The
    identity outside a process group."""
    out = {**maximum, **minimum}
    if not is_distributed():
        return out
    dev = _collective_device()
    for names, op in ((list(maximum), dist.ReduceOp.MAX), (list(minimum), dist.ReduceOp.MIN)):
        if not names:
            continue
        t = torch.tensor([int(out[n]) for n in names], dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=op)
        out.update({n: int(v) for n, v in zip(names, t.tolist(), strict=True)})
    return out


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` holds on any rank: a loop one rank leaves, every rank leaves, so
    that no rank waits in a collective its peers never enter."""
    return bool(agree({"flag": int(flag)}, {})["flag"])


def agreed_decision(d: AdmissionDecision, row: dict[str, Json]) -> AdmissionDecision:
    """The admission decision every rank takes: required = MAX over ranks of the
    predicted bytes, usable = MIN over ranks of the usable bytes, admitted iff the one
    fits the other. This rank's own figures are recorded in ``row`` (``rank_*``)."""
    if not is_distributed():
        return d
    row["rank_predicted_bytes"] = d.predicted_bytes
    row["rank_usable_bytes"] = d.usable_bytes
    row["rank_admitted"] = d.admitted
    a = agree(
        {"predicted_bytes": d.predicted_bytes, "reserve_bytes": d.reserve_bytes},
        {"usable_bytes": d.usable_bytes},
    )
    admitted = a["predicted_bytes"] <= a["usable_bytes"]
    return AdmissionDecision(
        admitted=admitted,
        predicted_bytes=a["predicted_bytes"],
        usable_bytes=a["usable_bytes"],
        reserve_bytes=a["reserve_bytes"],
        suggestion=None if admitted else (d.suggestion or "refused on a peer rank"),
    )


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@dataclass(slots=True)
class RankSession:
    """The process group of one rank, from rendezvous to proven destruction."""

    rank: int
    world_size: int
    backend: str
    init_file: str
    timeout_s: int
    probe: CudaProbe | None = None
    samples: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def from_request(cls, req: Mapping[str, Any]) -> RankSession:
        return cls(
            rank=int(req["rank"]),
            world_size=int(req["world_size"]),
            backend=str(req["backend"]),
            init_file=str(req["init_file"]),
            timeout_s=int(req["timeout_s"]),
        )

    def _outside_pool(self) -> int | None:
        if self.probe is None:
            return None
        torch.cuda.synchronize(self.probe.device)
        return self.probe.sample().outside_pool_bytes

    def start(self) -> None:
        if self.backend == "nccl":
            torch.cuda.set_device(self.rank)
            self.probe = CudaProbe(torch.device("cuda", self.rank))
        self.samples["before_init"] = self._outside_pool()
        dist.init_process_group(
            backend=self.backend,
            init_method=f"file://{self.init_file}",
            rank=self.rank,
            world_size=self.world_size,
            # A peer that never arrives fails the collective instead of hanging it past
            # the claim's own timeout.
            timeout=dt.timedelta(seconds=self.timeout_s),
        )
        # One collective creates the communicator, so its memory is measured apart
        # from the check's.
        t = torch.ones(1, device=_collective_device())
        dist.all_reduce(t)
        self.samples["after_first_collective"] = self._outside_pool()

    def finish(self) -> list[ReleasedResource]:
        """Destroy the group; the proofs that it and its communicator memory are gone."""
        if is_distributed():
            dist.destroy_process_group()
        collect(final=True)
        if self.probe is not None:
            torch.cuda.empty_cache()
        self.samples["after_destroy"] = self._outside_pool()
        gone = not dist.is_initialized()
        proofs = [
            ReleasedResource(
                kind="dist-group",
                id=f"rank{self.rank}:default-{self.backend}",
                released=gone,
                proof=f"torch.distributed.is_initialized() is {not gone} after "
                "destroy_process_group",
            )
        ]
        b, a = self.samples["before_init"], self.samples["after_destroy"]
        if b is not None and a is not None and self.probe is not None:
            delta = a - b
            ok = delta <= CUDA_TOLERANCE_BYTES
            comm = self.samples["after_first_collective"]
            proofs.append(
                ReleasedResource(
                    kind="gpu-memory",
                    id=f"rank{self.rank}:{self.probe.uuid}:communicator-outside-pool",
                    released=ok,
                    proof=(
                        f"device used - reserved: {a} bytes after destroy_process_group vs "
                        f"{b} before init_process_group (after the first collective: {comm}), "
                        f"delta {delta} {'<=' if ok else '>'} tolerance {CUDA_TOLERANCE_BYTES}"
                    ),
                )
            )
        return proofs

    def measurements(self) -> dict[str, Json]:
        m: dict[str, Json] = {f"outside_pool_{k}_bytes": v for k, v in self.samples.items()}
        b = self.samples.get("before_init")
        for point in ("after_first_collective", "after_destroy"):
            v = self.samples.get(point)
            m[f"outside_pool_{point}_delta_bytes"] = None if b is None or v is None else v - b
        m["backend"] = self.backend
        if self.probe is not None:
            m["gpu_uuid"] = self.probe.uuid
        return m


def add_rank_proofs(
    results: list[CheckResult], sess: RankSession, proofs: list[ReleasedResource]
) -> None:
    """Attach the group's proofs and measurements to every result of this rank."""
    measured = CUDA_TOLERANCE_BYTES if len(proofs) > 1 else 0
    for r in results:
        resources = [*r.cleanup.resources, *proofs]
        r.cleanup = CleanupProof(
            complete=r.cleanup.complete and all(p.released for p in proofs),
            resources=resources,
            tolerance_bytes=max(r.cleanup.tolerance_bytes, measured),
        )
        r.measurements["process_group"] = sess.measurements()
