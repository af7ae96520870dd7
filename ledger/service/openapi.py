"""The OpenAPI 3.1 document served at `/openapi.json`, written out by hand
(the routes are few and their bodies are our own signed formats)."""

from __future__ import annotations

from typing import Any

from ledger import __version__

__all__ = ["document"]

_ERROR = {
    "description": 'refused: {"error": "<one line>"}',
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_JSON: dict[str, Any] = {"content": {"application/json": {"schema": {}}}}


def _op(summary: str, ok: int = 200, body: dict[str, Any] | None = None, **extra: Any) -> Any:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {str(ok): {"description": "ok", **_JSON}, "4XX": _ERROR},
    }
    if body is not None:
        op["requestBody"] = {"required": True, "content": body}
    op.update(extra)
    return op


def _path_param(name: str, pattern: str | None = None) -> list[dict[str, Any]]:
    schema: dict[str, Any] = {"type": "string"}
    if pattern:
        schema["pattern"] = pattern
    return [{"name": name, "in": "path", "required": True, "schema": schema}]


def _query(*names: str, integer: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [
        {
            "name": n,
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1} if n in integer else {"type": "string"},
        }
        for n in names
    ]


_BINARY = {"type": "string", "format": "binary"}
_BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
_OBJECT = {"application/json": {"schema": {"type": "object"}}}
_ENVELOPES = {
    "application/json": {
        "schema": {
            "oneOf": [
                {"$ref": "#/components/schemas/Envelope"},
                {"type": "array", "items": {"$ref": "#/components/schemas/Envelope"}},
            ]
        }
    }
}


def document() -> dict[str, Any]:
    ref = _path_param("ref")
    return {
        "openapi": "3.1.0",
        "info": {"title": "ledger", "version": __version__},
        "paths": {**_answers(ref), **_log(ref), **_administration(ref)},
        "components": _components(),
    }


def _answers(ref: list[dict[str, Any]]) -> dict[str, Any]:
    """Recording envelopes and the questions answered from them."""
    return {
        "/healthz": {"get": _op("entries in the log")},
        "/v1/envelopes": {"post": _op("record signed envelopes, all or nothing", 201, _ENVELOPES)},
        "/v1/reviews": {"post": _op("record signed review envelopes", 201, _ENVELOPES)},
        "/v1/entries/{ref}": {"get": _op("the `show --json` document", parameters=ref)},
        "/v1/bundles/{ref}": {
            "get": _op("the export bundle", parameters=ref + _query("artifacts"))
        },
        "/v1/verify/{ref}": {"get": _op("the `verify ID --json` document", parameters=ref)},
        "/v1/status": {
            "get": _op(
                "status of what the log knows of a PR or commit",
                parameters=_query("repo", "rev", "pr", integer=("pr",)),
            ),
            "post": _op(
                "the `status --json` document for a question; with since=N, `log` beside it "
                "(the newest checkpoint and the entries from N up to it, for the client that "
                "checks the answer)",
                body=_OBJECT,
                parameters=_query("since", integer=("since",)),
            ),
        },
        "/v1/history": {
            "get": _op(
                "history of a PR or commit",
                parameters=_query("repo", "rev", "pr", integer=("pr",)),
            ),
            "post": _op("the `history --json` document for a question", body=_OBJECT),
        },
        "/v1/evidence": {
            "post": _op(
                "the receipts and reviews held on a question's subject, each signer's "
                "standing with it, in one answer",
                body=_OBJECT,
            )
        },
    }


def _log(ref: list[dict[str, Any]]) -> dict[str, Any]:
    """The transparency log: checkpoints, proofs, its entries."""
    return {
        "/v1/checkpoint": {
            "get": _op("the newest signed checkpoint note (text/plain)"),
            "post": _op("sign a checkpoint now", security=_BEARER),
        },
        "/v1/log/proof/{ref}": {"get": _op("inclusion proof", parameters=ref)},
        "/v1/log/consistency": {
            "get": _op("consistency proof", parameters=_query("from", "to", integer=("from", "to")))
        },
        "/v1/log/entries": {
            "get": _op(
                "log entries from..to (1000 at most), each with the logging time its "
                "leaf commits to; with checkpoint=1 the newest signed checkpoint beside "
                "them, the entries only up to its size",
                parameters=_query("from", "to", "checkpoint", integer=("from", "to")),
            )
        },
    }


def _administration(ref: list[dict[str, Any]]) -> dict[str, Any]:
    """Keys, plans, artifacts, the audit and the fleet."""
    return {
        "/v1/keys": {
            "get": _op("registered keys"),
            "post": _op("register a public key", 201, _OBJECT, security=_BEARER),
        },
        "/v1/plans": {
            "post": _op(
                "record the governing plan of a base branch (or a revision) with the "
                "git objects that prove it (a token with the plans role, the base "
                "branch's post-merge job; a runner token gets 403; the entry names "
                "its holder)",
                201,
                _OBJECT,
                security=_BEARER,
            )
        },
        "/v1/keys/{ref}/revoke": {
            "post": _op(
                "revoke a key ({envelope}: the revocation signed by a ledger key or the key "
                "itself, checked before it is logged)",
                body=_OBJECT,
                parameters=ref,
                security=_BEARER,
            )
        },
        "/v1/receipts/{ref}/revoke": {
            "post": _op(
                "revoke one receipt ({envelope}: the revocation signed by its authority, a "
                "ledger key on the operator's word, the reviewer key of its own dispute on a "
                "reviewer's; the operator role or the reviewer role; logged with the "
                "holder's name)",
                body=_OBJECT,
                parameters=ref,
                security=_BEARER,
            )
        },
        "/v1/keys/{ref}/hosts": {
            "post": _op(
                "add or remove a host a runner key speaks for ({action, host, gpus, reason}; "
                "the keys role; logged with the holder's name)",
                body=_OBJECT,
                parameters=ref,
                security=_BEARER,
            )
        },
        "/v1/artifacts/{digest}": {
            "get": _op("an artifact's bytes", parameters=_path_param("digest")),
            "put": _op(
                "upload an artifact before its receipt",
                201,
                {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                parameters=_path_param("digest"),
                security=_BEARER,
            ),
        },
        "/v1/audit": {"get": _op("audit the whole ledger", security=_BEARER)},
        "/v1/fleet": {
            "get": _op(
                "per GPU, host and claim, what the receipts say of the fleet "
                "(`ledger fleet`; the read role)",
                parameters=_query("quarantine_above"),
                security=_BEARER,
            )
        },
    }


def _components() -> dict[str, Any]:
    """The bearer scheme and the shared schemas."""
    return {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "string"}},
            },
            "Envelope": {
                "type": "object",
                "required": ["payloadType", "payload", "signatures"],
                "properties": {
                    "payloadType": {"type": "string"},
                    "payload": {"type": "string"},
                    "signatures": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
    }
