"""An honest claim keeps its scope: the parent's readings equal what the claim process
computed for itself, the facets earlier releases signed (`runners.authors`)."""

from __future__ import annotations

import json
from pathlib import Path

from runners.device_scripts import scope_parity


def test_the_parent_observes_the_scope_the_claim_process_computes_on_cpu(
    tmp_path: Path,
) -> None:
    rc = scope_parity.main(["--out", str(tmp_path), "--device", "cpu"])
    doc = json.loads((tmp_path / "parity.json").read_text())
    assert rc == 0, doc["differ"]
    assert doc["differ"] == {} and doc["uuids_agree"] and doc["host_agrees"]
    assert doc["parent"]["scope"]["packages_digest"] == doc["claim"]["scope"]["packages_digest"]
    assert not doc["parent_cuda_initialized"]
