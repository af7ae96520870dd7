"""One claim in processes of its own, from the parent's side: launch, wait, read.

What belongs here: running a claim in fresh processes (`isolated`: the launch, the
wait, the one reading of how each rank ended), what its exit adds to its results
(`claim_exit`), who wrote each fact of them (`authors`: the host's stamped once, into
a frozen `runners.contract.result.Stamped`) and the ranks' results merged (`ranks`).
Not the claim as a value, its result or its literals (`runners.contract`), nor the
claim process's own side (`runners.rank`), nor the fork server a claim may be forked
from (`runners.fork`): this room sits above them all.

Imports nothing: a caller imports the module it needs.
"""
