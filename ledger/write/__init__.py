"""The write path: how a receipt and the artifacts it names get into a ledger. Receipts
are made from another harness's result (`attest`), from any command run under the
sandbox (`run`), or to replace a logged one (`supersede`); a recorder hands signed
statements to the local store or to a server (`record`, through `ledger.remote`);
`ingest` verifies every input and appends it, the only way into the log; the
content-addressed artifact store keeps the bytes receipts name (`artifacts`), read
back for a local ledger by `service_local`. Arrows run one way: attest and
supersede -> record -> ingest -> store (`run` describes a command and its outputs;
`ledger run` records them the same way). It imports the evidence format, identity,
`verify/` (what ingest and attest check), the plan and the supersession rules it
writes by, the store, `ledger.remote` (the recorder's server) and, for `run`, the
sandbox and `outputs`; the log, the plan's recorder, orchestration (`ledger
qualify`, `execution/`), the server and the commands may import it. Nothing here
renders, answers a question or imports `runners` (torch). Importing this package
imports none of its modules."""
