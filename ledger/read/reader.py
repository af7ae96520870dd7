"""Where questions are answered: one `Reader`, the local store or a remote `ledger
serve`, so the commands that read never branch on which (as writers never do, through
`ledger.write.record.Recorder`).

Each question gets the same document either way: `status --json`, `history --json`,
`show --json`, a bundle's bytes, `verify ID --json`, `log proof --json`, a consistency
proof, `keys list --json` (less what only this host knows), `fleet --json`, an
artifact's bytes and media type, `audit --json`. Where a server's word is not enough
(a verification with --trust, the log the monitor and the witness read), what it sends
is checked here against the anchors the caller gives.

Opening a reader (`open_reader`) costs nothing: the store is opened, or the server
asked, at the first question, so a command still refuses its own options first. The
local side is also the server's: `ledger serve` answers from a `LocalReader` over its
one store that never signs (a read must not write a checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ledger.evidence.errors import UsageError, VerificationError

if TYPE_CHECKING:  # a reader loads SQLAlchemy, httpx or the log only where it asks
    from pathlib import Path

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ledger.evidence.keys import KeyDir, KeyInfo
    from ledger.monitor.watch import LogView
    from ledger.plans.governing import Identity
    from ledger.read.evidence import Evidence
    from ledger.read.question import Question
    from ledger.store.store import Store
    from ledger.transparency.policy import Policy
    from ledger.transparency.witness import DbSource, ServerSource
    from ledger.write.hosts import Registry

__all__ = [
    "SERVERS_WORD",
    "LocalReader",
    "Reader",
    "RemoteReader",
    "key_rows",
    "open_reader",
]

SERVERS_WORD = "the server's word only, nothing verified here"

Scope = Mapping[str, str | int]


class Reader(Protocol):
    verified: str
    """How its proofs were checked, for messages: "verified" here, else by the server."""
    remote: bool
    """Whether a server answers (its word on what its store holds), for messages."""

    def evidence(self, question: Question) -> Evidence:
        """The receipts and reviews the ledger holds on the question's subject (only of
        its claims, where it names some), each signer as the key table stands: read in
        one go, here or in one request of a server."""

    def status(
        self, ident: Identity, claims: Sequence[str] = (), scope: Scope | None = None
    ) -> dict[str, Any]:
        """`status --json` for a revision identified in a checkout (or from the log)."""

    def history(self, ident: Identity) -> dict[str, Any]:
        """`history --json`: every statement and review about the revision."""

    def show(self, ref: str) -> dict[str, Any]:
        """`show --json`: one receipt or review by full id or a unique prefix."""

    def bundle(self, ref: str, artifacts: bool = False) -> bytes:
        """The export bundle `verify FILE --trust PEM` checks offline."""

    def verification(
        self, ref: str, trust: Sequence[Ed25519PublicKey] = (), policy: bytes | None = None
    ) -> dict[str, Any]:
        """`verify ID --json`. The ledger here verifies with its own key table; a
        server's bundle is verified here against `trust` (with the policy's log keys),
        and without `trust` its answer is its word and says so. `policy`: the
        checkpoint must carry that tlog-policy's quorum (`witnesses`)."""

    def proof(self, ref: str) -> dict[str, Any]:
        """`log proof --json`: an entry's inclusion proof against the newest checkpoint."""

    def consistency(self, old: int | None, new: int | None) -> dict[str, Any]:
        """A consistency proof between checkpoints of sizes OLD and NEW."""

    def consistency_from(self, note: bytes) -> dict[str, Any]:
        """A consistency proof from a checkpoint note someone holds to the newest."""

    def registered_keys(self) -> list[dict[str, Any]]:
        """The registered keys, as `keys list --json` shows them (without this host's)."""

    def fleet(self, quarantine_above: float | None = None) -> dict[str, Any]:
        """`fleet --json`, with the devices above the rate named where one is given."""

    def artifact(self, digest: str) -> tuple[bytes, str]:
        """An artifact's bytes, checked against its digest, and its media type."""

    def audit(self) -> dict[str, Any]:
        """`audit --json`: every entry hash, signature, sequence number and root."""

    def log_view(self, trust: Sequence[Ed25519PublicKey], policy: Policy | None) -> LogView:
        """The log as the monitor reads it: a server's up to its checkpoint, signed by
        `trust` or meeting `policy`, whose entries must hash to its root."""

    def witness_source(self, trust: list[Ed25519PublicKey]) -> DbSource | ServerSource:
        """Checkpoints and consistency proofs as a witness reads them."""

    def close(self) -> None:
        """Let go of what the reader opened (a database's connections)."""


def key_rows(keys: Iterable[KeyInfo], hosts: Registry | None = None) -> list[dict[str, Any]]:
    """The registered keys as `keys list --json` and `GET /v1/keys` show them; a runner
    key with the hosts it speaks for (`hosts`, `hosts_source`) where ``hosts`` is given."""
    out = []
    for k in keys:
        row: dict[str, Any] = {
            "keyid": k.keyid,
            "name": k.name,
            "role": k.role,
            "revoked": k.revoked_seq is not None,
            "revoked_reason": k.revoked_reason,
            "registered_by": k.registered_by,
        }
        bound = hosts.of(k.keyid) if hosts is not None else None
        if bound is not None:
            row.update(bound.to_json())
        out.append(row)
    return out


class LocalReader:
    """A ledger database: `db` (`--db`, `$LEDGER_DB`, default), opened at the first
    question, or a `store` already open (the server's).

    `signs`: a proof or bundle signs a fresh checkpoint first with this host's ledger
    key, where $LEDGER_KEYS holds it (the CLI on the ledger's host); the server's
    reads never sign. `artifacts`: where an artifact's bytes and media type are read
    (default: the artifact store beside the database, each checked against its
    digest; the server's: the store it was given). `mirrors`: the checkouts a server
    was given (`ledger serve --repo PATH`), where a receipt's governing plan is proved
    as the server's status proves it (`show` weighs a revocation by it)."""

    verified = "verified"
    remote = False

    def __init__(
        self,
        db: str | None = None,
        *,
        store: Store | None = None,
        signs: bool = True,
        artifacts: Callable[[str], tuple[bytes, str]] | None = None,
        mirrors: Sequence[Path] = (),
    ) -> None:
        self._db = db
        self._mirrors = tuple(mirrors)
        self._store = store
        self._opened = False
        self.signs = signs
        self._artifacts = artifacts

    @property
    def store(self) -> Store:
        if self._store is None:
            from ledger.store.store import Store, resolve_url

            self._store = Store.open(resolve_url(self._db))
            self._opened = True
        return self._store

    def close(self) -> None:
        if self._opened and self._store is not None:
            self._store.dispose()
            self._store, self._opened = None, False

    def _signing_keys(self) -> KeyDir | None:
        if not self.signs:
            return None
        from ledger.evidence.keys import KeyDir

        return KeyDir.default()

    def status(
        self, ident: Identity, claims: Sequence[str] = (), scope: Scope | None = None
    ) -> dict[str, Any]:
        from ledger.read.query import query_status

        return query_status(self.store, ident, claims=claims, scope=scope or {}).to_json()

    def evidence(self, question: Question) -> Evidence:
        from ledger.read.evidence import read_evidence

        return read_evidence(self.store, question.subject, question.claims or None)

    def history(self, ident: Identity) -> dict[str, Any]:
        from ledger.read.query import history_answer

        return history_answer(self.store, ident)

    def subject(
        self, repo: str, pr: int | None, rev: str | None, mirrors: Sequence[Any] = ()
    ) -> Identity:
        """The revision a question without a checkout is about, as the log (or a
        mirror checkout) knows it (`ledger.read.subject.identity_from_log`)."""
        from ledger.read.subject import identity_from_log

        return identity_from_log(self.store, repo, pr, rev, mirrors)

    def show(self, ref: str) -> dict[str, Any]:
        from ledger.read.query import show_document
        from ledger.read.revoked import revocation_document

        doc = show_document(self.store, ref)
        # Its revocation, weighed (`read/revoked.py`) by the judge's rule and, where the
        # plan has a say, by the governing plan: void from then on, or why not; only
        # where revoked, so an earlier release's reader of `show --json` sees no change.
        revoked = revocation_document(self.store, self.store.resolve(ref), self._mirrors)
        if revoked is not None:
            doc["revocation"] = revoked
        return doc

    def void(self, ids: Sequence[str]) -> dict[str, str]:
        """Of the receipts `ids`, those their revocation voids, with why, weighed as
        `show` weighs it (`read/revoked.py`): what a trend leaves out of its series.
        The local side's only: a trend is read from a ledger here (`ledger trend`, the
        server's pages), never asked of a server, so `RemoteReader` has none."""
        from ledger.read.revoked import void_receipts

        return void_receipts(self.store, ids, self._mirrors)

    def bundle(self, ref: str, artifacts: bool = False) -> bytes:
        from ledger.transparency.export import export

        store = self.store
        data = export(store, ref, self._signing_keys())
        if not artifacts:
            return data
        from ledger.write.artifacts import bundle_with_artifacts

        e = store.resolve(ref)
        arts = e.receipt.predicate.artifacts if e.kind == "receipt" else []
        files = []
        for a in arts:
            content, media = self.artifact(a.digest["sha256"])
            files.append((a.digest["sha256"], media, content))
        return bundle_with_artifacts(data, files)

    def verification(
        self, ref: str, trust: Sequence[Ed25519PublicKey] = (), policy: bytes | None = None
    ) -> dict[str, Any]:
        # The ledger's own key table is the anchor here: `trust` is for a server's bundle.
        from ledger.transparency.logged import verify_in_ledger

        store = self.store
        report = verify_in_ledger(store, ref)
        if policy is None:
            return report.to_json()
        from ledger.transparency.enforce import quorum_in_ledger, witnessed_in_ledger
        from ledger.verify.facts import Requirements

        witnessed = witnessed_in_ledger(store, report.id, policy)
        names, when = quorum_in_ledger(store, report.id, policy)
        doc = report.with_facts(
            witnesses=names, witnessed_at=when, required=Requirements(witnesses=True)
        ).to_json()
        doc["witnesses"] = witnessed
        return doc

    def proof(self, ref: str) -> dict[str, Any]:
        from ledger.transparency.proofs import inclusion

        store = self.store
        e = store.resolve(ref)
        return inclusion(store, e.seq, self._signing_keys()).to_json(e.entry_id)

    def consistency(self, old: int | None, new: int | None) -> dict[str, Any]:
        from ledger.transparency.proofs import consistency

        if old is None or new is None:
            raise UsageError("give OLD and NEW sizes, or --from CHECKPOINT_FILE")
        return {
            "old": old,
            "new": new,
            "proof": [h.hex() for h in consistency(self.store, old, new)],
        }

    def consistency_from(self, note: bytes) -> dict[str, Any]:
        from ledger.transparency.witness import consistency_from

        return consistency_from(self.store, note, self._signing_keys())

    def registered_keys(self) -> list[dict[str, Any]]:
        from ledger.write.hosts import registry

        keys = self.store.keys()
        return key_rows(keys.values(), registry(self.store, keys))

    def fleet(self, quarantine_above: float | None = None) -> dict[str, Any]:
        from ledger.fleet.report import fleet_report, quarantined, store_predicates

        doc = fleet_report(store_predicates(self.store))
        if quarantine_above is not None:
            doc["quarantined"] = quarantined(doc, quarantine_above)
            doc["quarantine_above"] = quarantine_above
        return doc

    def artifact(self, digest: str) -> tuple[bytes, str]:
        if self._artifacts is not None:
            return self._artifacts(digest)
        from ledger.write.service_local import artifact_of

        return artifact_of(self.store, digest)

    def audit(self) -> dict[str, Any]:
        from ledger.transparency.audit import audit

        return audit(self.store).to_json()

    def log_view(self, trust: Sequence[Ed25519PublicKey], policy: Policy | None) -> LogView:
        from ledger.monitor.watch import store_view

        if trust or policy is not None:
            raise UsageError("--trust and --policy go with --server")
        return store_view(self.store)

    def witness_source(self, trust: list[Ed25519PublicKey]) -> DbSource | ServerSource:
        from ledger.transparency.witness import DbSource

        return DbSource(self.store, trust)


class RemoteReader:
    """A `ledger serve` at `url` (through `ledger.remote.client`); `token` for the
    questions that need one (the fleet: the read role; the audit: the operator's)."""

    verified = "verified by the server"
    remote = True

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.token = token

    def evidence(self, question: Question) -> Evidence:
        from ledger.read.evidence import Evidence
        from ledger.remote.client import fetch_evidence

        doc = fetch_evidence(self.url, question.to_json())
        if doc is None:  # a server of an earlier release: read per receipt, as it was
            from ledger.read.per_receipt import per_receipt_evidence

            return per_receipt_evidence(self.url, question)
        return Evidence.from_json(doc)

    def status(
        self, ident: Identity, claims: Sequence[str] = (), scope: Scope | None = None
    ) -> dict[str, Any]:
        # The question is identified here, in this checkout, as a local status would
        # be; the server answers it from its ledger.
        from ledger.read.question import Question
        from ledger.remote.client import fetch_status

        return fetch_status(self.url, Question.of(ident, claims, scope).to_json())

    def history(self, ident: Identity) -> dict[str, Any]:
        from ledger.read.question import Question
        from ledger.remote.client import fetch_history

        return fetch_history(self.url, Question.of(ident).to_json())

    def show(self, ref: str) -> dict[str, Any]:
        from ledger.remote.client import fetch_entry

        return fetch_entry(self.url, ref)

    def bundle(self, ref: str, artifacts: bool = False) -> bytes:
        from ledger.remote.client import fetch_bundle

        return fetch_bundle(self.url, ref, artifacts=artifacts)

    def verification(
        self, ref: str, trust: Sequence[Ed25519PublicKey] = (), policy: bytes | None = None
    ) -> dict[str, Any]:
        if trust:
            # The server only carries bytes: the bundle is verified here, against
            # --trust alone, and must be the receipt asked for.
            from ledger.verify import verify_bundle

            anchors = [*trust, *_policy_logs(policy)]
            raw = self.bundle(ref)
            report = verify_bundle(raw, anchors)
            _check_is_asked(report.id, ref)
            if policy is None:
                return report.to_json()
            from ledger.evidence.limits import load_json
            from ledger.transparency.enforce import quorum_of, witnessed_bundle
            from ledger.verify.facts import Requirements

            witnessed = witnessed_bundle(raw, policy)
            note = str(load_json(raw, "bundle")["checkpoint"]).encode()
            names, when = quorum_of(note, policy)
            doc = report.with_facts(
                witnesses=names, witnessed_at=when, required=Requirements(witnesses=True)
            ).to_json()
            doc["witnesses"] = witnessed
            return doc
        if policy is not None:
            raise UsageError("--policy with --server needs --trust (the bundle is verified here)")
        from ledger.remote.client import fetch_verification

        doc = fetch_verification(self.url, ref)
        doc["anchor"] = f"{SERVERS_WORD} ({self.url}); give --trust PEM to verify here"
        doc["trust"] = "server"
        return doc

    def proof(self, ref: str) -> dict[str, Any]:
        from ledger.remote.client import fetch_proof

        return fetch_proof(self.url, ref)

    def consistency(self, old: int | None, new: int | None) -> dict[str, Any]:
        from ledger.remote.client import fetch_consistency

        if old is None or new is None:
            raise UsageError("with --server: give OLD and NEW sizes")
        return fetch_consistency(self.url, old, new)

    def consistency_from(self, note: bytes) -> dict[str, Any]:
        raise UsageError("with --server: give OLD and NEW sizes")

    def registered_keys(self) -> list[dict[str, Any]]:
        from ledger.remote.client import fetch_keys

        return fetch_keys(self.url)

    def fleet(self, quarantine_above: float | None = None) -> dict[str, Any]:
        # The server's ledger, reported by the same code: the same document as
        # `ledger fleet` on that ledger.
        from ledger.remote.client import fetch_fleet

        return fetch_fleet(self.url, quarantine_above, self.token)

    def artifact(self, digest: str) -> tuple[bytes, str]:
        from ledger.remote.client import fetch_artifact

        return fetch_artifact(self.url, digest)

    def audit(self) -> dict[str, Any]:
        from ledger.remote.client import audit

        return audit(self.url, self.token)

    def log_view(self, trust: Sequence[Ed25519PublicKey], policy: Policy | None) -> LogView:
        from ledger.monitor.remote import remote_view

        return remote_view(self.url, list(trust), policy)

    def witness_source(self, trust: list[Ed25519PublicKey]) -> DbSource | ServerSource:
        from ledger.transparency.witness import ServerSource

        return ServerSource(self.url, trust)

    def close(self) -> None:
        pass  # one pooled HTTP client per process (ledger.remote.client)


def _policy_logs(policy: bytes | None) -> list[Ed25519PublicKey]:
    """A policy's log keys: trust anchors as a --trust PEM of the ledger key is."""
    if policy is None:
        return []
    from ledger.transparency.policy import parse_policy

    return [log.vkey.public for log in parse_policy(policy).logs]


def _check_is_asked(got: str, asked: str) -> None:
    """A server answering with another receipt's bundle is refused."""
    want = asked.strip().lower().removeprefix("sha256:")
    if not got.removeprefix("sha256:").startswith(want):
        raise VerificationError(f"the server sent the bundle of {got[:19]}, not of {asked}")


def open_reader(
    db: str | None, server: str | None, token: str | None = None, *, one: bool = False
) -> Reader:
    """A server when `server` is given, else the local ledger (`--db`, `$LEDGER_DB`,
    default). `one`: refuse both at once (where a command always has)."""
    if one and server is not None and db is not None:
        raise UsageError("give --db or --server, not both")
    if server:
        return RemoteReader(server, token)
    return LocalReader(db)
