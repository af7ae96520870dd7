"""Property-based fuzzing of what enters the ledger: envelopes, plans and CLI
arguments. Each case must end in exit 0/1/2 with no traceback, and a refused
input must leave the database byte-identical. Bounded `max_examples` keep the
suite to well under a minute on two cores."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.evidence.errors import Error
from ledger.qualification.plan import parse_plan
from tests.fuzz.helpers import SEEDS, FuzzLedger, cli, make_ledger
from tests.fuzz.hostile import hostile_payload, sign_payload

FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzLedger]:
    led = make_ledger(tmp_path_factory.mktemp("fuzz"))
    yield led
    led.store.engine.dispose()


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _mutate(env: dict[str, Any], how: str, value: Any, key: str) -> bytes:
    if how == "set":
        env[key] = value
    elif how == "drop":
        env.pop(key, None)
    elif how == "payload":
        env["payload"] = base64.b64encode(json.dumps(value).encode()).decode()
    elif how == "signatures":
        env["signatures"] = value
    elif how == "dup-signature":
        env["signatures"] = env["signatures"] * 2
    elif how == "deep":
        env[key] = json.loads("[" * 50 + "]" * 50)
        return (
            json.dumps(env)
            .replace('"payloadType"', '"x": ' + "[" * 2000 + "]" * 2000 + ', "payloadType"', 1)
            .encode()
        )
    elif how == "huge":
        env[key] = "x" * 2_000_000
    elif how == "dup-key":
        text = json.dumps(env)
        return ("{" + f'"{key}": {json.dumps(value)}, ' + text[1:]).encode()
    return json.dumps(env).encode()


@FAST
@given(
    how=st.sampled_from(
        ["set", "drop", "payload", "signatures", "dup-signature", "deep", "huge", "dup-key"]
    ),
    key=st.sampled_from(["payloadType", "payload", "signatures", "extra", "\u2028", "é"]),
    value=json_value,
)
def test_fuzz_envelopes(
    how: str, key: str, value: Any, ledger: FuzzLedger, fuzz_counts: Counter[str]
) -> None:
    raw = _mutate(json.loads(ledger.good), how, value, key)
    f = ledger.folder / "fuzz-envelope.json"
    f.write_bytes(raw)
    cli(fuzz_counts, "envelopes", ledger, ["record", str(f), "--db", ledger.db])


@FAST
@given(
    raw=st.binary(max_size=300) | st.sampled_from([p.read_bytes() for p in SEEDS.glob("*.json")])
)
def test_fuzz_raw_envelope_bytes(raw: bytes, ledger: FuzzLedger, fuzz_counts: Counter[str]) -> None:
    f = ledger.folder / "fuzz-raw.json"
    f.write_bytes(raw)
    cli(fuzz_counts, "envelopes", ledger, ["record", str(f), "--db", ledger.db])


toml_key = st.from_regex(r"[a-z][a-z0-9_.-]{0,10}", fullmatch=True)
toml_value = st.recursive(
    st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.text(max_size=20).map(json.dumps)
    | st.sampled_from(["true", "false", "1e400", "inf", "nan", "1979-05-27"]),
    lambda inner: st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    max_leaves=10,
)


@FAST
@given(
    lines=st.lists(
        st.one_of(
            toml_key.map(lambda k: f"[claims.{k}]"),
            st.tuples(toml_key, toml_value).map(lambda kv: f"{kv[0]} = {kv[1]}"),
            st.text(max_size=30),
            st.integers(min_value=1, max_value=3000).map(lambda n: "a = " + "[" * n + "]" * n),
        ),
        max_size=8,
    )
)
def test_fuzz_plans(lines: list[str], fuzz_counts: Counter[str]) -> None:
    fuzz_counts["plans.cases"] += 1
    try:
        parse_plan("\n".join(lines))
    except Error:
        pass  # a one-line refusal
    except BaseException:
        fuzz_counts["tracebacks"] += 1
        raise


SAFE_COMMANDS = [
    ["status"],
    ["history"],
    ["show"],
    ["verify"],
    ["export"],
    ["audit"],
    ["record"],
    ["log", "proof"],
    ["log", "consistency"],
    ["log", "checkpoint"],
    ["log", "witness"],
    ["keys", "list"],
    ["keys", "export"],
    ["keys", "revoke"],
]
WORDS = st.sampled_from(
    [
        "--json",
        "--db",
        "--rev",
        "HEAD",
        "HEAD:../../etc/passwd",
        "--pr",
        "0",
        "-1",
        "99999999999999999999",
        "1",
        "--from",
        "/nonexistent/x",
        "-o",
        "/nonexistent/dir/x.json",
        "--trust",
        "--state",
        "--scope",
        "k=v",
        "=",
        "--claim",
        "x" * 300,
        "\x00",
        "--server",
        "http://127.0.0.1:9",
        "sha256:",
        "0" * 12,
        "--reason",
        "",
        "--checkpoint",
        "--plan",
    ]
)


@settings(FAST, max_examples=200)
@given(
    command=st.sampled_from(SAFE_COMMANDS), words=st.lists(WORDS | st.text(max_size=12), max_size=6)
)
def test_fuzz_cli_arguments(
    command: list[str],
    words: list[str],
    ledger: FuzzLedger,
    fuzz_counts: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEDGER_DB", ledger.db)
    monkeypatch.setenv("LEDGER_KEYS", str(ledger.folder / "keys"))
    monkeypatch.chdir(ledger.folder)
    words = [w.replace("\x00", "") if w != "\x00" else w for w in words]
    if any("\x00" in w for w in words):
        words = [w for w in words if "\x00" not in w]  # argv cannot carry NUL
    cli(fuzz_counts, "cli", ledger, [*command, *words])


def test_seed_files_exist() -> None:
    names = {p.name for p in SEEDS.iterdir()}
    assert {"json-nested-100000.json", "plan-nested-5000.toml"} <= names
    assert isinstance(Path, type)


@FAST
@given(payload=hostile_payload)
def test_fuzz_hostile_signed_payloads(
    payload: bytes, ledger: FuzzLedger, fuzz_counts: Counter[str]
) -> None:
    f = ledger.folder / "fuzz-hostile.json"
    f.write_bytes(sign_payload(payload, ledger.runner))
    code = cli(fuzz_counts, "signed", ledger, ["record", str(f), "--db", ledger.db])
    assert code == 1  # each is refused, in one line
