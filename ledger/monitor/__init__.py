"""Watching the keys that sign into a log: the monitor that compares the log with
each host's journal of what it signed (kept by the write path's signer,
`ledger.write.journal`) and with each key's habits, revocation and holder
(`ledger monitor`)."""
