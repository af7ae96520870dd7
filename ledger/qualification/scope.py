"""Scopes: flat facet maps, and when evidence at one scope speaks for another.

Facet values compare by their text, so `gpu_count=2` given on a command line
matches `gpu_count = 2` in a plan or a receipt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from ledger.evidence.errors import InputError

__all__ = ["Facets", "covers", "format_scope", "merge_scopes", "scope_key"]

Facets: TypeAlias = Mapping[str, str | int]


def _text(value: str | int) -> str:
    return str(value)


def covers(evidence: Facets, required: Facets) -> bool:
    """True when `evidence` equals `required` on every facet `required` names.

    Evidence at a narrower scope (more facets) covers a broader one; evidence
    that lacks a required facet, or has another value for it, does not.
    """
    return all(k in evidence and _text(evidence[k]) == _text(v) for k, v in required.items())


def merge_scopes(plan: Facets, query: Facets, *, claim: str) -> dict[str, str | int]:
    """The required scope: the claim's plan scope narrowed by the query scope.

    A query may add facets, never contradict the plan: asking about a claim at
    a value its plan scope excludes is a question the plan cannot answer.
    """
    merged: dict[str, str | int] = dict(plan)
    for k, v in query.items():
        if k in plan and _text(plan[k]) != _text(v):
            raise InputError(
                f"scope: {k}={v} conflicts with claim {claim!r}, whose plan scope "
                f"requires {k}={plan[k]}"
            )
        merged.setdefault(k, v)
    return merged


def scope_key(scope: Facets) -> tuple[tuple[str, str], ...]:
    """A hashable, order-free identity of a scope (facets compared by text)."""
    return tuple(sorted((k, _text(v)) for k, v in scope.items()))


ANY_SCOPE = "any environment"
"""How the empty scope reads: it asks for no facet, so any environment covers it."""


def format_scope(scope: Facets) -> str:
    """`k=v,k=v` sorted by facet; `any environment` for the empty scope."""
    return ",".join(f"{k}={v}" for k, v in scope_key(scope)) or ANY_SCOPE
