"""Property-based fuzzing of `ledger serve` (ledger.service, under uvicorn) over real HTTP:
random bodies posted and random paths read; no answer may be a 5xx, and a
refused post must leave the database byte-identical."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.evidence.keys import KeyDir
from ledger.service.run import Running, start
from tests.fuzz.helpers import FuzzLedger, make_ledger
from tests.fuzz.hostile import hostile_payload, sign_payload
from tests.ledger.factories import dump

FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FuzzLedger, Running]]:
    led = make_ledger(tmp_path_factory.mktemp("fuzz-http"))
    server = start(led.db, KeyDir(led.folder / "keys"))
    yield led, server
    server.stop()
    led.store.engine.dispose()


def _request(server: Running, method: str, path: str, body: bytes | None) -> int:
    u = urlsplit(server.url)
    conn = HTTPConnection(str(u.hostname), int(u.port or 80), timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _judge(counts: Counter[str], status: int, changed: bool) -> None:
    counts["http.cases"] += 1
    if status >= 500:
        counts["5xx"] += 1
        raise AssertionError(f"HTTP {status}")
    if status >= 400 and changed:
        counts["writes_after_refusal"] += 1
        raise AssertionError(f"HTTP {status} but the database changed")


json_value: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@FAST
@given(
    body=st.binary(max_size=200)
    | json_value.map(lambda v: json.dumps(v).encode())
    | st.integers(min_value=100, max_value=100_000).map(lambda n: b"[" * n + b"]" * n)
    | st.just(b'{"n": ' + b"9" * 5000 + b"}")
)
def test_fuzz_http_bodies(
    body: bytes, served: tuple[FuzzLedger, Running], fuzz_counts: Counter[str]
) -> None:
    led, server = served
    before = dump(led.store)
    status = _request(server, "POST", "/v1/envelopes", body)
    _judge(fuzz_counts, status, dump(led.store) != before)


@FAST
@given(
    path=st.sampled_from(
        ["/v1/entries/", "/v1/bundles/", "/v1/log/proof/", "/v1/log/consistency?from=", "/v1/"]
    ),
    tail=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="#"),
        max_size=30,
    )
    | st.sampled_from(["99999999999999999999", "1&to=99999999999999999999", "0", "-1", "1&to=1"]),
)
def test_fuzz_http_paths(
    path: str, tail: str, served: tuple[FuzzLedger, Running], fuzz_counts: Counter[str]
) -> None:
    led, server = served
    before = dump(led.store)
    status = _request(server, "GET", path + tail, None)
    # An anonymous read writes nothing at all, not even a checkpoint.
    fuzz_counts["http.reads"] += 1
    if dump(led.store) != before:
        fuzz_counts["writes_by_reads"] += 1
        raise AssertionError(f"GET {path + tail} changed the database")
    _judge(fuzz_counts, status, False)


@FAST
@given(payload=hostile_payload)
def test_fuzz_http_hostile_signed_payloads(
    payload: bytes, served: tuple[FuzzLedger, Running], fuzz_counts: Counter[str]
) -> None:
    led, server = served
    before = dump(led.store)
    status = _request(server, "POST", "/v1/envelopes", sign_payload(payload, led.runner))
    _judge(fuzz_counts, status, dump(led.store) != before)
    assert status == 400
