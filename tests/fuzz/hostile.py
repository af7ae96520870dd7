"""Signed payloads that once ended in a traceback: a lone surrogate, a giant
integer, deep nesting, out-of-column values. Each is signed by the fuzz
ledger's own runner key, so it reaches the payload checks (an unknown key
would be refused first)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.keys import LocalKey
from ledger.evidence.models import QUALIFICATION_PREDICATE, STATEMENT_TYPE
from tests.fuzz.helpers import SEEDS
from tests.ledger.factories import COMMIT, TREE, predicate_dict

__all__ = ["hostile_payload", "sign_payload"]

_MARK = "@@HOSTILE@@"


def _statement(pred: dict[str, Any]) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "example", "digest": {"gitCommit": COMMIT, "gitTree": TREE}}],
        "predicateType": QUALIFICATION_PREDICATE,
        "predicate": pred,
    }


def _with(value_text: str, where: str) -> bytes:
    """The canonical statement with `value_text` (raw JSON text) spliced in at `where`."""
    pred = predicate_dict()
    if where == "reason":
        pred.update(outcome="failed", reason=_MARK)
    elif where == "measurement":
        pred["measurements"] = {"n": _MARK}
    elif where == "pr":
        pred["source"] = {**pred["source"], "pr": _MARK}
    elif where == "media":
        pred["artifacts"] = [
            {"name": "a", "digest": {"sha256": "a" * 64}, "size": 1, "mediaType": _MARK}
        ]
    return canonical_bytes(_statement(pred)).replace(
        json.dumps(_MARK).encode(), value_text.encode()
    )


def _seeds() -> list[tuple[str, str]]:
    out = []
    for p in sorted(SEEDS.glob("payload-*.json")):
        doc = json.loads(p.read_text())
        out.append((str(doc["value"]), str(doc["where"])))
    return out


hostile_payload = st.one_of(
    st.sampled_from(_seeds()).map(lambda vw: _with(*vw)),
    st.text(min_size=1, max_size=8).map(lambda t: _with(json.dumps(t + "\ud800"), "reason")),
    st.integers(min_value=41, max_value=6000).map(lambda n: _with("9" * n, "measurement")),
    st.integers(min_value=2**31, max_value=2**62).map(lambda n: _with(str(n), "pr")),
    st.integers(min_value=65, max_value=1200).map(
        lambda n: _with("[" * n + "]" * n, "measurement")
    ),
    # Media types that are never valid: a control character, or past the column.
    st.tuples(st.text(max_size=20), st.sampled_from("\r\n\x00\x1b\x7f"), st.text(max_size=20)).map(
        lambda t: _with(json.dumps("text/" + t[0] + t[1] + t[2]), "media")
    ),
    st.integers(min_value=199, max_value=400).map(
        lambda n: _with(json.dumps("t/" + "x" * n), "media")
    ),
)


def sign_payload(payload: bytes, key: LocalKey) -> bytes:
    return dsse.sign(payload, key).model_dump_json().encode()
