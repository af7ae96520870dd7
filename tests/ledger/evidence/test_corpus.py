"""The frozen corpus (tests/corpus/): bundles, tlog-proofs and checkpoints
written by earlier releases and today's, each verified offline with the
verdict its manifest names. A later release that changes a verdict breaks
a promise to whoever holds the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger._internal.checkpoint import verify_by_key
from ledger.evidence.errors import Error
from ledger.evidence.keys import load_public_pem
from ledger.transparency.policy import parse_policy
from ledger.transparency.proof import verify_proof
from tests.ledger.helpers import run

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
CASES: list[dict[str, Any]] = json.loads((CORPUS / "manifest.json").read_text())


def _name(case: dict[str, Any]) -> str:
    extra = "+policy" if case.get("policy") else ""
    return f"{case['file']}{extra}:{case['expect']}"


def _verdict(case: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    f = CORPUS / case["file"]
    if case["kind"] == "bundle":
        args = ["verify", str(f)]
        for t in case.get("trust", []):
            args += ["--trust", str(CORPUS / t)]
        if case.get("policy"):
            args += ["--policy", str(CORPUS / case["policy"])]
        r = run(capsys, *args)
        assert r.code in (0, 1), r.err
        assert r.code == 0 or r.err.count("\n") == 1, r.err
        return r.code == 0, r.err
    try:
        if case["kind"] == "tlog-proof":
            body = json.loads((CORPUS / case["entry"]).read_bytes())["entry"]["body"].encode()
            verify_proof(f.read_bytes(), body, parse_policy((CORPUS / case["policy"]).read_bytes()))
        elif case["kind"] == "checkpoint":
            note = f.read_bytes()
            for t in case.get("trust", []):
                verify_by_key(note, load_public_pem((CORPUS / t).read_bytes()))
            if case.get("policy"):
                parse_policy((CORPUS / case["policy"]).read_bytes()).check(note)
        else:
            raise AssertionError(f"unknown kind {case['kind']}")
    except Error as e:
        return False, e.reason()
    return True, ""


def test_the_manifest_names_every_file_and_both_verdicts() -> None:
    named = {c["file"] for c in CASES} | {
        c[k] for c in CASES for k in ("entry", "policy") if c.get(k)
    }
    named |= {t for c in CASES for t in c.get("trust", [])}
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()}
    assert files - named == {"make.py", "manifest.json"}
    assert {c["expect"] for c in CASES} == {"verified", "refused"}


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_corpus_case_keeps_its_verdict(
    case: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    verified, reason = _verdict(case, capsys)
    assert verified == (case["expect"] == "verified"), reason
    if not verified:
        assert case["reason"] in reason, reason
