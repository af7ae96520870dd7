"""The evidence format: what a receipt is, byte for byte, read and written without a
database, a network, git or a renderer. The pydantic wire models (`models`), the
wire constants (`kinds`) and the hand checks that verify without building a model
(`shape`), the JSON Schemas generated from them (`schemas`), canonical bytes and ids
(`canonical`), input bounds (`limits`), Ed25519 keys (`keys`), DSSE signing
(`dsse`), statements built, signed and parsed back (`statement`), a logged entry's
stored bytes beside its views (`entry`), and the one error hierarchy every room
raises (`errors`). Every room may import it; it imports no other room (but `ledger`
itself, for `__version__`): what this host signed is journaled by the write path
that signs (`write/journal.py`), not here. What stores, asks a server, reads a
repository or renders belongs elsewhere. Importing this package imports none of its
modules (`ledger verify FILE` loads only the ones it needs: not `models`)."""
