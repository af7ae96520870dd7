"""The database the log lives in: open, create and migrate it (`store`, `migrate`,
Alembic's revisions under `ledger/migrations/`), the locked gapless append and
every lookup (`Store`, `Appender`), its tables and the triggers that keep them
append-only (`tables`, `triggers`), entries read back parsed once per process
(`cache`) and the log's size asked on a connection of its own (`probe`). It
imports the evidence format and `_internal/`'s Merkle leaf hash; never identity,
a writer, a question or a renderer. Importing this package imports none of its
modules (`ledger verify FILE` imports no database code)."""
