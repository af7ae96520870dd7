"""The parent checks a claim process's result document strictly: data, never trusted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.outputs.beneath import Folder, Refused
from runners.contract.result import Artifact, ResultError, check_result, infra_error


def _doc(**changes: Any) -> dict[str, Any]:
    r = infra_error(
        claim="c",
        check="cleanup",
        version="1",
        params={"batch": 2},
        reason="r",
        scope={"device_kind": "cpu", "gpu_count": 0},
        started_ns=1,
        finished_ns=2,
    )
    d: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(r)))
    d.update(changes)
    return d


def test_a_well_formed_result_is_accepted() -> None:
    assert check_result(_doc()).claim == "c"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"signed_by": "me"}, "unknown keys"),
        ({"outcome": "qualified"}, "result.outcome"),
        ({"started_ns": True}, "result.started_ns: must be int"),
        ({"scope": {"workload": False}}, "result.scope.workload"),
        # The runner's own facets are never the claim's to set.
        ({"scope": {"sandbox": "none"}}, "unknown facet 'sandbox'"),
        ({"host": "evil\x1b]52;c;eA==\x07"}, "result.host"),
        ({"measurements": {"harness_phase_times": {"load_ns": 1e300}}}, "exact integer"),
        ({"measurements": {"harness_phase_times": {"load": 1e300}}}, "out of range"),
        ({"measurements": {"harness_phase_times": {"load_ns": -1}}}, "out of range"),
        ({"outcome": "failed", "reason": None}, "needs a reason"),
        ({"measurements": {"n": 1 << 64}}, "64-bit"),
        ({"measurements": {"\u202eevil": 1}}, "not printable"),
        ({"measurements": {"peak": float("nan")}}, "result.measurements.peak"),
        ({"cleanup": {"complete": "yes", "resources": [], "tolerance_bytes": 0}}, "complete"),
        ({"observer": "maybe"}, "result.observer"),
    ],
)
def test_anything_else_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ResultError, match=message):
        check_result(_doc(**change))


def test_artifacts_must_name_paths_inside_the_artifact_folder(tmp_path: Path) -> None:
    art = tmp_path / "artifacts"
    art.mkdir()
    (art / "ok.log").write_text("fine")
    secret = tmp_path / "runner.pem"
    secret.write_text("PRIVATE")
    (art / "link.log").symlink_to(secret)

    def with_artifact(path: Path) -> dict[str, Any]:
        return _doc(artifacts=[dataclasses.asdict(Artifact(name="a", path=str(path)))])

    assert check_result(with_artifact(art / "ok.log"), artifact_dir=art).artifacts
    for bad in (secret, art / ".." / "runner.pem", art, Path("ok.log")):
        with pytest.raises(ResultError, match="artifacts"):
            check_result(with_artifact(bad), artifact_dir=art)
    # A path inside names no more than a place: what lies there is decided when the
    # parent opens it beneath the folder (a link is refused, never followed).
    assert check_result(with_artifact(art / "link.log"), artifact_dir=art).artifacts
    with Folder(art) as folder:
        assert folder.read("ok.log", 100) == b"fine"
        with pytest.raises(Refused, match="symbolic link"):
            folder.read("link.log", 100)
