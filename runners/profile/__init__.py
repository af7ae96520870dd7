"""`ledger profile`: one step of a workload under the attributing tracker (`step`),
beside the workload's own estimate. The tracker itself is `runners.harness.attribution`.

Imports nothing.
"""
