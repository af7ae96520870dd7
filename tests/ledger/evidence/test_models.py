"""Models: schemas stay in sync, predicates enforce their rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ledger.evidence.models import Cleanup, QualificationPredicate
from ledger.evidence.schemas import ROOT, SCHEMAS, render
from tests.ledger.factories import predicate_dict


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_checked_in_schema_matches_model(name: str) -> None:
    path = ROOT / name
    assert path.is_file(), f"{path} missing: run python -m ledger.evidence.schemas"
    assert path.read_text() == render(SCHEMAS[name]), (
        f"{name} drifted from its model: run python -m ledger.evidence.schemas"
    )


def test_no_stray_schema_files() -> None:
    assert sorted(p.name for p in Path(ROOT).glob("*.json")) == sorted(SCHEMAS)


def test_predicate_round_trip() -> None:
    p = QualificationPredicate.model_validate(predicate_dict())
    assert p.outcome == "passed"
    with pytest.raises(ValidationError):
        p.claim = "other"  # type: ignore[misc]  # frozen


def test_non_passed_outcome_needs_reason() -> None:
    with pytest.raises(ValidationError, match="needs a reason"):
        QualificationPredicate.model_validate(predicate_dict(outcome="failed"))
    QualificationPredicate.model_validate(predicate_dict(outcome="failed", reason="OOM at 4 GiB"))


@pytest.mark.parametrize("key", ["peak_bytes", "wall_ns", "bytes"])
def test_bytes_and_ns_must_be_exact_integers(key: str) -> None:
    with pytest.raises(ValidationError, match="exact integer"):
        QualificationPredicate.model_validate(predicate_dict(measurements={key: 1.5}))
    nested = {"shapes": [{key: 2.0}]}
    with pytest.raises(ValidationError, match="exact integer"):
        QualificationPredicate.model_validate(predicate_dict(measurements=nested))
    QualificationPredicate.model_validate(predicate_dict(measurements={key: 3, "ratio": 0.5}))


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        QualificationPredicate.model_validate(predicate_dict(extra_field=1))


def test_cleanup_complete_needs_every_resource_released() -> None:
    with pytest.raises(ValidationError, match="not released"):
        Cleanup.model_validate(
            {"complete": True, "resources": [{"kind": "process", "id": "12", "released": False}]}
        )
