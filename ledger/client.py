"""Talk to a `ledger serve` over HTTP: record envelopes, fetch entries and bundles.

Standard library only, and nothing heavier than `ledger.errors` at import: a
GPU host that records through a server needs neither a database driver nor
database credentials.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from ledger.errors import NotFoundError, RefusedError, UsageError

__all__ = [
    "MAX_BODY_BYTES",
    "fetch_bundle",
    "fetch_checkpoint",
    "fetch_entry",
    "health",
    "post_envelopes",
]

# One envelope may be up to ledger.dsse.MAX_ENVELOPE_BYTES (1 MiB); a request
# carries a batch recorded all-or-nothing (one claim's receipts), so 16 MiB
# bounds what one request can make the server hold in memory while leaving a
# batch of sixteen maximal envelopes room. Spelled out here rather than
# imported so the client stays free of pydantic and cryptography.
MAX_BODY_BYTES = 16 * 1024 * 1024


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


def _request(
    url: str,
    path: str,
    *,
    body: bytes | None = None,
    timeout: float = 30,
) -> tuple[int, bytes]:
    base = _base(url)
    req = urllib.request.Request(
        base + path,
        data=body,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as e:
        # The server answered: its one-line reason is what the person needs.
        with e:
            reason = _reason(e.read(), e.code)
        if e.code in (400, 411, 413):
            raise RefusedError(reason) from None
        if e.code == 404:
            raise NotFoundError(reason) from None
        raise UsageError(f"ledger server at {base} answered {e.code}: {reason}") from None
    except urllib.error.URLError as e:
        raise UsageError(f"cannot reach ledger server at {base}: {e.reason}") from None
    except OSError as e:
        # Timeouts and resets after the connection was made.
        raise UsageError(f"cannot reach ledger server at {base}: {e}") from None


def _json(url: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise UsageError(f"ledger server at {_base(url)} sent a reply that is not JSON") from None


def _quoted(ref: str) -> str:
    return urllib.parse.quote(ref.strip(), safe=":")


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
    _, data = _request(url, "/v1/envelopes", body=body, timeout=timeout)
    out = _json(url, data)
    if not isinstance(out, list) or len(out) != len(raws):
        raise UsageError(f"ledger server at {_base(url)} sent an unexpected reply")
    return [dict(d) for d in out]


def fetch_entry(url: str, ref: str, timeout: float = 30) -> dict[str, Any]:
    """The `ledger show --json` document of a receipt or review (full id or 12+ hex digits)."""
    _, data = _request(url, "/v1/entries/" + _quoted(ref), timeout=timeout)
    doc = _json(url, data)
    if not isinstance(doc, dict):
        raise UsageError(f"ledger server at {_base(url)} sent an unexpected reply")
    return doc


def fetch_bundle(url: str, ref: str, timeout: float = 30) -> bytes:
    """The export bundle of a receipt or review, as `ledger verify FILE` reads it."""
    return _request(url, "/v1/bundles/" + _quoted(ref), timeout=timeout)[1]


def fetch_checkpoint(url: str, timeout: float = 30) -> bytes:
    """The newest signed checkpoint note (NotFoundError when none was signed yet)."""
    return _request(url, "/v1/checkpoint", timeout=timeout)[1]


def health(url: str, timeout: float = 10) -> dict[str, Any]:
    doc = _json(url, _request(url, "/healthz", timeout=timeout)[1])
    if not isinstance(doc, dict):
        raise UsageError(f"ledger server at {_base(url)} sent an unexpected reply")
    return doc
