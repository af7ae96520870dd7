"""Building blocks of the ledger core that are not part of its public surface."""
