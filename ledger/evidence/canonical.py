"""Canonical bytes (RFC 8785 / JCS) and the content addresses built on them."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from ledger.evidence.errors import InputError

__all__ = ["canonical_bytes", "receipt_id", "sha256_hex"]

ID_PREFIX = "sha256:"


def canonical_bytes(obj: Any) -> bytes:
    """JCS bytes of a JSON-compatible value; floats and ints as RFC 8785 prescribes.

    A value RFC 8785 cannot write (a lone surrogate, an integer beyond its
    domain) is the input's fault: InputError, one line."""
    try:
        return rfc8785.dumps(obj)
    except rfc8785.CanonicalizationError as e:
        raise InputError(f"not representable as RFC 8785 JSON: {e}") from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def receipt_id(payload: bytes) -> str:
    """Receipt id: `sha256:<hex>` of the exact payload bytes that were signed."""
    return ID_PREFIX + sha256_hex(payload)
