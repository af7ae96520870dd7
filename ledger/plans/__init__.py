"""The governing plan as evidence: the plan committed at a base commit, stored in
the ledger with the git objects that prove it (commit, trees, blob), so a reader
without a checkout recomputes their ids and judges with the plan a writer used.

`entry` (the body, read and proved; no database), `objects` (git objects without
git), `governing` (the plan that governs a revision, found and loaded, and the
revision's identity under it: `identify`), `ledger` (recording and finding plan
entries in a store)."""
