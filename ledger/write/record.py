"""Where signed statements go: one `Recorder`, a local store or a remote
`ledger serve`, so attest, qualify and review never branch on which."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from ledger.evidence.errors import Error, InputError, UsageError
from ledger.evidence.statement import ArtifactFile, Statement, build_review
from ledger.write.journal import sign

if TYPE_CHECKING:  # the store loads SQLAlchemy; a remote recorder never needs it
    from ledger.evidence.keys import LocalKey
    from ledger.plans.governing import Identity
    from ledger.store.store import Store
    from ledger.write.ingest import Recorded

__all__ = [
    "EntryRef",
    "LocalRecorder",
    "Recorder",
    "RemoteRecorder",
    "open_recorder",
    "record_governing",
    "review",
    "sign_and_record",
]


@dataclass(frozen=True, slots=True)
class EntryRef:
    """A logged receipt or review, as much as writers need to know of it."""

    id: str
    kind: str
    signer: str


class Recorder(Protocol):
    where: str
    """The ledger written to, for messages."""
    stores_artifacts: bool
    """Whether artifact contents are kept (locally, or uploaded to the server from the outbox)."""

    def record(
        self, envelopes: Sequence[bytes], artifacts: Sequence[ArtifactFile] = ()
    ) -> list[Recorded]:
        """Verify and append, all or nothing."""
        ...

    def lookup(self, ref: str) -> EntryRef:
        """A receipt or review by full id or a unique prefix of 12+ hex digits."""
        ...


class LocalRecorder:
    stores_artifacts = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.where = store.url

    def record(
        self, envelopes: Sequence[bytes], artifacts: Sequence[ArtifactFile] = ()
    ) -> list[Recorded]:
        from ledger.write.ingest import record

        return record(self.store, envelopes, artifacts)

    def lookup(self, ref: str) -> EntryRef:
        e = self.store.resolve(ref)
        return EntryRef(e.entry_id, e.kind, e.signer)


class RemoteRecorder:
    """Records through a server, by way of the local outbox (ledger.remote.outbox).

    Each batch is kept in the outbox before it is sent; when sending fails
    the batch stays there (`kept` counts its envelopes), the run goes on,
    and `ledger push` delivers it later.
    """

    stores_artifacts = True

    def __init__(self, url: str, token: str | None = None) -> None:
        from ledger.remote.outbox import Outbox

        self.url = url
        self.where = url
        self.token = token
        self.outbox = Outbox()
        self.kept = 0
        self.failure: str | None = None

    def record(
        self, envelopes: Sequence[bytes], artifacts: Sequence[ArtifactFile] = ()
    ) -> list[Recorded]:
        from ledger.evidence.canonical import receipt_id
        from ledger.evidence.dsse import decode_payload, parse_envelope
        from ledger.evidence.errors import RefusedError
        from ledger.remote.outbox import send
        from ledger.write.ingest import Recorded

        files = [(a.artifact.digest["sha256"], a.artifact.mediaType, a.content) for a in artifacts]
        batch = self.outbox.put(envelopes, files)
        try:
            docs = send(self.url, batch, self.token)
        except RefusedError:
            # The server read it and said no: that is an answer, not a delivery failure.
            self.outbox.remove(batch)
            raise
        except Error as e:
            self.kept += len(envelopes)
            self.failure = e.reason()
            out = []
            for raw in envelopes:
                payload = decode_payload(parse_envelope(raw))
                kind = "review" if b"/predicates/review/" in payload else "receipt"
                out.append(Recorded(receipt_id(payload), kind, None, False))
            return out
        self.outbox.remove(batch)
        return [
            Recorded(str(d["id"]), str(d["kind"]), d.get("seq"), bool(d["duplicate"])) for d in docs
        ]

    def lookup(self, ref: str) -> EntryRef:
        from ledger.remote.client import fetch_entry

        doc = fetch_entry(self.url, ref)
        return EntryRef(str(doc["id"]), str(doc["kind"]), str(doc["signer"]["keyid"]))


def open_recorder(db: str | None, server: str | None, *, check_server: bool = True) -> Recorder:
    """A server when `server` is given, else the local ledger (`--db`, `$LEDGER_DB`, default).

    `check_server`: fail at once when the server is unreachable, before any
    work (a GPU run can take hours). Off where the work is already done (a
    result `attest` is given): then it is signed and kept in the outbox.
    """
    if server and db:
        raise UsageError("give --server or --db, not both")
    if server:
        if check_server:
            from ledger.remote.client import health

            health(server)
        return RemoteRecorder(server)
    from ledger.store.store import Store, resolve_url

    return LocalRecorder(Store.open(resolve_url(db)))


def record_governing(recorder: Recorder, ident: Identity) -> str | None:
    """Record the governing plan of a writer's question in a local ledger, beside the
    receipts it is about to record; the entry id, or None where there is nothing to
    record (no committed plan: --plan FILE, or none) or the ledger is a server's (the
    base branch's job records its plans there)."""
    if ident.governing is None:
        return None
    r = ident.revision
    if isinstance(recorder, RemoteRecorder):
        # A writer through a server holds a runner token and runs a pull request's code:
        # which plan governs is said by the base branch's job (a token with the plan
        # role) or the ledger's host, never by the writer (`POST /v1/plans` answers 403).
        return None
    if not isinstance(recorder, LocalRecorder):
        return None
    from ledger.plans.ledger import record_plan

    eid, _ = record_plan(
        recorder.store, r.repo, r.pr, r.commit, ident.governing, branch=ident.branch
    )
    return eid


def sign_and_record(
    recorder: Recorder,
    stmts: Sequence[Statement],
    key: LocalKey,
    artifacts: Sequence[ArtifactFile] = (),
) -> list[Recorded]:
    """Sign each statement and record them together, with the artifacts they name."""
    return recorder.record([sign(s, key) for s in stmts], artifacts)


def review(
    recorder: Recorder,
    ref: str,
    verdict: Literal["concur", "dispute"],
    note: str,
    key: LocalKey,
) -> Recorded:
    """Countersign (or dispute) a receipt with a reviewer key other than its signer."""
    target = recorder.lookup(ref)
    if target.kind != "receipt":
        raise InputError(f"{ref} is a {target.kind}, not a receipt")
    if target.signer == key.keyid:
        raise InputError("a reviewer cannot review a receipt it signed itself")
    [rec] = sign_and_record(recorder, [build_review(target.id, verdict, note)], key)
    return rec
