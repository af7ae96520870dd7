"""The conformance check before any GPU time (``ledger doctor``): what a plan's
workload can do, probed at a tiny shape on CPU, and what that means for each claim."""
