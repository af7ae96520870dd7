"""Authority: a supersession lifts a counterexample only from its signer or with an
independent reviewer's concurrence; a reviewer key registered by the holder who
registered the runner key is not independent of that runner's receipts."""

from __future__ import annotations

import dataclasses

from ledger.qualification import history
from ledger.qualification.supersession import SUPERSESSION_PENDING
from ledger.read.formats import junit, markdown

from .factories import receipt, review
from .helpers import report, status, why


def test_another_runner_cannot_erase_a_counterexample_by_superseding_it() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    flaky = receipt(seq=2, signer="runner-b", supersedes=[(fail.id, "flaky")])
    row = status([fail, flaky])
    assert (row.state, row.receipts) == ("failed", (fail.id,))
    assert SUPERSESSION_PENDING in why(row)
    # history says the same: the counterexample stands, pending review.
    [item] = [i for i in history([fail, flaky], []) if i.id == fail.id]
    assert not item.superseded and item.supersession_pending
    assert item.to_json()["superseded_by"][0]["effect"] == "pending"


def test_the_counterexamples_own_signer_supersedes_it() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    fix = receipt(seq=2, signer="runner-a", supersedes=[(fail.id, "ballast leaked")])
    assert status([fail, fix]).state == "qualified"
    [item] = [i for i in history([fail, fix], []) if i.id == fail.id]
    assert item.superseded and not item.supersession_pending


def test_an_independent_reviewers_concurrence_lets_the_supersession_take_effect() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    flaky = receipt(seq=2, signer="runner-b", supersedes=[(fail.id, "flaky")])
    ok = review(flaky, seq=3, signer="reviewer-1")
    row = status([fail, flaky], [ok])
    assert row.state == "qualified"
    assert "concurs" in why(row)
    [item] = [i for i in history([fail, flaky], [ok]) if i.id == fail.id]
    assert item.superseded


def test_a_concurrence_by_a_reviewer_of_the_same_holder_does_not_count() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    flaky = dataclasses.replace(
        receipt(seq=2, signer="runner-b", supersedes=[(fail.id, "flaky")]),
        signer_registered_by="gpu-host-7",
    )
    mine = dataclasses.replace(
        review(flaky, seq=3, signer="rev-7"), signer_registered_by="gpu-host-7"
    )
    assert status([fail, flaky], [mine]).state == "failed"


def test_every_surface_says_pending_in_the_same_words() -> None:
    fail = receipt(seq=1, outcome="failed", signer="runner-a")
    flaky = receipt(seq=2, signer="runner-b", supersedes=[(fail.id, "flaky")])
    rep = report([fail, flaky])
    doc = rep.to_json()
    assert SUPERSESSION_PENDING in markdown(doc)
    assert SUPERSESSION_PENDING in junit(doc)
    from ledger.read.render import render_history

    items = [i.to_json() for i in history([fail, flaky], [])]
    subject = {"repo": "r", "commit": "c" * 40, "pr": None}
    assert SUPERSESSION_PENDING in render_history(subject, items)


def test_a_reviewer_key_registered_by_the_runners_holder_is_not_independent() -> None:
    r = dataclasses.replace(receipt(seq=1, signer="runner-7"), signer_registered_by="gpu-host-7")
    self_review = dataclasses.replace(
        review(r, seq=2, signer="reviewer-7"), signer_registered_by="gpu-host-7"
    )
    row = status([r], [self_review], reviews=1)
    assert row.state == "needs-review"
    assert "also registered the receipt's key" in why(row)
    other = dataclasses.replace(
        review(r, seq=3, signer="reviewer-8"), signer_registered_by="review-desk"
    )
    assert status([r], [self_review, other], reviews=1).state == "qualified"
