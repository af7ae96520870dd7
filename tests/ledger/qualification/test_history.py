"""History: every entry in log order, supersessions marked, nothing hidden."""

from __future__ import annotations

import json

from ledger.qualification import history

from .factories import receipt, review


def test_log_order_and_superseded_marks() -> None:
    oom = receipt(seq=2, outcome="failed", reason="CUDA OOM after admission")
    first = receipt(seq=1)
    fixed = receipt(seq=5, supersedes=[(oom.id, "harness leak, rerun on runner 1.1")])
    infra = receipt(seq=3, outcome="infra-error", reason="HTTP 503")
    reviews = [review(oom, seq=4, verdict="dispute", note="ballast leak")]
    items = history([fixed, infra, oom, first], reviews)
    assert [i.seq for i in items] == [1, 2, 3, 4, 5]
    assert [i.kind for i in items] == ["receipt", "receipt", "receipt", "review", "receipt"]
    by_id = {i.id: i for i in items}
    assert by_id[oom.id].superseded
    (mark,) = by_id[oom.id].superseded_by
    assert (mark.id, mark.seq, mark.reason) == (fixed.id, 5, "harness leak, rerun on runner 1.1")
    assert not by_id[first.id].superseded and not by_id[infra.id].superseded
    assert by_id[fixed.id].supersedes[0].id == oom.id
    doc = [i.to_json() for i in items]
    assert json.loads(json.dumps(doc)) == doc
    assert doc[1]["outcome"] == "failed" and doc[1]["superseded"] is True
    assert doc[3]["verdict"] == "dispute" and doc[3]["receipt"] == oom.id


def test_only_a_later_entry_supersedes() -> None:
    late = receipt(seq=9)
    early = receipt(seq=1, supersedes=[(late.id, "cannot name the future")])
    by_id = {i.id: i for i in history([early, late], [])}
    assert not by_id[late.id].superseded


def test_problems_are_shown_not_hidden() -> None:
    bad = receipt(seq=3, problem="signature does not verify", revoked_seq=2, dirty=True)
    (item,) = history([bad], [])
    assert [p.split(":")[0] for p in item.problems] == ["signature", "key-revoked", "dirty-tree"]


def test_a_reviewers_later_verdict_marks_the_earlier_one() -> None:
    r = receipt(seq=1)
    a = review(r, seq=2, verdict="concur")
    b = review(r, seq=3, verdict="dispute", note="budget was stale")
    other = review(r, seq=4, signer="reviewer-2", role="runner")
    items = history([r], [a, b, other])
    by_id = {i.id: i for i in items}
    assert by_id[a.id].superseded_by[0].id == b.id
    assert not by_id[b.id].superseded
    assert by_id[other.id].problems == ("signer-role: signed by a 'runner' key",)
