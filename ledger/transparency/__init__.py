"""The transparency log and what proves it: checkpoints (`checkpoints`),
inclusion and consistency proofs (`proofs`), bundle export (`export`), the audit
(`audit`), a receipt verified in the ledger that holds it (`logged`); and beyond
the log's own key, by the C2SP specs: verifier keys (vkeys), witness
cosignatures (tlog-cosignature), trust policies (tlog-policy) applied where a
checkpoint is read (`enforce`), the witness protocol (tlog-witness) on both sides
in one module (`witness`; its HTTP server is a surface, `ledger.service`), and
offline proofs (tlog-proof). The wire formats (Merkle tree, checkpoint notes) are
private, in `ledger._internal`, below the store. Importing this package imports
none of its modules."""
