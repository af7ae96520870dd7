"""Talking to a ledger served elsewhere (`ledger serve`), from a writer's or a reader's
host: the HTTP client every `--server URL` goes through (`client`: httpx, imported
on the first request, with timeouts and bounded retries), and the outbox that keeps
signed batches on this host until the server acknowledged them (`outbox`, `ledger
push`). The write path (the recorder, the plan's recorder, a Ray worker's
outbox), the commands and the monitor may import it; it imports only the
evidence format, never the store, the server's own code (`service/`, which needs
the `server` extra) or a renderer."""
