"""One claim in processes of its own, from the parent's side and the child's, and what
crosses between them and the ledger.

What belongs here: the claim as one value (`request`: `Claim`, and `ClaimRequest`: it
and where it runs), running it in fresh processes (`isolated`: launch, wait, read; and
the child's side), what its exit adds to its results (`claim_exit`), who wrote each
fact of them (`authors`: the host's stamped once, into a frozen `result.Stamped`), the
environment of its processes (`childenv`, torch-free), one rank of a multi-rank claim
(`distributed`) and the ranks' results merged (`ranks`), the result a check hands back
and its document checked field by field (`result`), and the literals the runners and
the ledger exchange (`names`). Not the checks themselves (`runners.checks`), nor the
fork server a claim may be forked from (`runners.fork`).

Imports nothing: the ledger reads `result` and `names` without loading torch.
"""
