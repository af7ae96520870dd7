"""A reviewer's revocation of a pass is weighed by the governing plan on every surface
that shows it: `ledger show` (text and --json), `GET /v1/entries/ID` and the receipt page
say it is not counted where `status` counts the pass (the plan lets only the operator
revoke one), and where no governing plan is found they show it as the log records it,
labelled "not weighed: no governing plan". Real SQLite and PostgreSQL ledgers, a real
git repository and server."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from ledger.qualification.revocation import PLAN_KEEPS_PASSES
from ledger.read.revoked import NOT_WEIGHED
from tests.conftest import commit_file
from tests.ledger.service.test_revoke_http import Served, served
from tests.ledger.write.test_revoke import CLAIM

__all__ = ["served"]  # the fixture, shared with the revocation's HTTP tests

PLAN = f"""
[[claims]]
name = "{CLAIM}"
check = "admission"
"""


def _revoked_by_reviewer(s: Served) -> str:
    """A pass, disputed by an independent reviewer and revoked on that dispute by the
    reviewer's token."""
    rid = s.lg.attest("passed")
    own = s.lg("review", rid, "--dispute", "--note", "wrong host", "--key", "reviewer")
    assert own.code == 0, own.err
    code, _, err = s.revoke("reviewer", rid, "--review", own.out.split()[0])
    assert code == 0, err
    return rid


def _page(s: Served, rid: str, html: bool = False) -> Any:
    accept = "text/html" if html else "application/json"
    r = httpx.get(f"{s.srv.url}/receipt/{rid}", headers={"accept": accept}, timeout=60)
    assert r.status_code == 200, r.text
    return r.text if html else r.json()


def _revocation_paragraph(html: str) -> str:
    """What the receipt page says of the revocation (its verification section speaks
    for `ledger verify`, which has no plan and fails closed)."""
    m = re.search(r'<p class="revocation"[^>]*>.*?</p>', html, re.S)
    assert m is not None, html
    return m.group(0)


def test_show_and_the_receipt_page_weigh_it_by_the_plan_status_judges_by(
    served: Served,
) -> None:
    lg = served.lg
    import git

    commit_file(git.Repo(lg.repo), "qualification.toml", PLAN, "plan")
    rec = lg("plan", "record", "--rev", "HEAD", "--repo", str(lg.repo), "--offline")
    assert rec.code == 0, rec.err
    rid = _revoked_by_reviewer(served)
    # The plan lets only the operator revoke a pass: status counts it (disputed).
    row = lg.status()
    assert row["state"] == "disputed", row
    shown = json.loads(lg("show", rid, "--json").out)["revocation"]
    assert not shown["effective"] and PLAN_KEEPS_PASSES in shown["refused"], shown
    assert shown["text"].startswith("revocation not counted"), shown
    assert 'revoke_pass = "operator"' in shown["weighed"], shown
    text = " ".join(lg("show", rid).out.split())  # one line, however wrapped
    assert "revocation not counted (the plan lets only the operator" in text, text
    assert "revoked: ran on" not in text
    # The server's entry and its receipt page, alike.
    entry = httpx.get(f"{served.srv.url}/v1/entries/{rid}", timeout=60).json()
    assert entry["revocation"] == shown
    assert _page(served, rid)["revocation"] == shown
    said = _revocation_paragraph(_page(served, rid, html=True))
    assert 'data-effective="false"' in said and "revocation not counted" in said, said
    assert NOT_WEIGHED not in said


def test_without_a_governing_plan_it_is_shown_as_logged_and_said_unweighed(
    served: Served,
) -> None:
    rid = _revoked_by_reviewer(served)
    shown = json.loads(served.lg("show", rid, "--json").out)["revocation"]
    assert shown["effective"] and shown["weighed"] == NOT_WEIGHED, shown
    text = " ".join(served.lg("show", rid).out.split())  # one line, however wrapped
    assert f"revoked: ran on a mislabelled host (revocation at entry {shown['seq']}" in text
    assert NOT_WEIGHED in text, text
    said = _revocation_paragraph(_page(served, rid, html=True))
    assert 'data-effective="true"' in said and "revoked: ran on" in said, said
    assert NOT_WEIGHED in said, said
    # An operator's revocation is the plan's to weigh in no case: nothing to label.
    other = served.lg.attest("passed")
    assert served.revoke("operator", other)[0] == 0
    shown = json.loads(served.lg("show", other, "--json").out)["revocation"]
    assert shown["effective"] and shown["weighed"] != NOT_WEIGHED, shown
    assert NOT_WEIGHED not in served.lg("show", other).out
