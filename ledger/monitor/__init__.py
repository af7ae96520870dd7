"""Watching the keys that sign into a log: each host's journal of what it
signed, and the monitor that compares the log with it and with each key's
habits, revocation and holder (`ledger monitor`)."""
