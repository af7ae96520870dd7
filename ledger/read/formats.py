"""A status answer in the formats CI systems read: a Markdown summary (GitHub's
`$GITHUB_STEP_SUMMARY`, merge-request comments), JUnit XML (GitLab and Jenkins
test reports) and a GitHub check-run payload.

Each renders the verdict of the `status --json` document (its `verdict`
part, the model every surface renders), so a format never decides a state of
its own and never says more than the answer itself.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from ledger.read.humanize import baseline, blocker_reason, figures, state_breakdown
from ledger.read.inert import inert, markdown_cell, xml_text

__all__ = ["FORMATS", "Links", "github_check", "junit", "markdown", "repo_label"]

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
    "infra-error": "🔧",
}


def _scope(scope: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in scope.items()) or "(any)"


def repo_label(repo: str) -> str:
    """The repository as a heading names it: its id, or where the id is a local
    path (a remote-less clone's origin), the folder's name, never the path."""
    if repo.startswith("/"):
        name = repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        return f"{name or repo} (local repository)"
    return repo


def _subject(doc: dict[str, Any]) -> str:
    s = doc["subject"]
    head = f"PR #{s['pr']} head {s['commit'][:12]}" if s.get("pr") else f"commit {s['commit'][:12]}"
    return f"{repo_label(s['repo'])} {head}"


@dataclass(frozen=True)
class Links:
    """Where a `ledger serve` at `base` shows what a status answer names: each
    receipt's page and bundle, the PR (or revision) page."""

    base: str

    def receipt(self, receipt_id: str) -> str:
        return f"{self.base.rstrip('/')}/receipt/{quote(receipt_id, safe=':')}"

    def bundle(self, receipt_id: str) -> str:
        return f"{self.base.rstrip('/')}/v1/bundles/{quote(receipt_id, safe=':')}"

    def page(self, doc: dict[str, Any]) -> str:
        s = doc["subject"]
        q = (
            {"repo": s["repo"], "pr": s["pr"]}
            if s.get("pr")
            else {"repo": s["repo"], "rev": s["commit"]}
        )
        return f"{self.base.rstrip('/')}/pr?{urlencode(q)}"


def _receipt_md(r: dict[str, Any], links: Links | None) -> str:
    if links is None:
        return f"`{r['short']}` {r['meaning']}"
    return (
        f"[`{r['short']}`]({links.receipt(r['id'])}) {r['meaning']} "
        f"([bundle]({links.bundle(r['id'])}))"
    )


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


def markdown(doc: dict[str, Any], links: Links | None = None) -> str:
    """The headline, the blockers with the next command, then one row per claim
    at its required scope with the receipts and what each means here; with
    `links`, the subject links its page and each receipt its page and bundle."""
    v = doc["verdict"]
    subject = _cell(_subject(doc))
    if links is not None:
        subject = f"[{subject}]({links.page(doc)})"
    lines = [
        f"### Ledger: {subject}: **{_cell(v['headline'])}**"
        + (f" ({state_breakdown(v)})" if state_breakdown(v) else ""),
        *(f"- {_cell(line)}" for line in doc.get("judged", [])),
    ]
    if v["blockers"]:
        lines += ["", "**Blocking**", ""]
        once = v.get("run_once") or {"claims": []}
        for i, b in enumerate(v["blockers"], 1):
            why = blocker_reason(b.get("reasons", []))
            nxt = "" if b["claim"] in once["claims"] else f"; next: {_commands(b['next'] or '-')}"
            lines.append(
                f"{i}. **{_cell(b['claim'])}**: {b['state']} (scope: {_cell(b['scope_text'])})"
                + (f": {_cell(why)}" if why else "")
                + nxt
                + (f"; baseline: {_cell(a)}" if (a := baseline(b)) else "")
            )
        if once["claims"]:
            lines += ["", f"Next, for {len(once['claims'])} of them: `{_cell(once['command'])}`"]
    lines += ["", "| claim | scope | state | receipts | why |", "|---|---|---|---|---|"]
    for c in v["claims"]:
        claim = c["claim"] if c["required"] else f"{c['claim']} (optional)"
        receipts = ", ".join(_receipt_md(r, links) for r in c["receipts"])
        icon = _ICON.get(c["state"], "⚠️")
        lines.append(
            f"| {_cell(claim)} | {_cell(c['scope_text'])} | {icon} {c['state']} "
            f"| {receipts or '-'} | {_cell(_reasons(c))} |"
        )
    return "\n".join(lines) + "\n"


def _nexts(v: dict[str, Any]) -> dict[str, str]:
    """Each claim's next command: the one shared run (`run_once`) for the claims
    it records evidence for, so several claims name one command, not one each."""
    once = v.get("run_once") or {"claims": []}
    out = {c["claim"]: c["next"] for c in v["claims"] if c["next"]}
    return out | {claim: once["command"] for claim in once["claims"]}


def _receipt_lines(c: dict[str, Any], links: Links | None) -> list[str]:
    """Each receipt of a claim, one line: what it means here, its page and bundle."""
    out = []
    for r in c["receipts"]:
        where = f": {links.receipt(r['id'])} (bundle {links.bundle(r['id'])})" if links else ""
        out.append(f"receipt {r['id']} {r['outcome']} -> {r['meaning']}{where}")
    return out


def junit(doc: dict[str, Any], links: Links | None = None) -> str:
    """One test case per claim at its required scope: qualified passes; a required
    claim that is not qualified fails (its next command in the text); an optional
    one that is not qualified is skipped (it does not decide the answer). With
    `links`, each case's output links its receipts (page and bundle) and the
    suite's properties the PR page."""
    v = doc["verdict"]
    x = xml_text
    suite = ET.Element("testsuite", name=x(f"ledger: {_subject(doc)}: {v['headline']}"))
    if links is not None:
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="page", value=x(links.page(doc)))
    failures = errors = skipped = 0
    nexts = _nexts(v)
    for c in v["claims"]:
        case = ET.SubElement(
            suite, "testcase", classname=x(c["claim"]), name=x(f"required: {c['scope_text']}")
        )
        lines = _receipt_lines(c, links)
        if lines:
            ET.SubElement(case, "system-out").text = x("\n".join(lines))
        if c["state"] == "qualified":
            continue
        lead = blocker_reason(c["reasons"])
        why = lead or c["state"]
        if nexts.get(c["claim"]):
            why += f"\nnext: {nexts[c['claim']]}"
        if a := baseline(c):
            why += f"\nbaseline: {a}"
        if len(c["reasons"]) > 1:
            why += f"\n{_reasons(c)}"
        if links is not None and lines:
            why += "\n" + "\n".join(lines)
        # The message is what a CI page shows in one line: the state and its reason.
        message = f"{c['state']}: {lead}" if lead else c["state"]
        if c["required"] and c["state"] == "infra-error":
            # JUnit's own word for a test that could not run: an error, not a failure
            # of the code (a CI page still counts it against the run).
            errors += 1
            ET.SubElement(case, "error", message=x(message), type=c["state"]).text = x(why)
        elif c["required"]:
            failures += 1
            ET.SubElement(case, "failure", message=x(message), type=c["state"]).text = x(why)
        else:
            skipped += 1
            ET.SubElement(case, "skipped", message=x(f"{c['state']}: {why}"))
    suite.set("tests", str(len(v["claims"])))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


_CLAIM_NAME = re.compile(r"""^\s*name\s*=\s*(?:"([^"]*)"|'([^']*)')""")


def plan_lines(text: str) -> dict[str, int]:
    """Each claim's line in a plan's text (1-based): its `name = ...` under `[[claims]]`."""
    out: dict[str, int] = {}
    in_claim = False
    for n, line in enumerate(text.splitlines(), 1):
        head = line.strip()
        if head.startswith("["):
            in_claim = head.replace(" ", "") == "[[claims]]"
        elif in_claim and (m := _CLAIM_NAME.match(line)):
            out.setdefault(m.group(1) if m.group(1) is not None else m.group(2), n)
    return out


@dataclass(frozen=True)
class PlanFile:
    """Where annotations point: the plan's path in the repository and each claim's line."""

    path: str = "qualification.toml"
    lines: dict[str, int] | None = None

    def line(self, claim: str) -> int:
        # A claim the plan does not name (asked by --claim) has no line of its own.
        return (self.lines or {}).get(claim, 1)


def github_check(
    doc: dict[str, Any], links: Links | None = None, plan: PlanFile | None = None
) -> dict[str, Any]:
    """A check-run payload (POST /repos/{owner}/{repo}/check-runs): the conclusion,
    the headline as title, the Markdown summary, one annotation per claim that is
    not qualified (with the next command) on the plan line of that claim; with
    `links`, the PR page as the details URL and each receipt's page and bundle in
    the summary and annotations."""
    s = doc["subject"]
    v = doc["verdict"]
    plan = plan or PlanFile()
    nexts = _nexts(v)
    annotations = [
        {
            "path": plan.path,
            "start_line": plan.line(c["claim"]),
            "end_line": plan.line(c["claim"]),
            "annotation_level": "failure" if c["required"] else "warning",
            "title": f"{c['claim']}: {c['state']}",
            "message": blocker_reason(c["reasons"])
            + (f"\nnext: {nexts[c['claim']]}" if nexts.get(c["claim"]) else "")
            + (f"\nbaseline: {a}" if (a := baseline(c)) else "")
            + (f"\n{_reasons(c)}" if len(c["reasons"]) > 1 else "")
            + "".join(f"\n{line}" for line in (_receipt_lines(c, links) if links else [])),
        }
        for c in v["claims"]
        if c["state"] != "qualified"
    ]
    out: dict[str, Any] = {
        "name": "ledger qualification",
        "head_sha": s["commit"],
        "status": "completed",
        # Never a conclusion branch protection passes (success, neutral, skipped) for a
        # revision that is not qualified, infra-only included: its title says retry.
        # Every blocker already on the base: a person acts (fixes the base, or
        # waives), not this pull request's author; still never a passing conclusion.
        "conclusion": "success"
        if v["qualified"]
        else ("action_required" if v.get("inherited_only") else "failure"),
        "output": {
            "title": v["headline"],
            "summary": markdown(doc, links),
            # GitHub accepts at most 50 annotations per request.
            "annotations": annotations[:50],
        },
    }
    if links is not None:
        out["details_url"] = links.page(doc)
    return out
