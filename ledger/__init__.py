"""Ledger: signed, append-only qualification receipts for GPU training code.

The core (models, signing, store, log, queries, CLI) imports without torch;
only `ledger qualify` and the `runners` package load it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
