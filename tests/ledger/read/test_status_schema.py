"""`status --json` has a checked-in schema (schemas/status.schema.json): the verdict's
keys, its exit code and each blocker's `attribution.label` among them. The judge's
answers validate against it (and the real ledger's, through every surface, in
tests/ledger/service/test_one_identity_one_judge.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema

from ledger.evidence.schemas import ROOT
from ledger.evidence.status import StatusDocument
from ledger.qualification.evidence import ReceiptEvidence
from ledger.qualification.judge import judge
from ledger.read.subject import with_plan_source
from tests.ledger.qualification.test_one_judge import BASE, HEAD, _gathered, _receipt


def _schema() -> Any:
    return json.loads((ROOT / "status.schema.json").read_text())


def test_the_judges_answers_validate_against_the_schema() -> None:
    def base(commits: Sequence[str], claims: Sequence[str]) -> list[ReceiptEvidence]:
        return [_receipt(2, BASE, "failed")]

    for head, over in (
        ([_receipt(1, HEAD, "failed")], {"base": base}),
        ([_receipt(1, HEAD, "infra-error")], {}),
        ([_receipt(1, HEAD, "passed")], {}),
        ([_receipt(1, HEAD, "passed")], {"plan": None}),
    ):
        doc = with_plan_source(judge(_gathered(head, **over)).to_json(), "recorded")
        jsonschema.validate(doc, _schema())
        got = StatusDocument.model_validate(doc)
        assert got.verdict.exit_code in (0, 1, 3)
    labelled = judge(_gathered([_receipt(1, HEAD, "failed")], base=base)).to_json()
    got = StatusDocument.model_validate(labelled)
    assert [b.attribution.label for b in got.verdict.blockers if b.attribution] == ["base-too"]


def test_the_schema_names_the_label_and_the_exit_code() -> None:
    schema = _schema()
    label = schema["$defs"]["AttributionDoc"]["properties"]["label"]
    assert set(label["enum"]) == {
        "introduced", "base-too", "device-only", "base-unjudged", "no-base",
    }  # fmt: skip
    assert schema["$defs"]["VerdictDoc"]["properties"]["exit_code"]["enum"] == [0, 1, 3]
