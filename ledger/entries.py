"""Reading logged entries back: the payload of a stored envelope, the show document."""

from __future__ import annotations

import base64
import json
from typing import Any

from ledger.store.store import Store

__all__ = ["payload_of", "show_document", "signer_of"]


def payload_of(body: str) -> bytes:
    """The signed payload bytes of a logged envelope body."""
    return base64.b64decode(json.loads(body)["payload"])


def signer_of(body: str) -> str:
    """Key id of the (first) signature of a logged envelope body."""
    return str(json.loads(body)["signatures"][0]["keyid"])


def show_document(store: Store, ref: str) -> dict[str, Any]:
    """What `ledger show --json` prints (and the server's GET /v1/entries/ID returns)."""
    e = store.resolve(ref)
    signer = signer_of(e.body)
    info = store.keys().get(signer)
    reviews = [
        {"id": r.entry_id, **json.loads(payload_of(r.body))["predicate"]}
        for r in store.review_entries([e.entry_id])
    ]
    return {
        "id": e.entry_id,
        "kind": e.kind,
        "seq": e.seq,
        "logged_at": e.logged_at,
        "signer": {
            "keyid": signer,
            "name": info.name if info else None,
            "role": info.role if info else None,
        },
        "statement": json.loads(payload_of(e.body)),
        "reviews": reviews,
    }
