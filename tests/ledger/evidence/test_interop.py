"""DSSE interoperability with securesystemslib, in both directions, and the
named known-bad envelopes under fixtures/ (regenerate with
`python -m tests.ledger.fixtures.make_envelopes`)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import git
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib import exceptions as sslib_errors
from securesystemslib.dsse import Envelope as SslibEnvelope

# The public names; the package re-exports them without `as`, which mypy --strict flags.
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes, receipt_id
from ledger.evidence.errors import RefusedError, VerificationError
from ledger.evidence.keys import LocalKey, key_id, load_public_pem, public_pem, raw_public
from ledger.evidence.models import IN_TOTO_PAYLOAD_TYPE, Envelope
from ledger.evidence.statement import Facts, build_statement
from ledger.identity.source import open_repo
from ledger.plans.governing import identify
from ledger.store.store import Store
from tests.ledger.helpers import Run, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HELLO_TYPE = "http://example.com/HelloWorld"


def ok(r: Run) -> Run:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


def ledger(capsys: pytest.CaptureFixture[str], words: str, *args: str) -> Run:
    """`ledger WORDS ARGS...` (WORDS split on spaces), which must exit 0."""
    return ok(run(capsys, *words.split(), *args))


def sslib_key(public: Any, keyid: str | None = None) -> SSlibKey:
    """Our Ed25519 public key as securesystemslib sees it, under our key id."""
    return SSlibKey(
        keyid or key_id(public), "ed25519", "ed25519", {"public": raw_public(public).hex()}
    )


def statement_payload(repo: git.Repo) -> bytes:
    """Canonical bytes of a valid qualification statement about the repo's HEAD.

    The reason holds non-ASCII text, so PAE lengths must count bytes, not characters.
    """
    source = identify(
        open_repo(Path(str(repo.working_tree_dir))), rev="HEAD", for_statement=True
    ).revision.source()
    facts = Facts(
        claim="grad.compare",
        check="grad.compare",
        check_version="2",
        parameters={"threshold": "0.03"},
        scope={"device_kind": "cpu"},
        outcome="inconclusive",
        reason="arms ran on different GPUs — H200 vs H100 (µ-batch 4)",
        measurements={"tensors": 660},
        observer="off",
        cleanup=None,
        artifacts=(),
        supersedes=(),
    )
    stmt = build_statement(source, facts)
    return canonical_bytes(stmt.model_dump(mode="json", by_alias=True))


def with_payload(env: dict[str, Any], payload: bytes) -> dict[str, Any]:
    out = copy.deepcopy(env)
    out["payload"] = base64.b64encode(payload).decode()
    return out


def with_flipped_sig(env: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(env)
    sig = bytearray(base64.b64decode(out["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    out["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    return out


def sslib_verify(env: dict[str, Any], key: SSlibKey) -> dict[str, Any]:
    # from_dict rewrites the signatures in the dict it is given.
    return SslibEnvelope.from_dict(copy.deepcopy(env)).verify([key], threshold=1)


# --- the DSSE pre-authentication encoding ------------------------------------------------


def test_pae_known_answer() -> None:
    want = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert dsse.pae(HELLO_TYPE, b"hello world") == want
    assert SslibEnvelope(b"hello world", HELLO_TYPE, {}).pae() == want


def test_pae_counts_bytes() -> None:
    assert dsse.pae("t/ü", "µ".encode()) == b"DSSEv1 4 t/\xc3\xbc 2 \xc2\xb5"


def test_sign_data_and_fail_not_data() -> None:
    key = LocalKey("k", Ed25519PrivateKey.generate())
    env = dsse.sign(b"DATA", key, payload_type=HELLO_TYPE)
    assert dsse.verify(env, {key.keyid: key.public}) == (b"DATA", [key.keyid])

    forged = Envelope(
        payloadType=HELLO_TYPE,
        payload=base64.b64encode(b"NOT DATA").decode(),
        signatures=env.signatures,
    )
    with pytest.raises(VerificationError, match="DSSE: invalid signature"):
        dsse.verify(forged, {key.keyid: key.public})
    retyped = Envelope(payloadType=HELLO_TYPE + "x", payload=env.payload, signatures=env.signatures)
    with pytest.raises(VerificationError, match="DSSE: invalid signature"):
        dsse.verify(retyped, {key.keyid: key.public})


# --- ours -> securesystemslib --------------------------------------------------------------


def test_our_envelope_verifies_with_securesystemslib(repo: git.Repo) -> None:
    key = LocalKey("runner", Ed25519PrivateKey.generate())
    payload = statement_payload(repo)
    env = json.loads(dsse.sign(payload, key).model_dump_json())

    accepted = sslib_verify(env, sslib_key(key.public))
    assert list(accepted) == [key.keyid]
    parsed = SslibEnvelope.from_dict(copy.deepcopy(env))
    assert parsed.payload == payload
    assert parsed.payload_type == IN_TOTO_PAYLOAD_TYPE


def test_our_tampered_envelope_fails_with_securesystemslib(repo: git.Repo) -> None:
    key = LocalKey("runner", Ed25519PrivateKey.generate())
    payload = statement_payload(repo)
    env = json.loads(dsse.sign(payload, key).model_dump_json())
    ours = sslib_key(key.public)

    changed = payload.replace(b'"tensors":660', b'"tensors":661')
    assert changed != payload
    for bad in (with_payload(env, changed), with_flipped_sig(env)):
        with pytest.raises(sslib_errors.VerificationError):
            sslib_verify(bad, ours)
    # The right key id on the wrong key is no signature either.
    impostor = sslib_key(Ed25519PrivateKey.generate().public_key(), keyid=key.keyid)
    with pytest.raises(sslib_errors.VerificationError):
        sslib_verify(env, impostor)


# --- securesystemslib -> ours ------------------------------------------------------------


def sslib_signed(payload: bytes) -> tuple[Ed25519PrivateKey, str, dict[str, Any]]:
    """An envelope signed by securesystemslib's CryptoSigner, key id = sha256 of the raw key."""
    private = Ed25519PrivateKey.generate()
    kid = hashlib.sha256(raw_public(private.public_key())).hexdigest()
    signer = CryptoSigner(private, sslib_key(private.public_key(), keyid=kid))
    env = SslibEnvelope(payload, IN_TOTO_PAYLOAD_TYPE, {})
    env.sign(signer)
    return private, kid, env.to_dict()


def test_securesystemslib_envelope_verifies_with_ours(repo: git.Repo) -> None:
    payload = statement_payload(repo)
    private, kid, env = sslib_signed(payload)
    assert kid == key_id(private.public_key())
    parsed = dsse.parse_envelope(json.dumps(env).encode())
    assert dsse.verify(parsed, {kid: private.public_key()}) == (payload, [kid])


def test_securesystemslib_tampered_envelope_fails_with_ours(repo: git.Repo) -> None:
    payload = statement_payload(repo)
    private, kid, env = sslib_signed(payload)
    keys = {kid: private.public_key()}
    changed = payload.replace(b'"tensors":660', b'"tensors":661')
    for bad in (with_payload(env, changed), with_flipped_sig(env)):
        with pytest.raises(VerificationError, match="DSSE: invalid signature"):
            dsse.verify(dsse.parse_envelope(json.dumps(bad).encode()), keys)


@pytest.fixture
def ledger_db(db_url: str, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    ok(run(capsys, "init", "--db", db_url))
    return db_url


def size_of(db: str) -> int:
    store = Store.open(db)
    try:
        return store.size()
    finally:
        store.engine.dispose()


def test_ledger_records_a_securesystemslib_envelope(
    ledger_db: str, repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ledger_db
    payload = statement_payload(repo)
    private, kid, env = sslib_signed(payload)
    pem = tmp_path / "harness.pub.pem"
    pem.write_bytes(public_pem(private.public_key()))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(env))
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(with_payload(env, payload.replace(b"660", b"661"))))

    # Not yet registered, then registered with the wrong role: refused, nothing written.
    r = run(capsys, "record", str(good), "--db", db)
    assert (r.code, r.err) == (1, f"ledger: signed by unknown key {kid[:16]}\n")
    add = ("keys", "add", str(pem), "--name", "harness", "--role", "runner", "--host", "ci")
    ok(run(capsys, *add, "--db", db))
    before = size_of(db)
    r = run(capsys, "record", str(tampered), "--db", db)
    assert (r.code, r.err) == (1, f"ledger: DSSE: invalid signature by key {kid[:16]}\n")
    assert size_of(db) == before

    r = ok(run(capsys, "record", str(good), "--db", db))
    rid = receipt_id(payload)
    assert r.out == f"{rid} recorded as entry {before}\n"
    shown = json.loads(ok(run(capsys, "show", rid, "--db", db, "--json")).out)
    assert shown["signer"] == {"keyid": kid, "name": "harness", "role": "runner"}
    assert shown["statement"]["predicate"]["reason"].startswith("arms ran on different GPUs — ")
    again = ok(run(capsys, "record", str(good), "--db", db))
    assert again.out == f"{rid} already recorded (no change)\n"
    ok(run(capsys, "audit", "--db", db))


def test_ledger_refuses_a_securesystemslib_envelope_from_a_reviewer_key(
    ledger_db: str, repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, _, env = sslib_signed(statement_payload(repo))
    pem = tmp_path / "k.pub.pem"
    pem.write_bytes(public_pem(private.public_key()))
    ledger(capsys, "keys add --name alice --role reviewer", str(pem), "--db", ledger_db)
    f = tmp_path / "env.json"
    f.write_text(json.dumps(env))
    r = run(capsys, "record", str(f), "--db", ledger_db)
    assert r.code == 1
    assert r.err == (
        "ledger: key alice has role reviewer; a receipt must be signed by a runner key\n"
    )


# --- named known-bad envelopes ------------------------------------------------------------

KNOWN_BAD = {
    "envelope-payload-tampered.json": "DSSE: invalid signature by key",
    "envelope-signature-tampered.json": "DSSE: invalid signature by key",
    "envelope-unknown-key.json": "signed by unknown key",
    "envelope-duplicate-keyid.json": "duplicate signature key id",
    "envelope-wrong-payload-type.json": "wrong payloadType 'text/plain'",
    "envelope-no-signatures.json": "malformed DSSE envelope: signatures:",
    "envelope-bad-base64.json": "bad base64 in payload",
    # DSSE allows URL-safe base64; we accept only the standard alphabet
    # (securesystemslib accepts both: see the test below).
    "envelope-urlsafe-base64.json": "bad base64 in payload",
    "envelope-float-bytes.json": "predicted_bytes must be an exact integer",
    "envelope-failed-without-reason.json": "outcome 'failed' needs a reason",
    "envelope-review-by-runner-key.json": "a review must be signed by a reviewer key",
    "envelope-not-json.json": "malformed JSON",
}


def test_fixtures_are_all_named() -> None:
    names = {p.name for p in FIXTURES.glob("envelope-*.json")}
    assert names == {*KNOWN_BAD, "envelope-good.json"}


def test_known_bad_envelopes_are_refused(
    ledger_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ledger_db
    pem = str(FIXTURES / "fixture-runner.pub.pem")
    ledger(capsys, "keys add --name fixture-runner --role runner --host ci", pem, "--db", db)
    before = size_of(db)
    for name, reason in KNOWN_BAD.items():
        r = run(capsys, "record", str(FIXTURES / name), "--db", db)
        assert r.code == 1, (name, r.out)
        assert r.err.startswith("ledger: ") and r.err.count("\n") == 1, (name, r.err)
        assert reason in r.err, (name, r.err)
    # A bad input among good ones: all or nothing.
    good, bad = FIXTURES / "envelope-good.json", FIXTURES / "envelope-payload-tampered.json"
    r = run(capsys, "record", str(good), str(bad), "--db", db)
    assert r.code == 1
    assert r.err.startswith("ledger: input 2: DSSE: invalid signature by key")
    assert size_of(db) == before

    ok(run(capsys, "record", str(FIXTURES / "envelope-good.json"), "--db", db))
    assert size_of(db) == before + 1
    ok(run(capsys, "audit", "--db", db))


def test_known_bad_envelopes_in_the_library() -> None:
    """The same refusals from the library functions, typed."""
    public = load_public_pem((FIXTURES / "fixture-runner.pub.pem").read_bytes())
    keys = {key_id(public): public}

    def check(name: str) -> tuple[bytes, list[str]]:
        return dsse.verify(dsse.parse_envelope((FIXTURES / name).read_bytes()), keys)

    payload, accepted = check("envelope-good.json")
    assert accepted == [key_id(public)]
    for name in (
        "envelope-payload-tampered.json",
        "envelope-signature-tampered.json",
        "envelope-unknown-key.json",
        "envelope-duplicate-keyid.json",
    ):
        with pytest.raises(VerificationError):
            check(name)
    for name in (
        "envelope-wrong-payload-type.json",
        "envelope-no-signatures.json",
        "envelope-bad-base64.json",
        "envelope-not-json.json",
    ):
        with pytest.raises(RefusedError):
            check(name)
    assert receipt_id(payload).startswith("sha256:")


def test_known_bad_envelopes_with_securesystemslib() -> None:
    """securesystemslib agrees on every signature-level fixture; it checks no
    payload type or statement, and it also accepts URL-safe base64."""
    public = load_public_pem((FIXTURES / "fixture-runner.pub.pem").read_bytes())
    key = sslib_key(public)

    def load(name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((FIXTURES / name).read_bytes())
        return data

    for name in (
        "envelope-good.json",
        "envelope-wrong-payload-type.json",
        "envelope-float-bytes.json",
        "envelope-urlsafe-base64.json",
    ):
        assert list(sslib_verify(load(name), key)) == [key.keyid], name
    for name in (
        "envelope-payload-tampered.json",
        "envelope-signature-tampered.json",
        "envelope-unknown-key.json",
    ):
        with pytest.raises(sslib_errors.VerificationError):
            sslib_verify(load(name), key)
    with pytest.raises(ValueError, match="Multiple signatures"):
        sslib_verify(load("envelope-duplicate-keyid.json"), key)
