"""Every (state, check kind) pair through every surface: the terminal, `--json`,
Markdown and the web page say the same state, label each receipt by the verdict
model, name what fails first, and give the command that records that claim's
evidence."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest

from ledger.qualification import ReceiptEvidence, ReviewEvidence, StatusReport
from ledger.qualification.verdict import MEANINGS
from ledger.read import formats
from ledger.read.render import render_status

from .factories import CLAIM, receipt, review, revision
from .helpers import report

# The check a claim names, and the command whose receipts it takes.
KINDS = {
    "admission": "ledger qualify --pr 7 --claim " + CLAIM,
    "import-junit": "ledger import junit REPORT.xml --claim " + CLAIM + " --pr 7",
    "import-in-toto": "ledger import in-toto STATEMENT --claim " + CLAIM + " --pr 7",
    "import-admission-events": "ledger import admission-events SPOOL --claim " + CLAIM + " --pr 7",
    "command": "ledger run --claim " + CLAIM + " --pr 7",
}
FAILING = "test tests/test_model.py::test_step failed: peak 9.1 GiB over 8 GiB"

Case = Callable[[str], tuple[list[ReceiptEvidence], list[ReviewEvidence], dict[str, Any]]]


def _qualified(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7)], [], {}


def _failed(check: str) -> Any:
    ok = receipt(seq=1, check=check, pr=7)
    bad = receipt(seq=2, check=check, pr=7, outcome="failed", reason=FAILING)
    return [ok, bad], [], {}


def _disputed(check: str) -> Any:
    ok = receipt(seq=1, check=check, pr=7)
    return [ok], [review(ok, seq=2, verdict="dispute", note="wrong GPU")], {}


def _needs_review(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7)], [], {"reviews": 1}


def _unverified(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7, dirty=True)], [], {}


def _inconclusive(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7, outcome="inconclusive")], [], {}


def _infra_error(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7, outcome="infra-error", reason="XID 79")], [], {}


def _stale(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7, commit="earlier-head")], [], {}


def _not_run(check: str) -> Any:
    return [], [], {}


def _not_applicable(check: str) -> Any:
    return [receipt(seq=1, check=check, pr=7)], [], {"query": {"device_kind": "cpu"}}


STATES: dict[str, Case] = {
    "qualified": _qualified,
    "failed": _failed,
    "disputed": _disputed,
    "needs-review": _needs_review,
    "unverified": _unverified,
    "inconclusive": _inconclusive,
    "infra-error": _infra_error,
    "stale": _stale,
    "not-run": _not_run,
    "not-applicable": _not_applicable,
}
# The states whose next step is recording new evidence for the claim.
RECORD_AGAIN = {
    "failed",
    "disputed",
    "unverified",
    "inconclusive",
    "infra-error",
    "stale",
    "not-run",
}


def _report(state: str, check: str) -> StatusReport:
    receipts, reviews, over = STATES[state](check)
    query = over.pop("query", None)
    return report(receipts, reviews, rev=revision(pr=7), query=query, check=check, **over)


def _web(doc: dict[str, Any]) -> str:
    from ledger.service.web.pages import _env

    page = _env.get_template("pr.html").render(
        repo=doc["subject"]["repo"],
        pr=7,
        report=doc,
        verdict=doc["verdict"],
        heads=[],
        items=[],
        reviews=[],
        supersessions=[],
    )
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


@pytest.mark.parametrize("check", list(KINDS))
@pytest.mark.parametrize("state", list(STATES))
def test_every_state_and_check_kind_reads_alike_on_every_surface(state: str, check: str) -> None:
    rep = _report(state, check)
    doc = rep.to_json()
    v = doc["verdict"]
    [claim] = v["claims"]
    assert claim["state"] == state
    surfaces = {
        "terminal": _plain(render_status(doc, width=10_000)),
        "json": _plain(str(v)),
        "markdown": _plain(formats.markdown(doc)),
        "web": _plain(_web(doc)),
    }
    for name, text in surfaces.items():
        assert state in text, name
        # Each receipt is labelled by the model: "outweighed" only where a
        # counterexample decides the row.
        for r in claim["receipts"]:
            assert r["meaning"] in MEANINGS
            shown = r["meaning"] if name == "markdown" else r["meaning_text"]
            assert _plain(shown) in text, (name, r["meaning"])
            if r["meaning"] == "outweighed":
                assert state == "failed"
    if state == "qualified":
        assert claim["next"] is None and not v["blockers"]
        return
    [blocker] = v["blockers"]
    nxt = _plain(blocker["next"])
    if state in RECORD_AGAIN:
        assert KINDS[check] in nxt, nxt
        if check != "admission":
            assert "ledger qualify" not in nxt, nxt  # qualify would refuse this claim
    for name, text in surfaces.items():
        assert nxt in text, name
    if state == "failed":
        ok, bad = rep.evidence
        first = blocker["reasons"][0]
        # The first line names the failing receipt and what failed, not the passes.
        assert bad.id[7:19] in first and FAILING in first and ok.id[7:19] not in first
        for name in ("json", "web"):
            assert _plain(first)[:200] in surfaces[name], name


def _surfaces(doc: dict[str, Any]) -> dict[str, str]:
    return {
        "terminal": _plain(render_status(doc, width=10_000)),
        "markdown": _plain(formats.markdown(doc)),
        "web": _plain(_web(doc)),
    }


def test_an_observer_off_control_says_what_it_is_on_every_surface() -> None:
    on = receipt(seq=1, pr=7, observer="on")
    control = receipt(
        seq=2, pr=7, check="observer-off-control", params={"check": "admission"}, observer="off"
    )
    rep = report([on, control], rev=revision(pr=7), observer_off=True)
    doc = rep.to_json()
    [claim] = doc["verdict"]["claims"]
    assert claim["state"] == "qualified"
    meaning = {r["id"]: r for r in claim["receipts"]}
    assert meaning[on.id]["meaning"] == "counts"
    assert meaning[control.id]["meaning"] == "control"
    assert "observer-off control of check 'admission'" in meaning[control.id]["reason"]
    for name, text in _surfaces(doc).items():
        assert "outweighed" not in text, name
        shown = "control" if name == "markdown" else _plain(MEANINGS["control"])
        assert shown in text, name


def test_outweighed_is_said_only_where_a_counterexample_decides() -> None:
    ok = receipt(seq=1, pr=7)
    no_proof = receipt(seq=2, pr=7, clean=False)
    doc = report([ok, no_proof], rev=revision(pr=7)).to_json()
    meaning = {r["id"]: r["meaning"] for c in doc["verdict"]["claims"] for r in c["receipts"]}
    assert meaning == {ok.id: "counts", no_proof.id: "does-not-hold"}
    for name, text in _surfaces(doc).items():
        assert "outweighed" not in text, name


def test_an_observer_off_control_claims_inner_runs_say_what_they_are() -> None:
    """The quick start's `observer.off-control` claim: the control's receipt decides;
    the two inner runs (observer on and off) are neither passes nor outweighed."""
    check = "observer-off-control"
    params = {"check": "regression-24view"}
    on = receipt(seq=1, pr=7, check="regression-24view", observer="on")
    off = receipt(seq=2, pr=7, check="regression-24view", observer="off")
    verdict = receipt(seq=3, pr=7, check=check, params=params)
    rep = report([on, off, verdict], rev=revision(pr=7), check=check, params=params)
    doc = rep.to_json()
    [claim] = doc["verdict"]["claims"]
    assert claim["state"] == "qualified"
    meaning = {r["id"]: r for r in claim["receipts"]}
    assert meaning[verdict.id]["meaning"] == "counts"
    for r in (on, off):
        assert meaning[r.id]["meaning"] == "control-run"
        assert (
            f"observer-{r.predicate.observer} run of check 'regression-24view'"
            in (meaning[r.id]["reason"])
        )
    for name, text in _surfaces(doc).items():
        assert "outweighed" not in text and "does not hold" not in text, name
        shown = "control-run" if name == "markdown" else _plain(MEANINGS["control-run"])
        assert shown in text, name
