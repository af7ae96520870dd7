"""The hand checks of `ledger.evidence.shape` against the pydantic models they stand in for.

`statement_fits` / `envelope_fits` may answer True only where the models
accept; they answer False where the models decide. Here both readers get the
same documents (valid, mutated, malformed) and must agree, and verification
through either gives the same verdict and the same one-line reason.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, get_args
from unittest import mock

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ledger.evidence import dsse, shape
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import Error, InputError
from ledger.evidence.keys import KeyInfo, LocalKey
from ledger.evidence.kinds import QUALIFICATION_PREDICATE, REVIEW_PREDICATE, STATEMENT_TYPE
from ledger.evidence.models import Envelope, Outcome
from ledger.evidence.statement import statement_model
from ledger.verify import strict
from ledger.verify.envelope import verify_envelope
from ledger.verify.strict import unsafe
from tests.ledger.factories import COMMIT, TREE, predicate_dict

CHECKS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

H64 = "ab" * 32
RID = "sha256:" + "cd" * 32


def receipt_doc(**over: Any) -> dict[str, Any]:
    pred = predicate_dict(**over)
    src = pred["source"]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": src["repo"], "digest": {"gitCommit": src["commit"], "gitTree": src["tree"]}}
        ],
        "predicateType": QUALIFICATION_PREDICATE,
        "predicate": pred,
    }


FULL_RECEIPT = receipt_doc(
    check={"name": "admission", "version": "1", "parameters": {"n": 2, "x": [1, "a", None]}},
    scope={"device_kind": "cuda", "gpu_count": 2},
    source={
        "repo": "example",
        "commit": COMMIT,
        "tree": TREE,
        "parents": ["3" * 40, "4" * 64],
        "pr": 7,
        "base": "5" * 40,
        "dirty": False,
        "package": {"paths": ["model/**"], "digest": H64, "parts": {"files": H64}},
    },
    outcome="failed",
    reason="OOM at 4 GiB",
    measurements={"peak_bytes": 10, "shapes": [{"wall_ns": 3, "ratio": 0.5}], "note": "x"},
    cleanup={
        "complete": False,
        "resources": [{"kind": "process", "id": "12", "released": False, "proof": "gone"}],
        "tolerance_bytes": 0,
    },
    artifacts=[{"name": "a.txt", "digest": {"sha256": H64}, "size": 3, "mediaType": "text/plain"}],
    runner={
        "host": "h",
        "gpu_uuids": ["GPU-1"],
        "started": "2026-11-30T00:00:00.5Z",
        "finished": "2026-11-30T00:00:01Z",
        "ledger_version": "0.1.0",
        "environment": {"python": "3.11"},
    },
    supersedes=[{"id": RID, "reason": "rerun"}],
)
REVIEW = {
    "_type": STATEMENT_TYPE,
    "subject": [{"name": "receipt", "digest": {"sha256": RID.removeprefix("sha256:")}}],
    "predicateType": REVIEW_PREDICATE,
    "predicate": {
        "receipt": RID,
        "verdict": "concur",
        "note": "reran it",
        "reviewed": "2026-11-30T00:00:02Z",
        "ledger_version": "0.1.0",
    },
}
STATEMENTS = [receipt_doc(), FULL_RECEIPT, REVIEW]
ENVELOPE = {
    "payloadType": dsse.IN_TOTO_PAYLOAD_TYPE,
    "payload": "e30=",
    "signatures": [{"keyid": "k" * 64, "sig": "c2ln"}],
}

# Values the mutations put in: the right type in the wrong place, the wrong type
# in the right place, and the edges of each pattern and range.
VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    1.5,
    -0.5,
    "",
    " ",
    "x",
    "7",
    "passed",
    "failed",
    "on",
    "off",
    "concur",
    "dispute",
    "cpu",
    "Device",
    COMMIT,
    "ab" * 20,
    "AB" * 20,
    COMMIT[:-1],
    COMMIT + "\n",
    "4" * 64,
    H64,
    H64 + "\n",
    RID,
    "sha256:" + H64[:-1],
    "2026-11-30T00:00:00Z",
    "2026-11-30T00:00:00.123Z",
    "2026-11-30 00:00:00Z",
    "2026-11-30T00:00:00Z\n",
    "2026-11-30T00:00:00.Z",
    STATEMENT_TYPE,
    QUALIFICATION_PREDICATE,
    REVIEW_PREDICATE,
    [],
    [COMMIT],
    ["a", 1],
    {},
    {"sha256": H64},
    {"sha512": H64},
    {"gitCommit": COMMIT, "gitTree": TREE},
    {"k": "v"},
    {"k": 1},
    {"peak_bytes": 1.5},
    {"deep": [{"x_ns": 2.5}]},
    {"complete": True, "resources": []},
    {"kind": "process", "id": "1", "released": False},
    {"name": "a", "digest": {}, "size": 0},
    {"name": "example", "digest": {"gitCommit": COMMIT, "gitTree": TREE}},
]
KEYS = [
    "extra",
    "name",
    "digest",
    "reason",
    "note",
    "pr",
    "parts",
    "mediaType",
    "host",
    "x_bytes",
    "wall_ns",
    "Bad-Facet",
    "gpu.count",
    "_type",
    "sha256",
]
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
# Copies: a later mutation must not change the vocabulary itself.
values = (st.sampled_from(VALUES) | json_value).map(copy.deepcopy)


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every object and array in `doc`."""
    if isinstance(doc, dict | list):
        yield path
        items = doc.items() if isinstance(doc, dict) else enumerate(doc)
        for k, v in items:
            yield from _nodes(v, (*path, k))


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def mutate(doc: Any, data: st.DataObject) -> None:
    """One change somewhere in `doc`: drop, add or replace a member, or an item."""
    node = _at(doc, data.draw(st.sampled_from(list(_nodes(doc)))))
    how = data.draw(st.sampled_from(["drop", "add", "set", "set"]))
    if isinstance(node, dict):
        if how == "add" or not node:
            node[data.draw(st.sampled_from(KEYS) | st.text(max_size=6))] = data.draw(values)
        elif how == "drop":
            del node[data.draw(st.sampled_from(sorted(node)))]
        else:
            node[data.draw(st.sampled_from(sorted(node)))] = data.draw(values)
    elif how == "add" or not node:
        node.append(data.draw(values))
    elif how == "drop":
        node.pop(data.draw(st.integers(0, len(node) - 1)))
    else:
        node[data.draw(st.integers(0, len(node) - 1))] = data.draw(values)


def single_changes(doc: Any) -> Iterator[Any]:
    """`doc` with each one change: every member and item dropped, replaced by each
    of VALUES in turn, and each of KEYS added to every object."""
    for path in _nodes(doc):
        node = _at(doc, path)
        slots = sorted(node) if isinstance(node, dict) else range(len(node))
        for slot in slots:
            for value in (_DROP, *VALUES):
                changed = copy.deepcopy(doc)
                target = _at(changed, path)
                if value is _DROP:
                    del target[slot]
                else:
                    target[slot] = copy.deepcopy(value)
                yield changed
        extra = [(k, v) for k in KEYS for v in ("x", 1, None)] if isinstance(node, dict) else []
        for key, value in extra:
            if key not in node:
                changed = copy.deepcopy(doc)
                _at(changed, path)[key] = value
                yield changed


_DROP = object()


def _mutated(data: st.DataObject, bases: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(data.draw(st.sampled_from(bases)))
    for _ in range(data.draw(st.integers(0, 3))):
        mutate(doc, data)
    return doc


def _canonical(doc: Any) -> bytes | None:
    """The payload a signer would produce, or None where no payload can carry `doc`
    (the strict reader refuses those before any shape is checked)."""
    try:
        payload = canonical_bytes(doc)
    except InputError:
        return None
    return None if unsafe(json.loads(payload), "payload") else payload


def _models_accept(payload: bytes) -> bool:
    doc = json.loads(payload)
    try:
        statement_model(doc).model_validate_json(payload, strict=True)
    except ValidationError:
        return False
    return True


def _left_to_models(doc: Any) -> bool:
    """A document holding what only the models judge (see `ledger.evidence.shape`)."""
    text = json.dumps(doc, ensure_ascii=False)
    return '"type_"' in text or any(c.isdigit() and not c.isascii() for c in text)


# --- the hand checks against the models, document by document ----------------------------


def test_the_shared_rules_name_the_models_values() -> None:
    assert get_args(Outcome) == shape.OUTCOMES


@pytest.mark.parametrize("doc", STATEMENTS, ids=["receipt", "full-receipt", "review"])
def test_valid_statements_fit_without_the_models(doc: dict[str, Any]) -> None:
    payload = canonical_bytes(doc)
    assert _models_accept(payload)
    assert shape.statement_fits(json.loads(payload))


def _agree(changed: Any) -> None:
    payload = _canonical(changed)
    if payload is None:
        return
    doc = json.loads(payload)
    if not isinstance(doc, dict) or doc.get("predicateType") not in (
        QUALIFICATION_PREDICATE,
        REVIEW_PREDICATE,
    ):
        assert not shape.statement_fits(doc)
        return
    fits, accepted = shape.statement_fits(doc), _models_accept(payload)
    # Never more than the models: a document the hand check vouches for is valid.
    assert not fits or accepted, payload
    if not _left_to_models(doc):
        assert fits == accepted, payload


@pytest.mark.parametrize("base", STATEMENTS, ids=["receipt", "full-receipt", "review"])
def test_statement_fits_exactly_where_the_models_accept(base: dict[str, Any]) -> None:
    """Every single change of a valid statement, one by one."""
    for changed in single_changes(base):
        _agree(changed)


@CHECKS
@given(data=st.data())
def test_statement_fits_where_the_models_accept_after_several_changes(
    data: st.DataObject,
) -> None:
    _agree(_mutated(data, STATEMENTS))


def test_what_only_the_models_judge_still_gets_their_verdict() -> None:
    """A `type_` key (the models' field name for `_type`) and a non-ASCII digit in
    a timestamp are accepted by the models: the hand check leaves them to them,
    and the strict reader gives the models' verdict."""
    aliased = {("type_" if k == "_type" else k): v for k, v in receipt_doc().items()}
    arabic = copy.deepcopy(REVIEW)
    arabic["predicate"]["reviewed"] = "٢٠٢٦-11-30T00:00:02Z"
    for doc in (aliased, arabic):
        payload = canonical_bytes(doc)
        assert not shape.statement_fits(json.loads(payload))
        assert _models_accept(payload)
        assert strict.strict_document(payload) == json.loads(payload)


def _envelope_agrees(env: Any) -> None:
    try:
        Envelope.model_validate(env)
        accepted = True
    except ValidationError:
        accepted = False
    assert shape.envelope_fits(env) == accepted, env


def test_envelope_fits_exactly_where_the_model_accepts() -> None:
    for changed in single_changes(ENVELOPE):
        _envelope_agrees(changed)


@CHECKS
@given(data=st.data())
def test_envelope_fits_where_the_model_accepts_after_several_changes(
    data: st.DataObject,
) -> None:
    _envelope_agrees(_mutated(data, [ENVELOPE]))


# --- verification through either reader --------------------------------------------------


@contextmanager
def models_only() -> Iterator[None]:
    """Every shape check answers "ask the models": verification as it was before them."""
    with (
        mock.patch.object(strict, "statement_fits", lambda doc: False),
        mock.patch.object(dsse, "envelope_fits", lambda data: False),
    ):
        yield


def outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        v = run()
    except Error as e:
        return (type(e).__name__, e.reason())
    return ("verified", v.id, v.kind, v.signer, v.document, v.statement)


RUNNER = LocalKey("runner", Ed25519PrivateKey.generate())
REVIEWER = LocalKey("reviewer", Ed25519PrivateKey.generate())
KEYS_AT = {
    k.keyid: KeyInfo(k.keyid, k.name, k.name, k.public, seq)
    for seq, k in ((1, RUNNER), (2, REVIEWER))
}


def both(raw: bytes) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    def run() -> Any:
        return verify_envelope(dsse.parse_envelope(raw), KEYS_AT, at_seq=10)

    fast = outcome(run)
    with models_only():
        slow = outcome(run)
    return fast, slow


def _signed(doc: Any, key: LocalKey) -> bytes:
    try:
        payload = canonical_bytes(doc)
    except InputError:
        payload = json.dumps(doc).encode()  # refused before any shape check, both ways
    return dsse.sign(payload, key).model_dump_json().encode()


def _signer_for(doc: Any) -> LocalKey:
    review = isinstance(doc, dict) and doc.get("predicateType") == REVIEW_PREDICATE
    return REVIEWER if review else RUNNER


@pytest.mark.parametrize("base", STATEMENTS, ids=["receipt", "full-receipt", "review"])
def test_verifying_each_changed_statement_gives_one_verdict_either_way(
    base: dict[str, Any],
) -> None:
    verdicts = set()
    # Every third change: each verification runs twice; the shape checks alone
    # meet every change above.
    for changed in itertools.islice(single_changes(base), 0, None, 3):
        fast, slow = both(_signed(changed, _signer_for(changed)))
        assert fast == slow
        verdicts.add(fast[0])
    # Both accepted and refused documents were among them.
    assert {"verified", "RefusedError"} <= verdicts


@CHECKS
@given(data=st.data())
def test_verifying_a_signed_statement_gives_one_verdict_either_way(
    data: st.DataObject,
) -> None:
    doc = _mutated(data, STATEMENTS)
    right = _signer_for(doc)
    key = data.draw(st.sampled_from([right, RUNNER if right is REVIEWER else REVIEWER]))
    fast, slow = both(_signed(doc, key))
    assert fast == slow


@CHECKS
@given(data=st.data())
def test_verifying_a_malformed_envelope_gives_one_verdict_either_way(
    data: st.DataObject,
) -> None:
    good = json.loads(dsse.sign(canonical_bytes(receipt_doc()), RUNNER).model_dump_json())
    fast, slow = both(json.dumps(_mutated(data, [good])).encode())
    assert fast == slow


def test_a_valid_statement_is_verified_without_building_a_model() -> None:
    raw = dsse.sign(canonical_bytes(FULL_RECEIPT), RUNNER).model_dump_json().encode()
    with mock.patch.object(strict, "_models_decide", side_effect=AssertionError("models used")):
        v = verify_envelope(dsse.parse_envelope(raw), KEYS_AT, at_seq=10)
    assert v.document == FULL_RECEIPT
    # The model, when a caller asks for it, is the one the payload validates as.
    assert v.statement.predicate.source.pr == 7
