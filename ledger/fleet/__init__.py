"""The fleet that runs qualification: the CI job a run belongs to, the health of the
GPUs it ran on, infrastructure faults told from code failures by that health, and the
per-device report that finds a sick GPU."""
