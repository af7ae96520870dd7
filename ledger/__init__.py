"""Ledger: signed, append-only qualification receipts for GPU training code.

The core (models, signing, store, log, queries, CLI) imports without torch;
only the `runners` package loads it, and `ledger` reaches that only from the
modules docs/architecture.md lists under "Who loads `runners`" (`ledger qualify`,
`ledger checks` and `ledger profile` among the commands).

`__all__` names, beside the version, the rooms that are the public API: their
names keep their meaning across releases and a change to them is in the
CHANGELOG. Every other room (`_internal/`, the store, the server, the
orchestration, ...) is the command line's machinery, importable but promised to
no caller (docs/architecture.md, "Faces"). Naming them imports none of them.
"""

__version__ = "0.2.0"

__all__ = ["__version__", "evidence", "identity", "qualification", "read", "verify", "write"]
