"""An honest claim keeps its scope: the parent's readings equal what the claim process
computed for itself, the facets earlier releases signed (`runners.claim.authors`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.device import scope_parity


def test_the_parent_observes_the_scope_the_claim_process_computes_on_cpu(
    tmp_path: Path,
) -> None:
    rc = scope_parity.main(["--out", str(tmp_path), "--device", "cpu"])
    doc = json.loads((tmp_path / "parity.json").read_text())
    assert rc == 0, doc["differ"]
    assert doc["differ"] == {} and doc["uuids_agree"] and doc["host_agrees"]
    assert doc["parent"]["scope"]["packages_digest"] == doc["claim"]["scope"]["packages_digest"]
    assert not doc["parent_cuda_initialized"]


def test_what_the_parent_added_to_its_own_path_is_not_in_the_claims_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived parent (a test worker, a service) may carry path entries no claim
    process starts with; the digest it computes for a claim must not count them."""
    from runners.claim.authors import packages_digest

    before = packages_digest()
    info = tmp_path / "planted-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert packages_digest() == before
