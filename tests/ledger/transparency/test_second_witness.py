"""The ledger against a second implementation of the C2SP specs that this project
did not write: aics-witness (tlog-witness) and aics-tlog (signed-note,
tlog-checkpoint, tlog-cosignature, RFC 9162 proofs), from the package index,
each in its default configuration, beside the project's own witness.

They need Python >= 3.12 and the project runs on 3.11, so they live in their own
environment (`.c2sp-venv`, made by `install_second_c2sp` in .ci/lib.sh, or
$LEDGER_TEST_C2SP_PYTHON) and run as processes of their own: the witness as the
server it is, the verifier as a script (second_verify.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger._internal import merkle
from ledger._internal.checkpoint import parse_checkpoint, sign_checkpoint
from ledger.evidence.keys import KeyDir
from ledger.transparency.checkpoints import origin
from tests.ledger.helpers import run
from tests.ledger.transparency.conftest import Ledger, Witnesses, ok
from tests.ledger.transparency.test_policy import _fork

ROOT = Path(__file__).resolve().parents[3]
VERIFY = Path(__file__).with_name("second_verify.py")


def _second_python() -> str:
    """An interpreter that imports aics_witness and aics_tlog; skip (fail under CI)
    when there is none."""
    for python in (
        os.environ.get("LEDGER_TEST_C2SP_PYTHON"),
        str(ROOT / ".c2sp-venv" / "bin" / "python"),
        sys.executable,
    ):
        if python and Path(python).exists():
            probe = [python, "-c", "import aics_witness, aics_tlog"]
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return python
    reason = (
        "no Python with aics-witness and aics-tlog (they need 3.12): "
        "`. .ci/lib.sh && install_second_c2sp` makes .c2sp-venv"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def second_python() -> str:
    return _second_python()


class SecondWitness:
    """An aics-witness process, configured only by its own `init` and `add-log`."""

    def __init__(self, python: str, home: Path, name: str, log_vkey: str) -> None:
        self.python, self.config = python, str(home / "witness.json")
        init = ["init", "--name", name, "--listen", "127.0.0.1:0"]
        self.vkey = self._cli(*init).splitlines()[0].strip()
        self._cli("add-log", "--origin", log_vkey.split("+")[0], "--vkey", log_vkey)
        self.proc = subprocess.Popen(
            [python, "-m", "aics_witness", "serve", "--config", self.config],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        self.log: list[str] = []
        for line in self.proc.stderr:  # until it says where it listens (or it exits)
            self.log.append(line)
            if " listening on " in line:
                self.url = line.split(" listening on ")[1].split()[0]
                break
        else:
            raise AssertionError(f"aics-witness did not start: {''.join(self.log)}")
        # Its log goes on (one line a request): drained, so the pipe never blocks it.
        threading.Thread(
            target=lambda: self.log.extend(self.proc.stderr or ()), daemon=True
        ).start()

    def _cli(self, *args: str) -> str:
        cmd = [self.python, "-m", "aics_witness", args[0], "--config", self.config, *args[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


@pytest.fixture
def second(ledger: Ledger, second_python: str, tmp_path: Path) -> Iterator[SecondWitness]:
    vkey = ok(ledger("log", "vkey")).out.strip()
    w = SecondWitness(second_python, tmp_path / "aics", "aics.example/witness", vkey)
    yield w
    w.stop()


def _policy(ledger: Ledger, second: SecondWitness, witnesses: Witnesses, quorum: str) -> str:
    """A 2-of-2 policy: the second implementation's witness and the project's own."""
    vkey = ok(ledger("log", "vkey")).out.strip()
    own = witnesses.witness("w2").vkey.text()
    p = ledger.tmp / f"policy-{quorum}.txt"
    p.write_text(
        f"log {vkey}\n"
        f"witness aics {second.vkey} {second.url}\n"
        f"witness w2 {own} {witnesses.urls['w2']}\n"
        "group both all aics w2\n"
        f"quorum {quorum}\n"
    )
    return str(p)


def _second_verify(
    python: str, proof: Path, body: bytes, log_vkey: str, quorum: int, vkeys: list[str]
) -> dict[str, object]:
    body_file = proof.with_suffix(".body")
    body_file.write_bytes(body)
    cmd = [python, str(VERIFY), str(proof), str(body_file), log_vkey, str(quorum), *vkeys]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_default_tlog_witness_cosigns_and_a_second_verifier_accepts_a_receipt(
    ledger: Ledger, witnesses: Witnesses, second: SecondWitness, second_python: str
) -> None:
    policy = _policy(ledger, second, witnesses, "both")
    ledger.record(2)
    first = ok(ledger("log", "checkpoint", "--witnesses", policy))
    assert "witness aics: cosigned" in first.err and "witness w2: cosigned" in first.err
    assert parse_checkpoint(first.out.encode()).extensions == ()
    # The log grows: the second witness checks the ledger's consistency proof.
    [rid] = ledger.record(1)
    grown = ok(ledger("log", "checkpoint", "--witnesses", policy))
    assert "witness aics: cosigned" in grown.err and "witness w2: cosigned" in grown.err
    bundle = ledger.tmp / "receipt.json"
    ok(ledger("export", rid, "-o", str(bundle), "--proof"))
    r = run(ledger.capsys, "verify", str(bundle), "--policy", policy)
    assert r.code == 0 and "cosigned by aics, w2" in r.out, r.err
    # The second verifier: the 2-of-2 quorum over the checkpoint, and the receipt's
    # inclusion by its .tlog-proof.
    log_vkey = ok(ledger("log", "vkey")).out.strip()
    vkeys = [second.vkey, witnesses.witness("w2").vkey.text()]
    body = json.loads(bundle.read_text())["entry"]["body"].encode()
    proof = bundle.with_suffix(".tlog-proof")
    result = _second_verify(second_python, proof, body, log_vkey, 2, vkeys)
    assert result["ok"] is True, result
    assert result["witnesses"] == ["aics.example/witness", "w2.example/witness"]
    # A body the log never held is refused by it.
    wrong = _second_verify(second_python, proof, body + b" ", log_vkey, 2, vkeys)
    assert wrong["ok"] is False and "inclusion" in str(wrong["error"])
    # And one cosignature short of the quorum.
    short = _second_verify(second_python, proof, body, log_vkey, 2, [vkeys[0], _stranger()])
    assert short["ok"] is False and "quorum not met" in str(short["error"])


def _stranger() -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ledger.transparency.vkey import WITNESS_ED25519, VKey

    return VKey(
        "stranger.example/w", WITNESS_ED25519, Ed25519PrivateKey.generate().public_key()
    ).text()


def test_a_fork_refused_by_both_witnesses_fails_the_checkpoint(
    ledger: Ledger, witnesses: Witnesses, second: SecondWitness, tmp_path: Path
) -> None:
    policy = _policy(ledger, second, witnesses, "both")
    ledger.record(2)
    ok(ledger("log", "checkpoint", "--witnesses", policy))
    fork = _fork(ledger, tmp_path)
    ledger.record(1)
    ok(ledger("log", "checkpoint", "--witnesses", policy))
    # Another history at the same size: the second witness answers 422, the project's 409.
    fork.record(1)
    r = fork("log", "checkpoint", "--witnesses", policy)
    assert "witness aics: HTTP 422" in r.err and "witness w2: HTTP 409" in r.err
    assert r.code == 1 and r.out == "", r.err
    last = r.err.strip().splitlines()[-1]
    assert "refused the quorum 'both'" in last and "aics (HTTP 422" in last
    assert "w2 (HTTP 409" in last and "suggests a fork" in last
    # `log cosign` asks again, and fails the same way.
    again = fork("log", "cosign", "--witnesses", policy)
    assert again.code == 1 and "suggests a fork" in again.err


def test_a_stored_timestamped_checkpoint_is_served_and_verifies_until_the_log_grows(
    ledger: Ledger, witnesses: Witnesses, second: SecondWitness
) -> None:
    """A checkpoint signed by an earlier release carries a `timestamp` line: it is never
    rewritten, it verifies, and it is what the ledger serves at its size. A default
    tlog-witness refuses it (400), so the policy's quorum is refused; once the log
    grows, the new checkpoint (no extension lines) is cosigned."""
    ledger.record(2)
    store = ledger.store()
    size = store.size()
    root = merkle.root(store.leaf_hashes(upto=size))
    name = origin(store)
    old = sign_checkpoint(
        name,
        size,
        root,
        key_name=name,
        private_key=KeyDir(ledger.keys).load("ledger").private,
        extensions=("timestamp 2026-11-30T12:00:00Z",),
    )
    store.add_checkpoint(size, root.hex(), old.decode())
    store.dispose()
    assert ok(ledger("log", "checkpoint")).out.encode() == old
    policy = _policy(ledger, second, witnesses, "aics")
    refused = ledger("log", "checkpoint", "--witnesses", policy)
    assert refused.code == 1, refused.err
    assert "aics (HTTP 400: bad request: checkpoints of this log carry no extension" in refused.err
    [rid] = ledger.record(1)
    ok(ledger("log", "proof", rid))
    grown = ok(ledger("log", "checkpoint", "--witnesses", policy))
    assert "witness aics: cosigned" in grown.err
    held = ledger.tmp / "old.cp"
    held.write_bytes(old)
    assert ok(ledger("log", "consistency", "--from", str(held))).out.startswith("consistent:")
