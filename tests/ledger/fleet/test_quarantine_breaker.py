"""The quarantine circuit breaker: quarantine never takes more than a share of a
host's or the fleet's devices at once; past it, `qualify --gpus all` reports the
devices above the bound and skips none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ledger.fleet.conftest import GPU_A, GPU_B
from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo


def _ran_on(capsys: pytest.CaptureFixture[str], out: str) -> set[tuple[str, ...]]:
    return {
        tuple(
            json.loads(run(capsys, "show", x["id"], "--json").out)["statement"]["predicate"][
                "runner"
            ]["gpu_uuids"]
        )
        for x in json.loads(out)["receipts"]
    }


def test_the_breaker_reports_instead_of_skipping_past_its_share(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Both GPUs of the host have a row remap pending: a fault no code causes.
    for g in gpus:
        g.readings["remapped"] = (0, 0, 1, 0)
    repo = make_probe_repo(tmp_path / "repo", "".join(claim(f"c{i}") for i in range(4)))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--json", "--gpus", "all")
    assert run(capsys, *args).code == 0
    doc = json.loads(run(capsys, "fleet", "--json", "--quarantine-above", "0.3").out)
    assert set(doc["quarantined"]) == {GPU_A, GPU_B}

    # 2 of 2 of the host's devices is more than the default share (0.5): nothing is
    # skipped, and the run says why, with each device's figure and the bound.
    monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
    r = run(capsys, *args)
    assert r.code == 0, r.err
    assert "quarantine: circuit breaker: 2 of 2 of this host's devices are above the bound" in r.err
    assert "more than the share 0.5 (LEDGER_QUARANTINE_MAX_SHARE)" in r.err
    assert "none skipped" in r.err and ": skipped" not in r.err
    for uuid in (GPU_A, GPU_B):
        assert f"({uuid}) above the quarantine bound: fault rate >= " in r.err
    assert _ran_on(capsys, r.out) == {(GPU_A,), (GPU_B,)}
    for x in json.loads(r.out)["receipts"]:
        pred = json.loads(run(capsys, "show", x["id"], "--json").out)["statement"]["predicate"]
        env = pred["runner"]["environment"]
        assert env["quarantine_breaker"].startswith("quarantine: circuit breaker: 2 of 2")
        assert env["quarantine_reported"].count("above the quarantine bound") == 2

    # A runner that lets quarantine take the whole host gets the refusal it had before.
    monkeypatch.setenv("LEDGER_QUARANTINE_MAX_SHARE", "1")
    r = run(capsys, *args)
    assert r.code == 2 and "every GPU of this host is quarantined" in r.err

    monkeypatch.setenv("LEDGER_QUARANTINE_MAX_SHARE", "0")
    r = run(capsys, *args)
    assert r.code == 2 and "LEDGER_QUARANTINE_MAX_SHARE='0'" in r.err


def test_within_its_share_quarantine_skips_and_below_a_smaller_share_it_reports(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpus[1].readings["remapped"] = (0, 0, 1, 0)
    repo = make_probe_repo(tmp_path / "repo", "".join(claim(f"c{i}") for i in range(4)))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--json", "--gpus", "all")
    assert run(capsys, *args).code == 0
    monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
    # 1 of 2 is within the default share: skipped.
    r = run(capsys, *args)
    assert r.code == 0 and f"({GPU_B}) quarantined: fault rate >= " in r.err
    assert "circuit breaker" not in r.err and _ran_on(capsys, r.out) == {(GPU_A,)}
    # Under a share of 0.4, one device in two is past it: reported, run.
    monkeypatch.setenv("LEDGER_QUARANTINE_MAX_SHARE", "0.4")
    r = run(capsys, *args)
    assert r.code == 0 and "circuit breaker: 1 of 2 of this host's devices" in r.err
    assert _ran_on(capsys, r.out) == {(GPU_A,), (GPU_B,)}
