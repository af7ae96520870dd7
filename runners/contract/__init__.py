"""The contract every part of the runners shares, and the ledger reads: torch-free.

What belongs here: the result a check hands back and its document checked field by
field (`result`), the literals the runners and the ledger exchange (`names`), the
environment of a claim's processes (`childenv`), and the claim as one value
(`request`: `Claim`, and `ClaimRequest`: it and where it runs). Nothing that runs a
claim: the harness, the checks, the claim process and the parent's side all import
this room, and it imports none of them (`runners.protocol`, a workload's face, keeps
its own name beside it).

Imports nothing: the ledger reads `result`, `names` and `request` without loading torch.
"""
