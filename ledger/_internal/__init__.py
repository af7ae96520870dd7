"""The transparency room's wire formats, not part of any public surface: the
RFC 6962 Merkle tree, C2SP checkpoint notes, and the fork and rollback checks
between two checkpoints. Below the store, which hashes each entry into the tree,
and the offline verifier; they import the evidence format alone."""
