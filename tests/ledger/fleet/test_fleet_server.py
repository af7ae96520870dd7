"""The fleet through the server: `GET /v1/fleet` (the read role), `ledger fleet
--server` (the same report as `ledger fleet` on the server's ledger), and `qualify
--server` skipping a device that the server's ledger records faults of."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ledger.evidence.errors import UsageError
from ledger.evidence.keys import KeyDir
from ledger.remote import client
from ledger.service.auth import new_token
from ledger.service.run import start
from tests.ledger.fleet.conftest import GPU_A, GPU_B
from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo


def test_qualify_through_the_server_skips_a_device_the_servers_fleet_quarantines(
    tmp_path: Path,
    ledger_env: Path,
    key_dir: Path,
    gpus: list[FakeDevice],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GPU 1 has a row remap pending: a fault no code causes, in every snapshot; the
    # first run records it in the ledger the server then serves.
    gpus[1].readings["remapped"] = (0, 0, 1, 0)
    repo = make_probe_repo(tmp_path / "repo", "".join(claim(f"c{i}") for i in range(4)))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--json", "--gpus", "all")
    assert run(capsys, *args).code == 0
    local = run(capsys, "fleet", "--json", "--quarantine-above", "0.3")
    local_text = run(capsys, "fleet", "--quarantine-above", "0.3").out
    assert list(json.loads(local.out)["quarantined"]) == [GPU_B]

    tokens = tmp_path / "tokens"
    host = new_token("gpu-host", tokens, ["runner", "read"])
    runner_only = new_token("other-host", tokens, ["runner"])
    srv = start(f"sqlite:///{ledger_env / 'l.db'}", KeyDir(key_dir), tokens=tokens)
    try:
        # The route needs the read role.
        with pytest.raises(UsageError, match="lacks the 'read' role"):
            client.fetch_fleet(srv.url, token=runner_only)
        with pytest.raises(UsageError, match="needs a token"):
            client.fetch_fleet(srv.url, token="")
        with pytest.raises(UsageError, match="unknown token"):
            client.fetch_fleet(srv.url, token="not-a-token")

        # `ledger fleet --server` says what `ledger fleet` says of the same ledger.
        monkeypatch.setenv("LEDGER_TOKEN", host)
        on = ("fleet", "--server", srv.url, "--quarantine-above", "0.3")
        r = run(capsys, *on, "--json")
        assert r.code == 0, r.err
        assert json.loads(r.out) == json.loads(local.out)
        assert run(capsys, *on).out == local_text
        r = run(capsys, *on[:3], "--json", "--token", runner_only)
        assert r.code != 0 and "lacks the 'read' role" in r.err
        # Its page, for a person: the same figures, the quarantined device marked; the
        # read role as for the route.
        page = f"{srv.url}/fleet?quarantine_above=0.3"
        html = {"Accept": "text/html"}
        got = httpx.get(page, headers={**html, "Authorization": f"Bearer {host}"})
        assert got.status_code == 200, got.text
        assert (
            f'<tr data-state="quarantined">\n<td data-label="uuid"><code>{GPU_B}</code>' in got.text
        )
        assert got.text.count("<strong>quarantined</strong>") == 1
        bare = httpx.get(page, headers=html)
        assert bare.status_code == 401 and "bearer token" in bare.text
        other = httpx.get(page, headers={**html, "Authorization": f"Bearer {runner_only}"})
        assert other.status_code == 403 and "lacks the &#39;read&#39; role" in other.text

        # qualify --server reads the server's fleet once and skips GPU 1, naming it
        # with the figure and the bound that decided.
        monkeypatch.setenv("LEDGER_QUARANTINE_ABOVE", "0.3")
        r = run(capsys, *args, "--server", srv.url)
        assert r.code == 0, r.err
        assert f"gpu 1 ({GPU_B}) quarantined: fault rate >= 0.342 > 0.3: skipped" in r.err
        assert "not applied" not in r.err
        ids = [x["id"] for x in json.loads(r.out)["receipts"]]
        assert len(ids) == 4
        for rid in ids:
            entry = client.fetch_entry(srv.url, rid)
            pred = entry["statement"]["predicate"] if "statement" in entry else entry
            assert pred["runner"]["gpu_uuids"] == [GPU_A], pred["runner"]
            # Recorded in every receipt of the run, as it was said.
            env = pred["runner"]["environment"]
            assert env["quarantine_skipped"] == (
                f"gpu 1 ({GPU_B}) quarantined: fault rate >= 0.342 > 0.3: skipped"
            )

        # A token without the read role: the run says quarantine was not applied.
        monkeypatch.setenv("LEDGER_TOKEN", runner_only)
        r = run(capsys, *args, "--server", srv.url, "--claim", "c0")
        assert r.code == 0, r.err
        assert "quarantine: the server's fleet could not be read" in r.err
        assert "lacks the 'read' role" in r.err and "not applied" in r.err
        [rid] = [x["id"] for x in json.loads(r.out)["receipts"]]
        entry = client.fetch_entry(srv.url, rid)
        pred = entry["statement"]["predicate"] if "statement" in entry else entry
        assert "not applied" in pred["runner"]["environment"]["quarantine_not_applied"]
    finally:
        srv.stop()
