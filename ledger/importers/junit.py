"""pytest's JUnit XML: one receipt per claim over the test cases it selects.

A ``<failure>`` is a counterexample (failed); an ``<error>`` (a fixture or
collection error: the test never reached its assertion) is an infra-error
unless a failure is also there; a ``<skipped>`` test was not run, so a claim
with any skipped test is at best inconclusive; a claim is passed only when
every selected test ran and passed. No selected test at all is inconclusive.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ledger.errors import InputError
from ledger.importers import ClaimMap, Finding

__all__ = ["read"]

_MAX_LISTED = 50


def _cases(path: Path) -> tuple[list[dict[str, Any]], str]:
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as e:
        raise InputError(f"{path.name}: not JUnit XML: {e}") from None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites"):
        raise InputError(f"{path.name}: root element is <{root.tag}>, not <testsuite(s)>")
    host = next((s.get("hostname", "") for s in suites if s.get("hostname")), "")
    cases = []
    for suite in suites:
        for tc in suite.iter("testcase"):
            cls, name = tc.get("classname", ""), tc.get("name", "")
            status, message = "passed", None
            for tag in ("failure", "error", "skipped"):
                el = tc.find(tag)
                if el is not None:
                    status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = (el.get("message") or (el.text or "").strip())[:500]
                    break
            cases.append(
                {
                    "test": f"{cls}::{name}" if cls else name,
                    "status": status,
                    "message": message,
                    "time_s": float(tc.get("time", "0") or 0),
                }
            )
    return cases, host


def _finding(cases: list[dict[str, Any]], host: str) -> Finding:
    by = {
        k: [c for c in cases if c["status"] == k] for k in ("passed", "failed", "error", "skipped")
    }
    m: dict[str, Any] = {
        "tests": len(cases),
        **{f"{k}_count": len(v) for k, v in by.items()},
        "counterexamples": [
            {"test": c["test"], "message": c["message"]} for c in by["failed"][:_MAX_LISTED]
        ],
        "errors": [{"test": c["test"], "message": c["message"]} for c in by["error"][:_MAX_LISTED]],
        "not_run": [
            {"test": c["test"], "message": c["message"]} for c in by["skipped"][:_MAX_LISTED]
        ],
        "time_s": round(sum(c["time_s"] for c in cases), 6),
    }
    if by["failed"]:
        first = by["failed"][0]
        return Finding(
            "failed",
            f"{len(by['failed'])} of {len(cases)} tests failed; first: {first['test']}: "
            f"{first['message']}",
            m,
            host=host,
        )
    if by["error"]:
        first = by["error"][0]
        return Finding(
            "infra-error",
            f"{len(by['error'])} of {len(cases)} tests errored before a verdict; first: "
            f"{first['test']}: {first['message']}",
            m,
            host=host,
        )
    if not cases:
        return Finding("inconclusive", "no test case selected for the claim", m, host=host)
    if by["skipped"]:
        return Finding(
            "inconclusive",
            f"{len(by['skipped'])} of {len(cases)} tests were skipped (not run); a skipped "
            "test is not a pass",
            m,
            host=host,
        )
    return Finding("passed", None, m, host=host)


def read(path: Path, claims: ClaimMap) -> dict[str, Finding]:
    cases, host = _cases(path)
    return {
        claim: _finding([c for c in cases if fnmatch.fnmatchcase(c["test"], pat)], host)
        for claim, pat in claims
    }
