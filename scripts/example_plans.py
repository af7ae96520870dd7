"""The example repository's multi-rank plan, importable without git (device scripts use it)."""

from __future__ import annotations

__all__ = ["MULTI_RANK_PLAN", "MULTI_RANK_PLAN_FILE"]

MULTI_RANK_PLAN_FILE = "qualification-multirank.toml"
MULTI_RANK_PLAN = """\
# The expert-parallel variant at two ranks (one GPU each; gloo on CPU), and the
# mesh handoff through the multi-rank harness.
workload = "model.workload_ep:make_workload"

[workload_params]
d_model = 64
n_layers = 2

[package]
paths = ["model/**/*.py"]

[[claims]]
name = "ep2.admission.no-oom-after-admit"
check = "admission"
params = { batches = [1, 2, 4], seqs = [16, 64], pressure = "edge" }
carry_over = "package"
world_size = 2
timeout_s = 900

[[claims]]
name = "ep2.regression.24view-nograd"
check = "regression-24view"
params = { views = 24, seq = 32 }
carry_over = "package"
world_size = 2
timeout_s = 600

[[claims]]
name = "ep2.backward.full-prefix"
check = "full-prefix-backward"
params = { batch = 4, seq = 64, prefix_backwards = 3 }
carry_over = "package"
world_size = 2
timeout_s = 600

[[claims]]
name = "ep2.cleanup.all-released"
check = "cleanup"
params = { batch = 2, seq = 32 }
carry_over = "package"
world_size = 2
timeout_s = 600

[[claims]]
name = "mesh.handoff-gather"
check = "mesh-handoff"
params = { world_size = 2, mode = "gather" }
world_size = 2
timeout_s = 600
"""
