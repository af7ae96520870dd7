"""Words for symbols: the empty scope, a CPU environment, a verdict's breakdown
beside "N of M", labelled key output, the server's note on what it judged."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ledger.qualification import format_scope
from ledger.read.humanize import environment_line, state_breakdown
from tests.ledger.helpers import run

CPU = {
    "device_kind": "cpu",
    "gpu_model": "none",
    "gpu_count": 0,
    "gpu_memory_bytes": 0,
    "driver": "none",
    "cuda": "none",
    "torch": "2.13.0+cpu",
}


def test_the_empty_scope_and_a_cpu_host_read_as_words() -> None:
    assert format_scope({}) == "any environment"
    assert environment_line(CPU) == "CPU (no GPU), torch 2.13.0+cpu"
    h200 = {"gpu_model": "NVIDIA H200", "gpu_count": 1, "gpu_memory_bytes": 150121545728}
    assert environment_line(h200) == "NVIDIA H200 x1 (140 GiB)"
    # A CPU run on a CUDA build of torch: the facet is the build's, no device's.
    built = {**CPU, "cuda": "13.0", "torch": "2.13.0+cu130"}
    assert environment_line(built) == "CPU (no GPU), CUDA build 13.0, no device, torch 2.13.0+cu130"


def test_a_verdict_counts_its_required_claims_by_state() -> None:
    claims = [
        {"required": True, "state": s}
        for s in ("qualified", "failed", "not-run", "qualified", "needs-review")
    ] + [{"required": False, "state": "failed"}]
    assert state_breakdown({"claims": claims}) == "1 failed, 1 needs-review, 1 not-run, 2 qualified"


def test_keys_new_labels_what_it_prints(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", f"sqlite:///{tmp_path / 'l.db'}")
    assert run(capsys, "init").code == 0
    r = run(capsys, "keys", "new", "h9", "--role", "runner")
    assert r.code == 0, r.err
    labels = [line.split()[0:2] for line in r.out.splitlines()]
    # A runner key made here speaks for this host, and says so.
    here = f"hosts {socket.gethostname()}"
    assert [" ".join(x) for x in labels] == [
        "name h9",
        "role runner",
        "key id",
        here,
        "private key",
    ]
    assert len(r.out.splitlines()[2].split()[-1]) == 64
