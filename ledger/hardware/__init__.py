"""This host's GPUs as the ledger names them: a `Device` (its CUDA index and NVML
UUID, or a logical slot on a CPU host) and what NVML says of the GPUs it sees, read
without torch. Below both the orchestration that schedules claims onto devices
(`execution/`) and the fleet that leaves sick ones out (`fleet/`); it imports no
other room. Importing this package imports none of its modules."""
