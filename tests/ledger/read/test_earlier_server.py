"""A client of this release asking a `ledger serve` of an earlier release, which has no
`POST /v1/evidence`, reads a question's evidence per receipt (its history, each entry,
its keys) and gets what the route would have sent: the same receipts, reviews, signers'
standing and revocations, and the same status answer judged from them.

The earlier server is the real application built from the real routes less
`/v1/evidence`, served on a free port beside one with every route (real SQLite and
PostgreSQL ledgers, a real git repository).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import httpx
import pytest

from ledger.qualification.judge import Gathered, judge
from ledger.read.evidence import Evidence
from ledger.read.question import Question
from ledger.read.reader import LocalReader, RemoteReader
from ledger.service import api
from ledger.service.run import Running, start
from tests.ledger.write.test_revoke import CLAIM, Lg, make_lg


@pytest.fixture
def lg(db_url: str, key_dir: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]) -> Lg:
    return make_lg(db_url, key_dir, repo, capsys)


@pytest.fixture
def servers(lg: Lg, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Running, Running]]:
    """The ledger served by this release, and by one whose routes lack the evidence's."""
    now = start(lg.db)
    with monkeypatch.context() as m:
        m.setattr(api, "ROUTES", [r for r in api.ROUTES if r[0] != "/v1/evidence"])
        earlier = start(lg.db)
    try:
        yield now, earlier
    finally:
        now.stop()
        earlier.stop()


def _world(lg: Lg) -> tuple[str, str]:
    """A pass revoked, a counterexample disputed, a review by a key revoked after it:
    the repository id and commit they are about."""
    passed = lg.attest("passed")
    failed = lg.attest("failed")
    for args in (
        ("review", passed, "--concur", "--note", "ran as said", "--key", "other"),
        ("review", failed, "--dispute", "--note", "wrong GPU", "--key", "reviewer"),
        ("revoke", passed, "--reason", "ran on a mislabelled host"),
        ("keys", "revoke", "other", "--reason", "laptop lost"),
    ):
        r = lg(*args)
        assert r.code == 0, r.err
    store = lg.store()
    try:
        src = store.resolve(passed).receipt.predicate.source
    finally:
        store.dispose()
    return src.repo, src.commit


def _status(q: Question, ev: Evidence) -> dict[str, Any]:
    report = judge(
        Gathered(
            plan=None,
            revision=q.subject,
            receipts=ev.receipts,
            reviews=ev.reviews,
            claims=[CLAIM],
            unreadable=tuple(ev.unreadable),
        )
    )
    return report.to_json()


def _unsaid(ev: Evidence) -> tuple[Evidence, list[str]]:
    """`ev` without the position of a key's revocation where the entry was logged before
    it (an earlier server's history does not say it), and the entries that had one."""
    had = [x.id for x in (*ev.receipts, *ev.reviews) if x.signer_revoked_seq and not x.revoked]

    def clear(x: Any) -> Any:
        return x if x.revoked else dataclasses.replace(x, signer_revoked_seq=None)

    out = Evidence(
        [clear(r) for r in ev.receipts], [clear(v) for v in ev.reviews], list(ev.unreadable)
    )
    return out, had


def test_a_server_without_the_evidence_route_gives_the_same_evidence_and_answer(
    lg: Lg, servers: tuple[Running, Running]
) -> None:
    now, earlier = servers
    repo, commit = _world(lg)
    gone = httpx.post(f"{earlier.url}/v1/evidence", json={}, timeout=30)
    assert gone.status_code == 404  # the earlier server's answer to the route
    for claims in ((CLAIM,), ()):
        q = Question.about(repo, commit, claims)
        want = RemoteReader(now.url).evidence(q)
        local = LocalReader(lg.db)
        try:
            assert local.evidence(q) == want
        finally:
            local.close()
        got = RemoteReader(earlier.url).evidence(q)
        assert len(want.receipts) == 2 and len(want.reviews) == 2
        assert [r.revocation is not None for r in want.receipts] == [True, False]
        # The same receipts, reviews, signers and revocation; only where the other
        # reviewer's key was revoked (after its review) is left unsaid, and it counts
        # as it does on the server.
        said, had = _unsaid(want)
        assert got == said
        assert len(had) == 1 and had[0] in {v.id for v in want.reviews}
        assert _status(q, got) == _status(q, want)
