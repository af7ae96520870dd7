"""The claim process's own side: one rank of a claim, from its request to its results.

What belongs here: the entry point every claim process runs (``python -m runners.rank
REQUEST.json RESULT.json``, started afresh or forked from a fork server), which reads
the request the parent wrote (`runners.contract.request.ClaimRequest.body`), joins the
ranks' process group where there is one, runs the claim's check (`runners.api`) and
writes what it found (`serve`). Not the parent's side (`runners.claim`), which
launches this process, waits for it and reads its result once, nor the fork server
(`runners.fork`), which imports this room before it forks.

Imports nothing: `python -m runners.rank` runs `__main__`.
"""
