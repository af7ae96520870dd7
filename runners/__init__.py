"""Qualification runners: harness, checks and workloads (torch).

Importing this package imports nothing else: a workload loader may re-import
``runners`` from a checkout, and the ledger imports `runners.api` lazily.
"""
