"""A status answer in the formats CI systems read: a Markdown summary (GitHub's
`$GITHUB_STEP_SUMMARY`, merge-request comments), JUnit XML (GitLab and Jenkins
test reports) and a GitHub check-run payload.

Each works on the `status --json` document, the stable contract, so a format
never says more than the answer itself.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ledger.inert import markdown_cell, xml_text

__all__ = ["FORMATS", "github_check", "junit", "markdown"]

FORMATS = ("text", "json", "markdown", "junit", "github-check")

_ICON = {"qualified": "✅", "failed": "❌", "disputed": "❌", "not-applicable": "➖"}


def _scope(scope: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in scope.items()) or "(any)"


def _subject(doc: dict[str, Any]) -> str:
    s = doc["subject"]
    head = f"PR #{s['pr']} head {s['commit'][:12]}" if s.get("pr") else f"commit {s['commit'][:12]}"
    return f"{s['repo']} {head}"


def _cell(text: str) -> str:
    # Signed text in a cell: no row or cell break, no link, image or control.
    return markdown_cell(text)


def markdown(doc: dict[str, Any]) -> str:
    """A heading with the verdict, then one table row per claim and scope."""
    verdict = "qualified" if doc["qualified"] else "not qualified"
    lines = [
        f"### Ledger: {_cell(_subject(doc))} is **{verdict}**",
        *(f"- {_cell(line)}" for line in doc.get("judged", [])),
        "",
        "| claim | scope | state | receipts | why |",
        "|---|---|---|---|---|",
    ]
    for row in doc["claims"]:
        claim = row["claim"] if row["required"] else f"{row['claim']} (optional)"
        if row["scope_role"] != "required":
            claim = f"↳ {claim}"
        receipts = ", ".join(f"`{r.removeprefix('sha256:')[:12]}`" for r in row["receipts"])
        icon = _ICON.get(row["state"], "⚠️")
        lines.append(
            f"| {_cell(claim)} | {_cell(_scope(row['scope']))} | {icon} {row['state']} "
            f"| {receipts or '-'} | {_cell('; '.join(row['reasons']))} |"
        )
    return "\n".join(lines) + "\n"


def junit(doc: dict[str, Any]) -> str:
    """One test case per claim and scope: qualified passes; a required claim at its
    required scope that is not qualified fails; anything else not qualified is skipped
    (it does not decide the answer)."""
    x = xml_text
    suite = ET.Element("testsuite", name=x(f"ledger: {_subject(doc)}"))
    failures = skipped = 0
    for row in doc["claims"]:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=x(row["claim"]),
            name=x(f"{row['scope_role']}: {_scope(row['scope'])}"),
        )
        if row["state"] == "qualified":
            continue
        why = x("; ".join(row["reasons"]) or row["state"])
        if row["required"] and row["scope_role"] == "required":
            failures += 1
            ET.SubElement(case, "failure", message=row["state"], type=row["state"]).text = why
        else:
            skipped += 1
            ET.SubElement(case, "skipped", message=x(f"{row['state']}: {why}"))
    suite.set("tests", str(len(doc["claims"])))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def github_check(doc: dict[str, Any]) -> dict[str, Any]:
    """A check-run payload (POST /repos/{owner}/{repo}/check-runs): the conclusion,
    a title and Markdown summary, one annotation per claim that is not qualified."""
    s = doc["subject"]
    required = [r for r in doc["claims"] if r["scope_role"] == "required"]
    good = sum(r["state"] == "qualified" for r in required)
    annotations = [
        {
            "path": "qualification.toml",
            "start_line": 1,
            "end_line": 1,
            "annotation_level": "failure" if r["required"] else "warning",
            "title": f"{r['claim']}: {r['state']}",
            "message": "; ".join(r["reasons"]) or r["state"],
        }
        for r in required
        if r["state"] != "qualified"
    ]
    return {
        "name": "ledger qualification",
        "head_sha": s["commit"],
        "status": "completed",
        "conclusion": "success" if doc["qualified"] else "failure",
        "output": {
            "title": f"{good} of {len(required)} claims qualified",
            "summary": markdown(doc),
            # GitHub accepts at most 50 annotations per request.
            "annotations": annotations[:50],
        },
    }
