"""The signature a revocation is logged with (`ledger.evidence.signed_revocation`):
made here by the revoking authority's key, or made by a client that holds the key and
sent over HTTP, where the server checks it; either way checked against the key registry
before anything is written, so the write path logs no revocation the readers would not
count.

On the ledger's host the operator's key is the ledger key (`ledger init` made it in
$LEDGER_KEYS), unless `--key` names another; a client names its key with `--key`, as
`ledger review` does.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from ledger.evidence.errors import RefusedError, UsageError
from ledger.evidence.keys import KeyDir, LocalKey, active_ledger_key
from ledger.evidence.signed_revocation import check, read_signed, sign_revocation, signed_body
from ledger.store.store import Store

__all__ = ["asserted", "operator_key", "signed_entry"]


def operator_key(store: Store, keys: KeyDir | None = None) -> LocalKey:
    """The private half of this ledger's active ledger key, from $LEDGER_KEYS."""
    info = active_ledger_key(store.keys())
    kd = keys or KeyDir.default()
    if not kd.file(info.name).exists():
        raise UsageError(
            f"a revocation is signed by the operator's key: the ledger key {info.name} is "
            f"not in {kd.path} (set $LEDGER_KEYS, or name another with --key)"
        )
    return kd.load(info.name)


def asserted(envelope: Any) -> dict[str, Any]:
    """The revocation document a client's signed `envelope` asserts (not yet checked:
    `signed_entry` does that); RefusedError where it is no signed revocation."""
    got = read_signed({"signed": envelope})
    if got is None:
        raise RefusedError("envelope: a DSSE envelope of the revocation, signed")
    return got[0]


def signed_entry(
    store: Store,
    doc: bytes,
    key: LocalKey | None,
    envelope: Mapping[str, Any] | None,
    revoked_by: str | None,
) -> tuple[bytes, str]:
    """The entry body of revocation document `doc`, signed by `key` (on this host: the
    operator's ledger key when None) or carried by a client's `envelope`, whose payload
    must be exactly `doc`; with the signer's key id. Refused, with why, where the
    signature would not count: it does not verify, or its key may not assert it."""
    if envelope is None:
        env = sign_revocation(doc, key or operator_key(store))
    else:
        env = dict(envelope)
        asserted(env)
        try:
            payload = base64.b64decode(str(env.get("payload")), validate=True)
        except (binascii.Error, ValueError):
            raise RefusedError("envelope: bad base64 in payload") from None
        if payload != doc:
            raise RefusedError(
                "the signed revocation is not the one asked for: its payload must be "
                f"exactly {json.loads(doc)}"
            )
    body = signed_body(env, revoked_by)
    sig = check(store.size(), json.loads(body), store.keys(fresh=True))
    if sig.problem is not None:
        raise RefusedError(f"revocation not logged: {sig.problem}")
    assert sig.signer is not None
    return body, sig.signer
