"""Where a claim runs: a claim run as data, and the executors that run it.

A `ClaimRun` says what to run (claim, check, parameters, workload, ranks,
time limit); an executor decides only where: `local` runs claims side by side
on the GPUs of this host, each on GPUs of its own (`devices.DevicePool`);
`ray` hands each claim to a Ray cluster as a task asking for ``world_size``
GPUs (`ray_executor`). The ledger schedules nothing beyond assigning the GPUs
of one host: across hosts, Ray does.

`qualify` orchestrates them (`ledger qualify`): a plan's claims on a temporary
checkout of the revision, each finished claim signed and recorded at once
through the write path. Orchestration imports the write path, identity, the
plan, the sandbox and, lazily, `runners` (torch; docs/architecture.md, "Who
loads `runners`", lists every module of `ledger` that imports it); only the command
line (`cli/qualify.py`) imports `qualify`.
"""

from ledger.execution.claimrun import ClaimRun, Finished
from ledger.execution.devices import Device, DevicePool, parse_gpus

__all__ = ["ClaimRun", "Device", "DevicePool", "Finished", "parse_gpus"]
