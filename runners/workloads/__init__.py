"""Workloads: the loader for a plan's entry point, and the reference MoE workload."""
