"""`ledger qualify`'s exit status end to end: 3 where a GPU fault the code cannot
cause (XID 79, read through a fake NVML) alone kept the revision from qualifying, 1
where the code failed, so a CI retry policy retries the first alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ledger.fleet.fake_nvml import FakeDevice
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo


@pytest.mark.parametrize(("xid", "code"), [(79, 3), (13, 1)])
def test_qualify_exits_3_only_when_infrastructure_alone_blocks(
    xid: int,
    code: int,
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    gpus[0].xids = [xid]  # arrives while the claim on GPU 0 runs
    repo = make_probe_repo(tmp_path / "repo", claim("a.ooms", "oom"))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "all", "--json")
    r = run(capsys, *args)
    assert r.code == code, r.err
    [got] = json.loads(r.out)["receipts"]
    assert got["outcome"] == ("infra-error" if code == 3 else "failed")
    if code == 3:
        assert "nothing was measured: every check ended in infra-error" in r.err


def test_a_passing_claim_beside_an_infra_error_still_exits_3(
    tmp_path: Path,
    ledger_env: Path,
    gpus: list[FakeDevice],
    capsys: pytest.CaptureFixture[str],
) -> None:
    for g in gpus:
        g.xids = [79]  # whichever device the failing claim is given
    repo = make_probe_repo(tmp_path / "repo", claim("a.ooms", "oom") + claim("b.passes"))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "all", "--json")
    r = run(capsys, *args)
    doc = json.loads(r.out)
    assert sorted(x["outcome"] for x in doc["receipts"]) == ["infra-error", "passed"]
    assert r.code == 3, r.err
    assert "not qualified only because of infrastructure" in r.err
    assert doc["status"]["qualified"] is False
