"""The JSON routes: everything the CLI reads and writes, as the CLI's documents.

Every handler runs its store work in a worker thread (SQLAlchemy is
synchronous), on the server's one `Store`: its key table is read again
whenever the log grew, so a long-running server sees keys registered or
revoked by other writers since it started. Errors are `{"error": "<one line>"}`; the
mapping from the ledger's errors to statuses is theirs (`http_status`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ledger.evidence.errors import (
    Error,
    ForbiddenError,
    InputError,
    NotFoundError,
    RefusedError,
    UsageError,
    VerificationError,
)
from ledger.evidence.limits import check_media_type
from ledger.service.limits import BodyTooLarge, read_body
from ledger.service.responses import (
    Handler,
    error_response,
    fresh,
    guarded,
    json_response,
    kept_response,
)
from ledger.service.responses import json_body as _json_body
from ledger.service.responses import ledger_of as _ledger
from ledger.service.responses import object_body as _doc
from ledger.service.responses import public_reason as public_reason
from ledger.service.responses import string_field as _str

if TYPE_CHECKING:
    from ledger.service.questions import How, Which

__all__ = ["ROUTES", "error_response", "json_response"]


async def health(request: Request) -> Response:
    led = _ledger(request)
    # The size probe's one indexed statement (ledger.store.probe), on the event loop:
    # cheaper than the hop to a worker thread it would otherwise take.
    return json_response({"ok": True, "entries": led.store().size()})


async def post_envelopes(request: Request, *, reviews_only: bool = False) -> Response:
    led = _ledger(request)
    doc = _json_body(await read_body(request, led.max_body))
    items = [doc] if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise RefusedError("expected a DSSE envelope or a non-empty array of them")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RefusedError(f"input {i + 1}: not a JSON object")
    # Re-serializing is safe: the signature covers only the payload bytes,
    # which travel base64-encoded inside the envelope and are not touched.
    raws = [json.dumps(item).encode() for item in items]
    recs = await run_in_threadpool(led.record, raws, reviews_only)
    out = [r.to_json() for r in recs]
    return json_response(out, 200 if all(r.duplicate for r in recs) else 201)


async def post_reviews(request: Request) -> Response:
    return await post_envelopes(request, reviews_only=True)


def _ref(request: Request) -> str:
    return str(request.path_params["ref"])


async def entry(request: Request) -> Response:
    led = _ledger(request)
    return json_response(await run_in_threadpool(led.reader().show, _ref(request)))


async def bundle(request: Request) -> Response:
    led = _ledger(request)
    with_artifacts = request.query_params.get("artifacts") in ("1", "true")
    data = await run_in_threadpool(led.reader().bundle, _ref(request), with_artifacts)
    return Response(data, media_type="application/json")


async def verification(request: Request) -> Response:
    led = _ledger(request)
    return json_response(await run_in_threadpool(led.reader().verification, _ref(request)))


def status_or_history(which: Which, how: How) -> Handler:
    """The one handler of `/v1/status`, `/v1/history` and `/v1/evidence`: `which` answer,
    and `how` the question arrives (a posted question document, or query parameters)."""

    async def handle(request: Request) -> Response:
        from ledger.service.questions import answer, kept, with_notes

        led = _ledger(request)
        asked = await _doc(request) if how == "question" else dict(request.query_params)
        # A posted question names its subject; only query parameters are identified
        # in a mirror checkout.
        mirrors = led.mirrors if how == "query" else ()
        store = led.store()
        doc = kept(which, how, store, asked, mirrors, led.answers)
        if doc is None:

            def work() -> dict[str, Any]:
                # A checkout is fetched first (bounded), so a force-pushed head is judged.
                notes = fresh(led) if mirrors else []
                got = answer(which, how, store, asked, mirrors, led.answers)
                return with_notes(got, notes)

            # Named for what it answers, as the worker thread shows in a trace.
            work.__name__ = work.__qualname__ = f"{which}_from_{how}"
            doc = await run_in_threadpool(work)
        q = request.query_params
        if which == "status" and q.get("since") is not None:
            # The client that checks the answer: the newest checkpoint and the entries
            # since the last one it saw, in the same round trip (`read/checked.py`).
            since = 0 if q.get("since") == "0" else _size(q, "since") or 0
            page = await run_in_threadpool(entries_page, store, since, None, True)
            return json_response({**doc, "log": page})
        return kept_response(led, doc)

    handle.__name__ = f"{which}_{how}"
    return handle


async def get_checkpoint(request: Request) -> Response:
    led = _ledger(request)
    store = led.store()
    row = await run_in_threadpool(store.latest_checkpoint)
    if row is None:
        raise NotFoundError("no checkpoint has been signed yet")
    # With the witnesses' cosignatures kept for it (lines a reader without a policy ignores).
    lines = await run_in_threadpool(store.cosignatures, row.size)
    return Response((row.note + "".join(lines)).encode(), media_type="text/plain; charset=utf-8")


async def sign_checkpoint(request: Request) -> Response:
    from ledger.transparency.checkpoints import checkpoint

    led = _ledger(request)
    led.holder(request, "operator")
    if led.keys is None:
        raise NotFoundError("this server does not hold the ledger key")
    note = await run_in_threadpool(checkpoint, led.store(), led.keys)
    witnesses = os.environ.get("LEDGER_WITNESSES")
    if witnesses:
        # Cosigned by the witnesses $LEDGER_WITNESSES names (a tlog-policy file); one
        # that is down or refuses leaves its own cosignature out, nothing else.
        note = await run_in_threadpool(_cosigned, led.store(), Path(witnesses))
    return Response(note, media_type="text/plain; charset=utf-8")


def _cosigned(store: Any, policy_file: Path) -> bytes:
    from ledger.transparency.collect import cosign, cosigned_note
    from ledger.transparency.policy import parse_policy

    try:
        policy = parse_policy(policy_file.read_bytes())
    except OSError as e:
        raise UsageError(f"$LEDGER_WITNESSES {policy_file}: {e.strerror}") from None
    results = cosign(store, policy)
    refused = [f"{r.witness}: {r.detail}" for r in results if not r.cosigned]
    if refused:
        sys.stderr.write(f"ledger serve: not cosigned by {'; '.join(refused)}\n")
    latest = store.latest_checkpoint()
    assert latest is not None  # just signed
    return cosigned_note(store, latest.size)


async def proof(request: Request) -> Response:
    led = _ledger(request)
    # The server's reader never signs: a read writes no checkpoint.
    return json_response(await run_in_threadpool(led.reader().proof, _ref(request)))


def _size(q: Any, name: str) -> int | None:
    from ledger.evidence.limits import MAX_INT

    text = q.get(name)
    if text is None:
        return None
    if not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= MAX_INT:
        raise InputError(f"{name}={text[:30]!r}: expected a size 1..2^63-1")
    return int(text)


MAX_ENTRIES_PAGE = 1000


async def log_entries(request: Request) -> Response:
    """`?from=N[&to=M]`: the log's entries N..M-1 (at most 1000), each with its
    logging time where its leaf commits to it, so a reader recomputes the
    leaves and checks them against a signed checkpoint (`ledger monitor`).

    `&checkpoint=1`: the newest signed checkpoint beside them (its note with the
    witnesses' cosignatures, as `GET /v1/checkpoint` serves it) and the entries only up
    to its size: the client that checks the server syncs in one round trip."""
    led = _ledger(request)
    q = request.query_params
    first = (_size(q, "from") if q.get("from") != "0" else 0) or 0
    to = _size(q, "to")
    with_checkpoint = q.get("checkpoint") in ("1", "true")
    return json_response(
        await run_in_threadpool(entries_page, led.store(), first, to, with_checkpoint)
    )


def entries_page(store: Any, first: int, to: int | None, with_checkpoint: bool) -> dict[str, Any]:
    """The log's entries `first`.. (before `to`, a page at most), each with the logging
    time its leaf commits to; with the newest signed checkpoint (and its cosignatures)
    beside them where asked, the entries then only up to its size."""
    from ledger._internal.merkle import entry_leaf

    size = store.size()
    note = None
    if with_checkpoint and (row := store.latest_checkpoint()) is not None:
        note = row.note + "".join(store.cosignatures(row.size))
        to_checkpoint = row.size
    else:
        to_checkpoint = size
    end = min(to or size, size, to_checkpoint, first + MAX_ENTRIES_PAGE)
    out = []
    for e in store.entries_at(list(range(first, end))):
        doc: dict[str, object] = {
            "seq": e.seq,
            "kind": e.kind,
            "id": e.entry_id,
            "body": e.body.decode(),
        }
        if e.logged_at is not None and e.stored_leaf_hash == (
            entry_leaf(e.seq, e.logged_at, e.body).hex()
        ):
            doc["logged_at"] = e.logged_at
        out.append(doc)
    return {"size": size, "entries": out, **({"checkpoint": note} if note else {})}


async def consistency(request: Request) -> Response:
    """`?from=OLD[&to=NEW]` (NEW: the newest checkpoint); `old`/`new` are accepted too."""
    from ledger.transparency.witness import prove

    led = _ledger(request)
    q = request.query_params
    old = _size(q, "from") or _size(q, "old")
    new = _size(q, "to") or _size(q, "new")
    if old is None:
        raise InputError("from=SIZE is required")

    def work() -> dict[str, Any]:
        store = led.store()
        to = new
        if to is None:
            latest = store.latest_checkpoint()
            if latest is None:
                raise NotFoundError("no checkpoint has been signed yet")
            to = latest.size
        note, proof = prove(store, old, to)
        return {
            "old": old,
            "new": to,
            "proof": [h.hex() for h in proof],
            "checkpoint": note.decode(),
        }

    return json_response(await run_in_threadpool(work))


async def list_keys(request: Request) -> Response:
    from ledger.read.reader import key_rows
    from ledger.write.hosts import registry

    led = _ledger(request)

    def rows() -> list[dict[str, Any]]:
        keys = led.store().keys(fresh=True)
        return key_rows(keys.values(), registry(led.store(), keys))

    return json_response(await run_in_threadpool(rows))


async def add_key(request: Request) -> Response:
    from ledger.evidence.keys import load_public_pem
    from ledger.write.ingest import register_key

    led = _ledger(request)
    holder = led.holder(request, "keys")
    doc = await _doc(request)
    name, role = _str(doc, "name"), _str(doc, "role")
    if role not in ("runner", "reviewer"):
        # The ledger key is registered on the ledger's host, never by a token.
        raise RefusedError("role: expected runner or reviewer")
    pem = _str(doc, "public_key_pem").encode()
    public = load_public_pem(pem, "public_key_pem")
    hosts = _hosts(doc, role)
    kid, new = await run_in_threadpool(
        lambda: register_key(
            led.store(),
            name,
            role,  # type: ignore[arg-type]
            public,
            registered_by=holder,
            hosts=hosts,
        )
    )
    led.log(f"key {name} ({role}) {kid[:12]} registered by {holder}")
    await run_in_threadpool(led.vouch)
    return json_response(
        {"keyid": kid, "name": name, "role": role, "added": new}, 201 if new else 200
    )


def _hosts(doc: dict[str, Any], role: str) -> dict[str, tuple[str, ...]] | None:
    """A registration's ``hosts`` (host -> GPU UUIDs declared there): a runner key
    names the hosts it speaks for, so that its receipts speak of no other host's."""
    from ledger.evidence.hosts import read_hosts

    if doc.get("hosts") is None:
        return None  # refused for a runner key where its name is checked (`register_key`)
    if role != "runner":
        raise RefusedError(f"hosts: a {role} key speaks for no host")
    return read_hosts(doc["hosts"])


async def add_plan(request: Request) -> Response:
    """A governing plan entry with its git objects: proved, then logged as the holder's.
    Only a token with the `plans` role (the base branch's job) says which plan governs:
    a runner token runs a pull request's code, which must never choose its own gate."""
    from ledger.plans.ledger import record_sent

    led = _ledger(request)
    holder = led.holder(request, "plans")
    doc = await _doc(request)
    eid, new = await run_in_threadpool(lambda: record_sent(led.store(), doc, holder))
    if new:
        led.log(f"plan entry {eid[:19]} recorded by {holder}")
    return json_response({"id": eid, "added": new}, 201 if new else 200)


def _signed(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A revocation request's signed envelope and the document it asserts (checked by
    the write path before anything is logged: `write/revocation_signing.py`)."""
    from ledger.write.revocation_signing import asserted

    env = doc.get("envelope")
    if not isinstance(env, dict):
        raise InputError(
            "envelope: a revocation is signed by its authority (`ledger revoke --key NAME`"
            " or `ledger keys revoke --key NAME` signs it)"
        )
    try:
        return env, asserted(env)
    except RefusedError as e:
        raise InputError(f"envelope: {e.reason()}") from None


async def revoke(request: Request) -> Response:
    from ledger.write.ingest import revoke_key

    led = _ledger(request)
    holder = led.holder(request, "keys")
    env, said = _signed(await _doc(request))
    reason = _str(said, "reason")
    info = await run_in_threadpool(
        lambda: revoke_key(led.store(), _ref(request), reason, revoked_by=holder, envelope=env)
    )
    led.log(f"key {info.name} {info.keyid[:12]} revoked by {holder}")
    await run_in_threadpool(led.vouch)
    return json_response({"keyid": info.keyid, "name": info.name, "revoked": True})


async def revoke_receipt(request: Request) -> Response:
    """Revoke one receipt: an operator token on the operator's word (as on the ledger's
    host), a reviewer token only on its own dispute of it, named by `review` (logged as
    a reviewer's: it counts for a pass only where the plan says so). Refused: nothing
    written, one line."""
    from ledger.write.revoke import revoke_receipt as revoke

    led = _ledger(request)
    grant = led.tokens.grant(request.headers.get("authorization"))
    if "operator" in grant.roles:
        by = "operator"
    elif "reviewer" in grant.roles:
        by = "reviewer"
    else:
        have = ", ".join(sorted(grant.roles))
        raise ForbiddenError(
            f"token of {grant.holder} ({have}) lacks the 'operator' or 'reviewer' role"
        )
    env, said = _signed(await _doc(request))
    reason, review = _str(said, "reason"), said.get("review")
    if review is not None and not isinstance(review, str):
        raise InputError("review: must be a string (a review's id)")
    if said.get("by", "operator") != by:
        raise ForbiddenError(
            f"the signed revocation is on the {said.get('by', 'operator')}'s word; the token"
            f" of {grant.holder} revokes on the {by}'s"
        )
    rev = await run_in_threadpool(
        lambda: revoke(led.store(), _ref(request), reason, review, by, grant.holder, envelope=env)
    )
    led.log(f"receipt {rev.receipt[:19]} revoked by {grant.holder} ({by})")
    await run_in_threadpool(led.vouch)
    return json_response(
        {
            "receipt": rev.receipt,
            "seq": rev.seq,
            "reason": rev.reason,
            "review": rev.review,
            "by": rev.by,
            "revoked_by": rev.revoked_by,
        }
    )


async def change_hosts(request: Request) -> Response:
    """Add or remove a host a runner key speaks for (the keys role): logged as a hosts
    entry naming the holder, with the reason."""
    from ledger.write.hosts import change_host

    led = _ledger(request)
    holder = led.holder(request, "keys")
    doc = await _doc(request)
    action, host, reason = _str(doc, "action"), _str(doc, "host"), _str(doc, "reason")
    if action not in ("add", "remove"):
        raise RefusedError("action: expected add or remove")
    gpus = doc.get("gpus") or []
    if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
        raise RefusedError("gpus: expected a list of GPU UUIDs")

    def work() -> Any:
        try:
            return change_host(
                led.store(),
                _ref(request),
                action,  # type: ignore[arg-type]
                host,
                gpus,
                reason,
                by=holder,
            )
        except UsageError as e:
            # Over HTTP these are the client's mistakes, not the operator's.
            raise RefusedError(e.reason()) from None

    info, after = await run_in_threadpool(work)
    led.log(f"key {info.name} {info.keyid[:12]}: host {action} by {holder}")
    await run_in_threadpool(led.vouch)
    return json_response({"keyid": info.keyid, "name": info.name, **after.to_json()})


def _digest_param(request: Request) -> str:
    from ledger.write.artifacts import _digest

    return _digest(str(request.path_params["digest"]))


async def put_artifact(request: Request) -> Response:
    from ledger.write.artifacts import MAX_ARTIFACT_BYTES

    led = _ledger(request)
    holder = led.holder(request, "runner")
    try:
        digest = _digest_param(request)
    except Error as e:
        raise InputError(e.reason()) from None
    # Streamed to the store as it arrives: memory holds one chunk, never the body.
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_ARTIFACT_BYTES:
        raise BodyTooLarge(
            f"artifact is {declared} bytes, over the {MAX_ARTIFACT_BYTES}-byte limit"
        )
    writer = await run_in_threadpool(led.artifacts.writer, digest)
    try:
        async for chunk in request.stream():
            if writer.size + len(chunk) > MAX_ARTIFACT_BYTES:
                raise BodyTooLarge(f"artifact is over the {MAX_ARTIFACT_BYTES}-byte limit")
            if chunk:
                await run_in_threadpool(writer.write, chunk)
        await run_in_threadpool(writer.commit)
    except VerificationError:
        raise RefusedError(
            f"artifact sha256:{digest[:12]}: content differs from its digest"
        ) from None
    except BaseException:
        await run_in_threadpool(writer.abort)
        raise
    size = writer.size
    led.log(f"artifact sha256:{digest[:12]} ({size} bytes) stored by {holder}")
    return json_response({"sha256": digest, "size": size}, 201)


async def get_artifact(request: Request) -> Response:
    led = _ledger(request)
    try:
        digest = _digest_param(request)
    except Error as e:
        raise InputError(e.reason()) from None
    media, data = await run_in_threadpool(led.artifact, digest)
    try:
        check_media_type(media, "media type")
    except Error:
        # Logged before media types were checked: served as bytes, still served.
        media = "application/octet-stream"
    return Response(
        data,
        media_type=media,
        headers={"Content-Disposition": f'attachment; filename="{digest[:12]}.bin"'},
    )


async def audit(request: Request) -> Response:
    from ledger.transparency.audit import audit as do_audit

    led = _ledger(request)
    led.holder(request, "operator")
    rep = await run_in_threadpool(do_audit, led.store())
    return json_response(rep.to_json())


async def fleet(request: Request) -> Response:
    """`ledger fleet` of the server's ledger. The read role: which devices of the
    team are sick, and where they run, is not for everyone the server answers."""
    led = _ledger(request)
    led.holder(request, "read")
    above = quarantine_rate(request.query_params.get("quarantine_above"))
    return json_response(await run_in_threadpool(led.reader().fleet, above))


def quarantine_rate(text: str | None) -> float | None:
    """A `quarantine_above` query parameter: a rate strictly between 0 and 1."""
    if text is None:
        return None
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not 0 < x < 1:
        raise RefusedError(f"quarantine_above={text!r}: want a rate between 0 and 1, e.g. 0.05")
    return x


async def openapi(request: Request) -> Response:
    from ledger.service.openapi import document

    return json_response(document())


def _routes() -> list[tuple[str, Handler, list[str]]]:
    g = guarded
    return [
        ("/healthz", g(health), ["GET"]),
        ("/openapi.json", g(openapi), ["GET"]),
        ("/v1/envelopes", g(post_envelopes), ["POST"]),
        ("/v1/reviews", g(post_reviews), ["POST"]),
        ("/v1/entries/{ref}", g(entry), ["GET"]),
        ("/v1/bundles/{ref}", g(bundle), ["GET"]),
        ("/v1/verify/{ref}", g(verification), ["GET"]),
        ("/v1/status", g(status_or_history("status", "query")), ["GET"]),
        ("/v1/status", g(status_or_history("status", "question")), ["POST"]),
        ("/v1/history", g(status_or_history("history", "query")), ["GET"]),
        ("/v1/history", g(status_or_history("history", "question")), ["POST"]),
        ("/v1/evidence", g(status_or_history("evidence", "question")), ["POST"]),
        ("/v1/checkpoint", g(get_checkpoint), ["GET"]),
        ("/v1/checkpoint", g(sign_checkpoint), ["POST"]),
        ("/v1/log/proof/{ref}", g(proof), ["GET"]),
        ("/v1/log/consistency", g(consistency), ["GET"]),
        ("/v1/log/entries", g(log_entries), ["GET"]),
        ("/v1/keys", g(list_keys), ["GET"]),
        ("/v1/keys", g(add_key), ["POST"]),
        ("/v1/plans", g(add_plan), ["POST"]),
        ("/v1/keys/{ref}/revoke", g(revoke), ["POST"]),
        ("/v1/keys/{ref}/hosts", g(change_hosts), ["POST"]),
        ("/v1/receipts/{ref}/revoke", g(revoke_receipt), ["POST"]),
        ("/v1/artifacts/{digest}", g(put_artifact), ["PUT"]),
        ("/v1/artifacts/{digest}", g(get_artifact), ["GET"]),
        ("/v1/audit", g(audit), ["GET"]),
        ("/v1/fleet", g(fleet), ["GET"]),
    ]


ROUTES = _routes()
