"""Transparency beyond the log's own key, by the C2SP specs: verifier keys
(vkeys), witness cosignatures (tlog-cosignature), trust policies
(tlog-policy), the witness protocol (tlog-witness) on both sides, and
offline proofs (tlog-proof)."""
