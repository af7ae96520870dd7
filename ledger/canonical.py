"""Canonical bytes (RFC 8785 / JCS) and the content addresses built on them."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

__all__ = ["canonical_bytes", "receipt_id", "sha256_hex"]

ID_PREFIX = "sha256:"


def canonical_bytes(obj: Any) -> bytes:
    """JCS bytes of a JSON-compatible value; floats and ints as RFC 8785 prescribes."""
    return rfc8785.dumps(obj)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def receipt_id(payload: bytes) -> str:
    """Receipt id: `sha256:<hex>` of the exact payload bytes that were signed."""
    return ID_PREFIX + sha256_hex(payload)
