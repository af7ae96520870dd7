"""pytest's JUnit XML: one receipt per claim over the test cases it selects.

As pytest means it: a ``<failure>`` is a counterexample (failed), and so is a
strict xpass (pytest writes it as a failure ``[XPASS(strict)]``); an xfail
(``<skipped type="pytest.xfail">``: the expected failure happened) is a pass;
an ``<error>`` (a fixture or collection error: no verdict reached) is an
infra-error unless a failure is also there. Skipped tests are listed; they do
not block a pass when at least one selected test ran, unless the claim's plan
says ``skips = "inconclusive"``. A claim selects every test whose id equals its
pattern and every test the fnmatch pattern matches; a selection of nothing is refused.
"""

from __future__ import annotations

import fnmatch
import math
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ledger.evidence.errors import InputError
from ledger.importers.reader import ClaimMap, Context, Finding, planned

__all__ = ["node_to_id", "read", "select"]

_MAX_LISTED = 50
CHECK = "import-junit"


def _status(tc: ElementTree.Element) -> tuple[str, str | None, str | None]:
    """A case's status, its message and the detail beneath it (a failure's diff
    or traceback, when the element's text says more than the message)."""
    for tag in ("failure", "error", "skipped"):
        el = tc.find(tag)
        if el is None:
            continue
        text = (el.text or "").strip()
        message = (el.get("message") or text)[:500]
        detail = text[:_DETAIL] if text and text != message else None
        if tag == "skipped" and el.get("type") == "pytest.xfail":
            return "xfailed", message, detail
        return {"failure": "failed", "error": "error", "skipped": "skipped"}[tag], message, detail
    return "passed", None, None


_DETAIL = 4000
"""Characters of a failure's detail kept in the measurements (the reason keeps one line)."""


def _first_line(message: str | None, cap: int = 200) -> str:
    """A message's first line, for the one-line reason (the whole one is in the
    measurements)."""
    lines = (message or "").strip().splitlines()
    line = lines[0].strip() if lines else ""
    more = len(lines) > 1 or len(line) > cap
    return (line[:cap] + (" …" if more else "")) or "(no message)"


def _seconds(text: str | None) -> float:
    """A test case's `time`; one that is not a finite number of seconds counts as 0."""
    try:
        t = float(text or 0)
    except ValueError:
        return 0.0
    return t if math.isfinite(t) and 0 <= t < 2**53 else 0.0


def _cases(path: Path) -> tuple[list[dict[str, Any]], str]:
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as e:
        raise InputError(f"{path.name}: not JUnit XML: {e}") from None
    if root.tag not in ("testsuite", "testsuites"):
        raise InputError(f"{path.name}: root element is <{root.tag}>, not <testsuite(s)>")
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    host = next((s.get("hostname", "") for s in suites if s.get("hostname")), "")
    cases = []
    for suite in suites:
        for tc in suite.iter("testcase"):
            cls, name = tc.get("classname", ""), tc.get("name", "")
            status, message, detail = _status(tc)
            cases.append(
                {
                    "test": f"{cls}::{name}" if cls else name,
                    "status": status,
                    "message": message,
                    "detail": detail,
                    "time_s": _seconds(tc.get("time")),
                }
            )
    return cases, host


def node_to_id(nodeid: str) -> str:
    """A pytest node id (``tests/test_x.py::TestC::test_y[1]``) as the JUnit id pytest
    writes for it (``tests.test_x.TestC::test_y[1]``); other text as given."""
    parts = nodeid.split("::")
    if len(parts) < 2 or not parts[0].endswith(".py"):
        return nodeid
    module = parts[0].removesuffix(".py").replace("/", ".")
    return f"{'.'.join([module, *parts[1:-1]])}::{parts[-1]}"


def select(cases: list[dict[str, Any]], pattern: str) -> tuple[list[dict[str, Any]], str]:
    """The cases a claim's pattern names: every test whose id (JUnit or pytest node id)
    it equals, and every test its fnmatch pattern matches, so a test whose id happens
    to equal the pattern never hides the others it selects; with how they were selected."""
    if pattern == "*":
        return cases, "all"
    wanted = {pattern, node_to_id(pattern)}
    exact = matched = False
    chosen = []
    for c in cases:
        if c["test"] in wanted:
            exact = True
        elif fnmatch.fnmatchcase(c["test"], pattern):
            matched = True
        else:
            continue
        chosen.append(c)
    how = "exact" if not matched else "pattern" if not exact else "exact and pattern"
    return chosen, how


def _listed(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"test": c["test"], "message": c["message"]}
        | ({"detail": c["detail"]} if c.get("detail") else {})
        for c in cs[:_MAX_LISTED]
    ]


def _finding(cases: list[dict[str, Any]], host: str, skips: str, how: str) -> Finding:
    by = {
        k: [c for c in cases if c["status"] == k]
        for k in ("passed", "xfailed", "failed", "error", "skipped")
    }
    ran = len(cases) - len(by["skipped"])
    m: dict[str, Any] = {
        "tests": len(cases),
        "selected_by": how,
        **{f"{k}_count": len(v) for k, v in by.items()},
        "counterexamples": _listed(by["failed"]),
        "errors": _listed(by["error"]),
        "xfailed": _listed(by["xfailed"]),
        "not_run": _listed(by["skipped"]),
        "time_s": round(sum(c["time_s"] for c in cases), 6),
    }
    params = {"skips": skips}

    def found(outcome: Any, reason: str | None) -> Finding:
        return Finding(outcome, reason, m, host=host, parameters=params)

    if by["failed"]:
        first = by["failed"][0]
        return found(
            "failed",
            f"{len(by['failed'])} of {len(cases)} tests failed; first: {first['test']}: "
            f"{_first_line(first['message'])}",
        )
    if by["error"]:
        first = by["error"][0]
        return found(
            "infra-error",
            f"{len(by['error'])} of {len(cases)} tests errored before a verdict; first: "
            f"{first['test']}: {_first_line(first['message'])}",
        )
    if not ran:
        return found("inconclusive", f"all {len(cases)} selected tests were skipped: none ran")
    if by["skipped"] and skips == "inconclusive":
        return found(
            "inconclusive",
            f"{len(by['skipped'])} of {len(cases)} tests were skipped and the plan says "
            'skips = "inconclusive"',
        )
    return found("passed", None)


def read(path: Path, claims: ClaimMap, ctx: Context) -> dict[str, Finding]:
    cases, host = _cases(path)
    out = {}
    for claim, pat in claims:
        chosen, how = select(cases, pat)
        if not chosen:
            what = "the file holds no test case" if pat == "*" else f"{pat!r} selects no test"
            ids = ", ".join(c["test"] for c in cases[:3])
            raise InputError(
                f"claim {claim}: {what} in {path.name}"
                + (f" (ids look like: {ids})" if ids else "")
                + "; nothing recorded"
            )
        skips = str(planned(CHECK, ctx.params.get(claim, {}))["skips"])
        out[claim] = _finding(chosen, host, skips, how)
    return out
