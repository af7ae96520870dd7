"""A repository's identity with a history: aliases the ledger's operator logs so
that receipts recorded under an earlier id (a folder name, a root commit, an old
remote) count under the current one, and the hint when evidence sits under another."""
