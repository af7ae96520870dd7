"""Conformance before any GPU time: what each claim of a plan will get from its
workload. `probe` runs `runners.doctor` on a checkout (sandboxed: the workload is
the revision's code); `from_plan` says what the plan alone shows (a ready adapter
without an estimator), instantly and without running anything."""
