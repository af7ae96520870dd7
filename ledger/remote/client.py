"""Talk to a `ledger serve` over HTTP: every command's `--server URL`.

httpx, with a timeout on every request and a bounded number of retries (with
backoff) on connection failures and on 502/503/504, which a restarting server
or its reverse proxy answers. Retrying a write is safe: recording an envelope
twice is a duplicate, not a second entry, and artifacts are content-addressed.
httpx is imported on the first request, so `ledger` imports without it.

Writes of keys and artifacts (and `log checkpoint`, `audit`) carry a bearer
token: `--token`, else `$LEDGER_TOKEN`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import (
    NotFoundError,
    RefusedError,
    UnreachableError,
    UsageError,
    VerificationError,
)

if TYPE_CHECKING:
    from ledger.evidence.keys import LocalKey

__all__ = [
    "MAX_BODY_BYTES",
    "RETRIES",
    "RETRIES_VAR",
    "audit",
    "fetch_artifact",
    "fetch_bundle",
    "fetch_checkpoint",
    "fetch_consistency",
    "fetch_entry",
    "fetch_history",
    "fetch_keys",
    "fetch_proof",
    "fetch_status",
    "fetch_verification",
    "health",
    "post_envelopes",
    "register_key",
    "revoke_key",
    "sign_checkpoint",
    "upload_artifact",
]

# One envelope may be up to ledger.evidence.dsse.MAX_ENVELOPE_BYTES (1 MiB); a request
# carries a batch recorded all-or-nothing (one claim's receipts), so 16 MiB
# bounds what one request can make the server hold in memory while leaving a
# batch of sixteen maximal envelopes room. Spelled out here rather than
# imported so the client stays free of pydantic and cryptography.
MAX_BODY_BYTES = 16 * 1024 * 1024
RETRIES = 3
"""Attempts after the first, 0.5 s, 1 s, 2 s apart: a few seconds of a restart."""
RETRIES_VAR = "LEDGER_SERVER_RETRIES"
"""Attempts after the first where `RETRIES` is not what a caller wants: ``0`` for a
job that would rather fail at once (and retry as a whole) than wait out a restart."""
_RETRY_STATUS = (502, 503, 504)


def _retries() -> int:
    """`RETRIES`, or ``$LEDGER_SERVER_RETRIES`` (a whole number, 0 to 10)."""
    raw = os.environ.get(RETRIES_VAR, "").strip()
    if not raw:
        return RETRIES
    if not raw.isdigit() or int(raw) > 10:
        raise UsageError(f"{RETRIES_VAR} must be a whole number from 0 to 10, got {raw!r}")
    return int(raw)


def _base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--server {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    return url.rstrip("/")


def _reason(body: bytes, status: int) -> str:
    try:
        doc = json.loads(body)
        reason = doc["error"] if isinstance(doc, dict) else None
    except (ValueError, KeyError):
        reason = None
    if not isinstance(reason, str) or not reason:
        return f"HTTP {status}"
    return " ".join(reason.split())


def _token(token: str | None) -> str:
    t = token or os.environ.get("LEDGER_TOKEN")
    if not t:
        raise UsageError("this needs a token of the server: --token or $LEDGER_TOKEN")
    return t


_CLIENT: Any = None


def _client() -> Any:
    """One pooled client per process: keep-alive connections, and the TLS
    context (costly to build) made once, not per request. httpx.Client is
    safe to share between threads."""
    global _CLIENT
    if _CLIENT is None:
        import httpx

        _CLIENT = httpx.Client(limits=httpx.Limits(max_connections=32))
    return _CLIENT


def _request(
    url: str,
    path: str,
    *,
    body: bytes | None = None,
    method: str | None = None,
    content_type: str = "application/json",
    token: str | None = None,
    timeout: float = 30,
    retries: int | None = None,
    absent: tuple[int, ...] = (),
) -> tuple[int, bytes, str]:
    """(status, body, content type) of a 2xx answer, or of a status in `absent` (a
    route the server may not have); anything else raises."""
    retries = _retries() if retries is None else retries
    try:
        import httpx
    except ImportError:
        raise UsageError("--server needs httpx: pip install 'ledger-qualify[server]'") from None
    base = _base(url)
    headers = {"Content-Type": content_type} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    verb = method or ("GET" if body is None else "POST")
    attempt = 0
    while True:
        try:
            resp = _client().request(
                verb, base + path, content=body, headers=headers, timeout=timeout
            )
        except httpx.HTTPError as e:
            if attempt < retries and isinstance(e, httpx.TransportError):
                time.sleep(0.5 * 2**attempt)
                attempt += 1
                continue
            detail = " ".join(str(e).split()) or type(e).__name__
            if isinstance(e, httpx.TransportError):
                # The connection itself failed: infrastructure (exit 3), a retry may pass.
                raise UnreachableError(f"cannot reach ledger server at {base}: {detail}") from None
            raise UsageError(f"cannot reach ledger server at {base}: {detail}") from None
        if resp.status_code in _RETRY_STATUS and attempt < retries:
            time.sleep(0.5 * 2**attempt)
            attempt += 1
            continue
        break
    status, data = resp.status_code, resp.content
    if 200 <= status < 300 or status in absent:
        return status, data, resp.headers.get("content-type", "")
    # The server answered: its one-line reason is what the person needs.
    reason = _reason(data, status)
    if status in (400, 411, 413, 422):
        raise RefusedError(reason)
    if status == 404:
        raise NotFoundError(reason)
    if status in _RETRY_STATUS:
        # Still restarting or overloaded once the retries are spent: infrastructure (exit
        # 3, which a CI retries), not a fault of what was asked (exit 2).
        raise UnreachableError(
            f"ledger server at {base} answered {status} after {attempt + 1} attempt(s): {reason}"
        )
    raise UsageError(f"ledger server at {base} answered {status}: {reason}")


def _json(url: str, data: bytes, shape: type = dict) -> Any:
    try:
        doc = json.loads(data)
    except ValueError:
        raise UsageError(f"ledger server at {_base(url)} sent a reply that is not JSON") from None
    if not isinstance(doc, shape):
        raise UsageError(f"ledger server at {_base(url)} sent an unexpected reply")
    return doc


def _quoted(ref: str) -> str:
    return urllib.parse.quote(ref.strip(), safe=":")


def _get(url: str, path: str, timeout: float = 30, shape: type = dict) -> Any:
    return _json(url, _request(url, path, timeout=timeout)[1], shape)


def _post(url: str, path: str, doc: Any, token: str | None = None, timeout: float = 30) -> Any:
    body = json.dumps(doc).encode()
    return _json(url, _request(url, path, body=body, token=token, timeout=timeout)[1], object)


def post_envelopes(url: str, raws: Sequence[bytes], timeout: float = 30) -> list[dict[str, Any]]:
    """Record signed envelopes through the server, all or nothing.

    Returns one `{"id", "kind", "seq", "duplicate"}` per envelope, in order;
    `seq` is None for a duplicate. A refused batch raises RefusedError with
    the server's reason, and nothing of it was written.
    """
    if not raws:
        return []
    docs = []
    for i, raw in enumerate(raws):
        try:
            docs.append(json.loads(raw))
        except ValueError as e:
            where = f"input {i + 1}: " if len(raws) > 1 else ""
            raise RefusedError(f"{where}malformed JSON: {e}") from None
    body = json.dumps(docs).encode()
    if len(body) > MAX_BODY_BYTES:
        # Checked here too: a server may reset an oversized upload before the
        # client has finished sending it, which would read as a network failure.
        raise RefusedError(
            f"{len(raws)} envelopes are {len(body)} bytes, over the {MAX_BODY_BYTES}-byte"
            " request limit; record them in smaller batches"
        )
    _, data, _ = _request(url, "/v1/envelopes", body=body, timeout=timeout)
    out = _json(url, data, list)
    if len(out) != len(raws):
        raise UsageError(f"ledger server at {_base(url)} sent an unexpected reply")
    return [dict(d) for d in out]


def post_plan(url: str, doc: Any, token: str | None = None, timeout: float = 30) -> dict[str, Any]:
    """Record a governing plan entry (`ledger.plans`) through the server (a token with the
    plans role: the base branch's job; a runner token is refused)."""
    return dict(_post(url, "/v1/plans", doc, _token(token), timeout))


def fetch_entry(url: str, ref: str, timeout: float = 30) -> dict[str, Any]:
    """The `ledger show --json` document of a receipt or review (full id or 12+ hex digits)."""
    return dict(_get(url, "/v1/entries/" + _quoted(ref), timeout))


def fetch_bundle(url: str, ref: str, timeout: float = 30, artifacts: bool = False) -> bytes:
    """The export bundle of a receipt or review, as `ledger verify FILE` reads it."""
    q = "?artifacts=1" if artifacts else ""
    return _request(url, "/v1/bundles/" + _quoted(ref) + q, timeout=timeout)[1]


def fetch_log_entries(url: str, start: int, end: int, timeout: float = 30) -> list[Any]:
    """Log entries `start`.. (before `end`; the server sends at most a page of them)."""
    doc = _get(url, f"/v1/log/entries?from={start}&to={end}", timeout)
    entries = doc.get("entries")
    return list(entries) if isinstance(entries, list) else []


def fetch_checkpoint(url: str, timeout: float = 30) -> bytes:
    """The newest signed checkpoint note (NotFoundError when none was signed yet)."""
    return _request(url, "/v1/checkpoint", timeout=timeout)[1]


def health(url: str, timeout: float = 10) -> dict[str, Any]:
    return dict(_get(url, "/healthz", timeout))


def fetch_status(
    url: str, question: dict[str, Any], timeout: float = 60, since: int | None = None
) -> dict[str, Any]:
    """The `status --json` document for a question the caller identified locally; with
    `since`, the server adds `log` (its newest checkpoint and the entries from `since`
    up to it: `GET /v1/log/entries?checkpoint=1`'s document), where it is of a release
    that does (an earlier one answers without it)."""
    path = "/v1/status" if since is None else f"/v1/status?since={since}"
    return dict(_post(url, path, question, timeout=timeout))


def fetch_history(url: str, question: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    return dict(_post(url, "/v1/history", question, timeout=timeout))


def fetch_evidence(
    url: str, question: dict[str, Any], timeout: float = 60
) -> dict[str, Any] | None:
    """The receipts and reviews the server holds on a question's subject, in one request;
    None where the server has no such route (a server of an earlier release answers 404
    or 405: its evidence is read per receipt, `ledger.read.per_receipt`)."""
    body = json.dumps(question).encode()
    status, data, _ = _request(url, "/v1/evidence", body=body, timeout=timeout, absent=(404, 405))
    if status in (404, 405):
        return None
    return dict(_json(url, data))


def fetch_verification(url: str, ref: str, timeout: float = 60) -> dict[str, Any]:
    """The `verify ID --json` document, computed by the server against its ledger."""
    return dict(_get(url, "/v1/verify/" + _quoted(ref), timeout))


def fetch_fleet(
    url: str, quarantine_above: float | None = None, token: str | None = None, timeout: float = 60
) -> dict[str, Any]:
    """The server's `ledger fleet` document (a token with the read role)."""
    path = "/v1/fleet" + (
        "" if quarantine_above is None else f"?quarantine_above={quarantine_above!r}"
    )
    _, data, _ = _request(url, path, token=_token(token), timeout=timeout)
    return _json(url, data)  # type: ignore[no-any-return]


def fetch_keys(url: str, timeout: float = 30) -> list[dict[str, Any]]:
    return list(_get(url, "/v1/keys", timeout, list))


def register_key(
    url: str,
    name: str,
    role: str,
    pem: bytes,
    token: str | None = None,
    hosts: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Register a public key; ``hosts``: the hosts a runner key speaks for, each with
    the GPU UUIDs declared there (none: not known)."""
    doc: dict[str, Any] = {"name": name, "role": role, "public_key_pem": pem.decode()}
    if hosts is not None:
        doc["hosts"] = {h: sorted(set(g)) for h, g in hosts.items()}
    return dict(_post(url, "/v1/keys", doc, _token(token)))


def change_host(
    url: str,
    ref: str,
    action: str,
    host: str,
    reason: str,
    gpus: Sequence[str] = (),
    token: str | None = None,
) -> dict[str, Any]:
    """Add or remove a host runner key ``ref`` speaks for (the keys role)."""
    doc = {"action": action, "host": host, "gpus": list(gpus), "reason": reason}
    return dict(_post(url, f"/v1/keys/{_quoted(ref)}/hosts", doc, _token(token)))


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def revoke_key(
    url: str, ref: str, reason: str, key: LocalKey, token: str | None = None
) -> dict[str, Any]:
    """Revoke a key through the server (a keys token), the revocation signed here by
    `key`: a ledger key (the operator's), or the revoked key itself."""
    from ledger.evidence.entry import revocation_body
    from ledger.evidence.signed_revocation import sign_revocation

    want = ref.strip().lower()
    found = [
        k
        for k in fetch_keys(url)
        if k.get("name") == ref or (want and str(k.get("keyid")).startswith(want))
    ]
    if len(found) != 1:
        raise UsageError(f"{ref!r} matches {len(found)} keys the server registered")
    keyid = str(found[0]["keyid"])
    env = sign_revocation(revocation_body(keyid, reason, _now()), key)
    return dict(_post(url, f"/v1/keys/{_quoted(keyid)}/revoke", {"envelope": env}, _token(token)))


def revoke_receipt(
    url: str,
    ref: str,
    reason: str,
    review: str | None,
    key: LocalKey,
    token: str | None = None,
) -> dict[str, Any]:
    """Revoke one receipt through the server (an operator or reviewer token), the
    revocation signed here by `key`: the operator's ledger key, or the reviewer key that
    signed the dispute it names (the server checks both)."""
    from ledger.evidence.entry import receipt_revocation_body
    from ledger.evidence.signed_revocation import sign_revocation

    rid = str(fetch_entry(url, ref)["id"])
    named = None if review is None else str(fetch_entry(url, review)["id"])
    role = next((k.get("role") for k in fetch_keys(url) if k.get("keyid") == key.keyid), None)
    by = "reviewer" if role == "reviewer" else "operator"
    env = sign_revocation(receipt_revocation_body(rid, reason, _now(), named, by), key)
    path = f"/v1/receipts/{_quoted(rid)}/revoke"
    return dict(_post(url, path, {"envelope": env}, _token(token)))


def fetch_proof(url: str, ref: str, timeout: float = 30) -> dict[str, Any]:
    return dict(_get(url, "/v1/log/proof/" + _quoted(ref), timeout))


def fetch_consistency(url: str, old: int, new: int, timeout: float = 30) -> dict[str, Any]:
    return dict(_get(url, f"/v1/log/consistency?from={old}&to={new}", timeout))


def sign_checkpoint(url: str, token: str | None = None) -> bytes:
    return _request(url, "/v1/checkpoint", body=b"{}", token=_token(token))[1]


def audit(url: str, token: str | None = None, timeout: float = 600) -> dict[str, Any]:
    path = "/v1/audit"
    return dict(_json(url, _request(url, path, token=_token(token), timeout=timeout)[1]))


def upload_artifact(
    url: str, content: bytes, media_type: str, token: str | None = None, timeout: float = 300
) -> dict[str, Any]:
    """Store an artifact's bytes on the server (before the receipt that names it)."""
    digest = hashlib.sha256(content).hexdigest()
    _, data, _ = _request(
        url,
        f"/v1/artifacts/sha256:{digest}",
        body=content,
        method="PUT",
        content_type=media_type,
        token=_token(token),
        timeout=timeout,
    )
    return dict(_json(url, data))


def fetch_artifact(url: str, digest: str, timeout: float = 300) -> tuple[bytes, str]:
    """An artifact's bytes and media type, checked against the digest on the way in."""
    want = digest.strip().lower().removeprefix("sha256:")
    _, data, ctype = _request(url, f"/v1/artifacts/sha256:{_quoted(want)}", timeout=timeout)
    if hashlib.sha256(data).hexdigest() != want:
        raise VerificationError(f"artifact sha256:{want[:12]} from {url} differs from its digest")
    return data, ctype
