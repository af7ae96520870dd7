"""JSON Schemas generated from the models; `python -m ledger.evidence.schemas` rewrites schemas/."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ledger.evidence.models import (
    Envelope,
    QualificationPredicate,
    QualificationStatement,
    ReviewPredicate,
    ReviewStatement,
)
from ledger.evidence.status import StatusDocument
from ledger.evidence.verification import VerificationReportDoc

__all__ = ["SCHEMAS", "render", "write"]

SCHEMAS: dict[str, type[BaseModel]] = {
    "envelope.schema.json": Envelope,
    "qualification-statement.schema.json": QualificationStatement,
    "qualification-predicate-v1.schema.json": QualificationPredicate,
    "review-statement.schema.json": ReviewStatement,
    "review-predicate-v1.schema.json": ReviewPredicate,
    "verification-report.schema.json": VerificationReportDoc,
    "status.schema.json": StatusDocument,
}

ROOT = Path(__file__).resolve().parents[2] / "schemas"


def render(model: type[BaseModel]) -> str:
    schema: dict[str, Any] = model.model_json_schema(by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write(root: Path = ROOT) -> list[Path]:
    root.mkdir(exist_ok=True)
    out = []
    for name, model in SCHEMAS.items():
        path = root / name
        path.write_text(render(model))
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT):
        print(p)
