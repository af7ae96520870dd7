"""Export a bundle and verify it offline: anchors, no database, and one changed byte anywhere."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import git
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import VerificationError
from ledger.evidence.keys import load_public_pem, public_pem
from ledger.verify import verify_bundle
from tests.ledger.helpers import Run, run

HEX = "0123456789abcdef"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def ok(r: Run) -> Run:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


def ledger(capsys: pytest.CaptureFixture[str], words: str, *args: str) -> Run:
    """`ledger WORDS ARGS...` (WORDS split on spaces), which must exit 0."""
    return ok(run(capsys, *words.split(), *args))


@dataclass(frozen=True, slots=True)
class Exported:
    db: str
    keys: Path
    repo: Path
    id: str
    bundle: Path


@pytest.fixture
def exported(
    db_url: str,
    key_dir: Path,
    repo: git.Repo,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Exported:
    """A ledger with one receipt about the repo's commit, reviewed, exported as a bundle."""
    repo_dir = Path(repo.working_tree_dir or ".")
    db = ("--db", db_url)
    ledger(capsys, "init", *db)
    ledger(capsys, "keys new runner --role runner", *db)
    ledger(capsys, "keys new reviewer --role reviewer", *db)
    attest = "attest --unplanned --claim admission.no-oom-after-admit --rev HEAD --outcome passed"
    scope = "--scope device_kind=cpu --scope gpu_count=0 --key runner"
    rid = ledger(capsys, f"{attest} {scope}", "--repo", str(repo_dir), *db).out.strip()
    ledger(capsys, "review", rid, "--concur", "--note", "reran it", "--key", "reviewer", *db)
    bundle = tmp_path / "receipt.bundle.json"
    ledger(capsys, "export", rid, "-o", str(bundle), *db)
    return Exported(db_url, key_dir, repo_dir, rid, bundle)


def verify(capsys: pytest.CaptureFixture[str], bundle: Path, *trust: Path) -> Run:
    args = ["verify", str(bundle)]
    for t in trust:
        args += ["--trust", str(t)]
    return run(capsys, *args)


def assert_refused(r: Run) -> None:
    """Exit 1 with one line on stderr that says what failed."""
    assert r.code == 1, f"exit {r.code}: {r.out} {r.err}"
    assert r.err.startswith("ledger: bundle: ")
    assert r.err.count("\n") == 1, r.err


def other(byte: int) -> int:
    """A different printable byte of the same kind where there is one.

    Hex stays hex and base64 stays base64, so most changes keep the JSON valid
    and reach the hash, proof and signature checks instead of the parser.
    """
    c = chr(byte)
    if c in HEX:
        return ord(HEX[(HEX.index(c) + 1) % len(HEX)])
    if c in B64:
        return ord(B64[(B64.index(c) + 1) % len(B64)])
    if 0x20 <= byte < 0x7E:
        return byte + 1
    return ord("-")


def flipped(raw: bytes, i: int) -> bytes:
    return raw[:i] + bytes([other(raw[i])]) + raw[i + 1 :]


def sweep(
    capsys: pytest.CaptureFixture[str], raw: bytes, where: Path, trust: Path
) -> tuple[list[int], list[str]]:
    """Verify the bundle with each byte changed in turn; return (positions that
    passed, one-line reasons of the failures)."""
    passed: list[int] = []
    reasons: list[str] = []
    for i in range(len(raw)):
        where.write_bytes(flipped(raw, i))
        r = verify(capsys, where, trust)
        if r.code == 0:
            passed.append(i)
            continue
        assert_refused(r)
        reasons.append(r.err)
    return passed, reasons


# --- verifying what was exported --------------------------------------------------------


def test_verifies_offline_with_the_ledger_key(
    exported: Exported,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    absent = tmp_path / "absent" / "ledger.db"
    monkeypatch.setenv("LEDGER_DB", str(absent))
    private = exported.keys / "ledger.pem"
    public = tmp_path / "ledger.pub.pem"
    public.write_bytes(public_pem(load_public_pem(private.read_bytes())))

    for trust in (private, public):
        r = ok(verify(capsys, exported.bundle, trust))
        assert r.out.startswith(f"verified {exported.id}\n")
        assert "anchor: ledger key ledger" in r.out

    doc = json.loads(
        ledger(capsys, "verify --json", str(exported.bundle), "--trust", str(public)).out
    )
    assert doc["verified"] is True
    assert doc["id"] == exported.id
    assert doc["kind"] == "receipt"
    assert doc["claim"] == "admission.no-oom-after-admit"
    assert doc["outcome"] == "passed"
    assert doc["anchor"].startswith("ledger key ledger (")
    assert doc["log"]["size"] == 5  # three keys, the receipt, the review
    assert [(rv["verdict"], rv["note"]) for rv in doc["reviews"]] == [("concur", "reran it")]
    assert not absent.exists() and not absent.parent.exists()

    bundle = json.loads(exported.bundle.read_bytes())
    payload = base64.b64decode(json.loads(bundle["entry"]["body"])["payload"])
    [subject] = json.loads(payload)["subject"]
    head = git.Repo(exported.repo).head.commit
    assert subject["digest"] == {"gitCommit": head.hexsha, "gitTree": head.tree.hexsha}


def test_signer_key_is_an_anchor(exported: Exported, capsys: pytest.CaptureFixture[str]) -> None:
    r = ok(verify(capsys, exported.bundle, exported.keys / "runner.pem"))
    assert "anchor: signer runner (" in r.out


def test_unrelated_key_is_no_anchor(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    r = verify(capsys, exported.bundle, stranger)
    assert_refused(r)
    assert "neither the checkpoint's ledger key nor the signer is in --trust" in r.err
    # The reviewer signed something in the bundle, but a review is no anchor for the receipt.
    assert_refused(verify(capsys, exported.bundle, exported.keys / "reviewer.pem"))


def test_no_trust_is_a_usage_error(exported: Exported, capsys: pytest.CaptureFixture[str]) -> None:
    r = verify(capsys, exported.bundle)
    assert r.code == 2
    assert r.err == "ledger: offline verification needs at least one --trust PEM\n"


# --- one changed byte --------------------------------------------------------------------


def test_any_changed_byte_fails_against_the_ledger_key(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every byte position, each replaced by another printable byte of its kind.

    The canonical-form check makes any change visible as a change of the parsed
    document; each field is then covered by a proof, the root or the signature.
    """
    raw = exported.bundle.read_bytes()
    passed, reasons = sweep(capsys, raw, tmp_path / "flipped.json", exported.keys / "ledger.pem")
    assert passed == [], [raw[max(i - 20, 0) : i + 5] for i in passed[:5]]
    assert len(reasons) == len(raw)
    # The sweep reached every kind of check, not only the JSON parser.
    seen = "".join(reasons)
    for reason in (
        "not JSON",
        "checkpoint:",
        "entry is not in the checkpointed log",
        "reviews[0] is not in the checkpointed log",
        "keys[2] is not in the checkpointed log",
        "does not match the payload's digest",
        "missing or malformed field",
    ):
        assert reason in seen, reason


def checkpoint_unsigned_span(raw: bytes) -> set[int]:
    """Byte positions of the checkpoint's origin and signature line in the bundle."""
    note = json.loads(raw)["checkpoint"]
    origin, _, rest = note.partition("\n")
    sig_line = rest.split("\n\n", 1)[1]
    spans: set[int] = set()
    for part in (origin, sig_line.rstrip("\n")):
        enc = json.dumps(part, ensure_ascii=False)[1:-1].encode()
        start = raw.index(enc)
        spans.update(range(start, start + len(enc)))
    return spans


def test_changed_bytes_against_the_signer_key_stay_in_the_checkpoint_note(
    exported: Exported,
) -> None:
    """Trusting the signer instead of the ledger key covers the receipt, the
    reviews, the keys, the proofs, the root and the size: no change there
    passes. Only the checkpoint's origin and signature line go unchecked (see
    the next test). Through the library: the CLI's side is the sweep above."""
    raw = exported.bundle.read_bytes()
    signer = load_public_pem((exported.keys / "runner.pem").read_bytes())
    passed = []
    for i in range(len(raw)):
        try:
            verify_bundle(flipped(raw, i), [signer])
        except VerificationError:
            continue
        passed.append(i)
    assert set(passed) <= checkpoint_unsigned_span(raw)


def test_checkpoint_signature_is_checked_whatever_the_anchor(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checkpoint must hold under the bundle's own ledger key entry even
    when the trust anchor is the receipt's signer."""
    raw = exported.bundle.read_bytes()
    doc = json.loads(raw)
    sig_at = doc["checkpoint"].index(" ", doc["checkpoint"].index("\n\n— ") + 4) + 1 + 10
    note = doc["checkpoint"]
    doc["checkpoint"] = note[:sig_at] + chr(other(ord(note[sig_at]))) + note[sig_at + 1 :]
    broken = tmp_path / "broken-signature.json"
    broken.write_bytes(canonical_bytes(doc))

    r = verify(capsys, broken, exported.keys / "ledger.pem")
    assert_refused(r)
    assert "checkpoint:" in r.err
    r = verify(capsys, broken, exported.keys / "runner.pem")
    assert_refused(r)
    assert "checkpoint:" in r.err


# --- what a bundle does not bind -----------------------------------------------------------


def dispute(capsys: pytest.CaptureFixture[str], exported: Exported) -> None:
    """A second reviewer disputes the receipt."""
    db = ("--db", exported.db)
    ledger(capsys, "keys new skeptic --role reviewer", *db)
    ledger(capsys, f"review {exported.id} --dispute --key skeptic", "--note", "OOM on rerun", *db)


def verdicts(capsys: pytest.CaptureFixture[str], bundle: Path, trust: Path) -> list[str]:
    doc = json.loads(ledger(capsys, "verify --json", str(bundle), "--trust", str(trust)).out)
    return [rv["verdict"] for rv in doc["reviews"]]


def test_dropping_a_review_is_not_detected(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Current behaviour, a known gap: the checkpoint proves each included
    review is in the log, but nothing binds the list of reviews to be complete.
    An exporter can drop a dispute, re-canonicalize, and the bundle still
    verifies against the ledger key, reporting only the concurring review.
    (Edited without re-canonicalizing, the file fails the canonical-form check.)"""
    dispute(capsys, exported)
    ledger(capsys, "log checkpoint --db", exported.db)
    full = tmp_path / "full.json"
    ledger(capsys, "export", exported.id, "-o", str(full), "--db", exported.db)
    trust = exported.keys / "ledger.pem"
    assert verdicts(capsys, full, trust) == ["concur", "dispute"]

    doc = json.loads(full.read_bytes())
    doc["reviews"] = doc["reviews"][:1]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    r = verify(capsys, edited, trust)
    assert_refused(r)
    assert "not in canonical form" in r.err

    dropped = tmp_path / "dropped.json"
    dropped.write_bytes(canonical_bytes(doc))
    assert verdicts(capsys, dropped, trust) == ["concur"]


def test_export_covers_reviews_newer_than_the_checkpoint(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review logged after the newest checkpoint (here a dispute) makes
    export sign a fresh checkpoint, so the bundle carries it."""
    dispute(capsys, exported)
    trust = exported.keys / "ledger.pem"
    again = tmp_path / "again.json"
    ledger(capsys, "export", exported.id, "-o", str(again), "--db", exported.db)
    assert verdicts(capsys, again, trust) == ["concur", "dispute"]


def test_signer_anchor_accepts_reviews_from_another_log(
    exported: Exported,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Trusting only the signer, the log that holds the reviews is not vouched
    for: anyone can log the genuine receipt in a ledger of their own and add
    reviews by keys of their own. The receipt verifies; those reviews are
    shown apart as unanchored and never as reviews. The ledger key refuses it."""
    doc = json.loads(exported.bundle.read_bytes())
    envelope = tmp_path / "envelope.json"
    envelope.write_text(doc["entry"]["body"])
    runner_pub = tmp_path / "runner.pub.pem"
    runner_pub.write_bytes(public_pem(load_public_pem((exported.keys / "runner.pem").read_bytes())))

    monkeypatch.setenv("LEDGER_KEYS", str(tmp_path / "other-keys"))
    db = ("--db", f"sqlite:///{tmp_path / 'other.db'}")
    ledger(capsys, "init", *db)
    add = ("keys add", str(runner_pub), "--name", "runner", "--role", "runner")
    ledger(capsys, *add, "--host", "gpu-host", *db)
    ledger(capsys, "record", str(envelope), *db)
    ledger(capsys, "keys new sockpuppet --role reviewer", *db)
    ledger(capsys, f"review {exported.id} --concur --key sockpuppet", "--note", "looks great", *db)
    forged = tmp_path / "forged.json"
    ledger(capsys, "export", exported.id, "-o", str(forged), *db)

    runner = str(exported.keys / "runner.pem")
    shown = json.loads(ledger(capsys, "verify --json", str(forged), "--trust", runner).out)
    assert shown["anchor"].startswith("signer runner (")
    assert shown["reviews"] == []
    assert [rv["note"] for rv in shown["unanchored_reviews"]] == ["looks great"]
    assert_refused(verify(capsys, forged, exported.keys / "ledger.pem"))


def test_a_receipt_in_the_reviews_slot_is_refused(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every entry in the list is in the log, but a receipt is no review: a
    one-line refusal, not a crash."""
    doc = json.loads(exported.bundle.read_bytes())
    doc["reviews"] = [doc["entry"]]
    swapped = tmp_path / "swapped.json"
    swapped.write_bytes(canonical_bytes(doc))
    r = verify(capsys, swapped, exported.keys / "ledger.pem")
    assert_refused(r)
    assert "reviews[0] is not a review" in r.err
