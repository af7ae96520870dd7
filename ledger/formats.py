"""A status answer in the formats CI systems read: a Markdown summary (GitHub's
`$GITHUB_STEP_SUMMARY`, merge-request comments), JUnit XML (GitLab and Jenkins
test reports) and a GitHub check-run payload.

Each renders the verdict of the `status --json` document (its `verdict`
part, the model every surface renders), so a format never decides a state of
its own and never says more than the answer itself.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ledger.humanize import figures, state_breakdown
from ledger.inert import inert, markdown_cell, xml_text

__all__ = ["FORMATS", "github_check", "junit", "markdown"]

FORMATS = ("text", "json", "markdown", "junit", "github-check")

# A state reads by its word and a mark, never by colour alone.
_ICON = {
    "qualified": "✅",
    "failed": "❌",
    "disputed": "❌",
    "not-applicable": "➖",
    "not-run": "⬜",
    "stale": "⏳",
    "needs-review": "👀",
}


def _scope(scope: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in scope.items()) or "(any)"


def _subject(doc: dict[str, Any]) -> str:
    s = doc["subject"]
    head = f"PR #{s['pr']} head {s['commit'][:12]}" if s.get("pr") else f"commit {s['commit'][:12]}"
    return f"{s['repo']} {head}"


def _cell(text: str) -> str:
    # Signed text in a cell: no row or cell break, no link, image or control.
    return markdown_cell(text)


def _commands(text: str) -> str:
    """A sentence whose `...` spans are commands: those as code spans (made one
    line, without controls; a code span shows its text literally), the rest as
    cell text."""
    parts = text.split("`")
    pipe = "\\|"
    return "".join(
        "`" + inert(p, newlines=False).replace("|", pipe) + "`" if i % 2 else _cell(p)
        for i, p in enumerate(parts)
    )


def _reasons(claim: dict[str, Any]) -> str:
    """A claim's reasons, byte counts and long floats as people read them."""
    return "; ".join(figures(r) for r in claim["reasons"])


def _short(receipt_id: str) -> str:
    return receipt_id.removeprefix("sha256:")[:12]


def markdown(doc: dict[str, Any]) -> str:
    """The headline, the blockers with the next command, then one row per claim
    at its required scope with the receipts and what each means here."""
    v = doc["verdict"]
    lines = [
        f"### Ledger: {_cell(_subject(doc))}: **{_cell(v['headline'])}**"
        + (f" ({state_breakdown(v)})" if state_breakdown(v) else ""),
        *(f"- {_cell(line)}" for line in doc.get("judged", [])),
    ]
    if v["blockers"]:
        lines += ["", "**Blocking**", ""]
        for i, b in enumerate(v["blockers"], 1):
            lines.append(
                f"{i}. **{_cell(b['claim'])}**: {b['state']} at {_cell(b['scope_text'])}; "
                f"next: {_commands(b['next'] or '-')}"
            )
    lines += ["", "| claim | scope | state | receipts | why |", "|---|---|---|---|---|"]
    for c in v["claims"]:
        claim = c["claim"] if c["required"] else f"{c['claim']} (optional)"
        receipts = ", ".join(f"`{r['short']}` {r['meaning']}" for r in c["receipts"])
        icon = _ICON.get(c["state"], "⚠️")
        lines.append(
            f"| {_cell(claim)} | {_cell(c['scope_text'])} | {icon} {c['state']} "
            f"| {receipts or '-'} | {_cell(_reasons(c))} |"
        )
    return "\n".join(lines) + "\n"


def junit(doc: dict[str, Any]) -> str:
    """One test case per claim at its required scope: qualified passes; a required
    claim that is not qualified fails (its next command in the text); an optional
    one that is not qualified is skipped (it does not decide the answer)."""
    v = doc["verdict"]
    x = xml_text
    suite = ET.Element("testsuite", name=x(f"ledger: {_subject(doc)}: {v['headline']}"))
    failures = skipped = 0
    for c in v["claims"]:
        case = ET.SubElement(
            suite, "testcase", classname=x(c["claim"]), name=x(f"required: {c['scope_text']}")
        )
        if c["state"] == "qualified":
            continue
        why = _reasons(c) or c["state"]
        if c["next"]:
            why += f"\nnext: {c['next']}"
        if c["required"]:
            failures += 1
            ET.SubElement(case, "failure", message=c["state"], type=c["state"]).text = x(why)
        else:
            skipped += 1
            ET.SubElement(case, "skipped", message=x(f"{c['state']}: {why}"))
    suite.set("tests", str(len(v["claims"])))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def github_check(doc: dict[str, Any]) -> dict[str, Any]:
    """A check-run payload (POST /repos/{owner}/{repo}/check-runs): the conclusion,
    the headline as title, the Markdown summary, one annotation per claim that is
    not qualified (with the next command)."""
    s = doc["subject"]
    v = doc["verdict"]
    annotations = [
        {
            "path": "qualification.toml",
            "start_line": 1,
            "end_line": 1,
            "annotation_level": "failure" if c["required"] else "warning",
            "title": f"{c['claim']}: {c['state']}",
            "message": _reasons(c) + (f"\nnext: {c['next']}" if c["next"] else ""),
        }
        for c in v["claims"]
        if c["state"] != "qualified"
    ]
    return {
        "name": "ledger qualification",
        "head_sha": s["commit"],
        "status": "completed",
        "conclusion": "success" if v["qualified"] else "failure",
        "output": {
            "title": v["headline"],
            "summary": markdown(doc),
            # GitHub accepts at most 50 annotations per request.
            "annotations": annotations[:50],
        },
    }
