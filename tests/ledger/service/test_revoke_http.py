"""`ledger revoke ID --reason TEXT --server URL --token T`: revoking one receipt over
HTTP, role-checked as the other writes are. An operator token revokes as the operator
does on the ledger's host; a reviewer token only on its own dispute of the receipt,
logged as a reviewer's (a pass so counts only where the plan says so); any other token
is refused. A refused revocation writes nothing and says why in one line (real SQLite
and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from ledger.evidence.keys import KeyDir
from ledger.qualification.revocation import PLAN_KEEPS_PASSES
from ledger.service.auth import new_token
from ledger.service.run import Running, start
from tests.ledger.helpers import run
from tests.ledger.write.test_revoke import CLAIM, Lg, make_lg


class Served:
    def __init__(self, lg: Lg, srv: Running, tokens: dict[str, str]) -> None:
        self.lg, self.srv, self.tokens = lg, srv, tokens

    def revoke(
        self, token: str, rid: str, *more: str, key: str | None = None
    ) -> tuple[int, str, str]:
        """Revoke over HTTP, signed here by `key`: by default the ledger key (the
        operator's) for an operator's token, the `reviewer` key for a reviewer's."""
        key = key or ("reviewer" if token == "reviewer" else "ledger")
        r = self.lg(
            "revoke", rid, "--reason", "ran on a mislabelled host", *more,
            "--key", key, "--server", self.srv.url, "--token", self.tokens[token],
        )  # fmt: skip
        return r.code, r.out, r.err


@pytest.fixture
def served(
    db_url: str, key_dir: Path, repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Served]:
    lg = make_lg(db_url, key_dir, repo, capsys)
    tokens = tmp_path / "tokens"
    made = {
        "runner": new_token("gpu-host", tokens),
        "keys": new_token("key-desk", tokens, ["keys"]),
        "operator": new_token("ops", tokens, ["operator"]),
        "reviewer": new_token("ann", tokens, ["reviewer"]),
    }
    srv = start(db_url, KeyDir(key_dir), tokens=tokens)
    try:
        yield Served(lg, srv, made)
    finally:
        srv.stop()


def test_only_an_operator_or_reviewer_token_revokes_and_a_refusal_writes_nothing(
    served: Served,
) -> None:
    lg = served.lg
    rid = lg.attest("passed")
    before = lg.size()
    for token in ("runner", "keys"):
        code, out, err = served.revoke(token, rid)
        assert code != 0 and out == "" and err.count("\n") == 1, err
        assert "lacks the 'operator' or 'reviewer' role" in err
    # A reviewer names its own dispute: without one, refused.
    code, _, err = served.revoke("reviewer", rid)
    assert code == 1 and "--review" in err and err.count("\n") == 1
    assert lg.size() == before
    code, out, err = served.revoke("operator", rid)
    assert code == 0, err
    assert lg.size() == before + 1
    assert "revoked: ran on a mislabelled host" in " ".join(map(str, lg.status()["reasons"]))
    again, _, err = served.revoke("operator", rid)
    assert again == 1 and "already revoked" in err and lg.size() == before + 1
    # The server's bundle carries the revocation's inclusion proof: verifying the receipt
    # through it, against the ledger key, refuses it from the checkpoint that holds it.
    pem = lg.keys.parent / "ledger.pem"
    pem.write_text(lg("keys", "export", "ledger").out)
    shown = run(lg.capsys, "verify", rid, "--server", served.srv.url, "--trust", str(pem))
    assert shown.code == 1 and "revoked: ran on a mislabelled host" in shown.err, shown.err
    assert lg("audit").code == 0


def test_a_counterexample_needs_its_independent_dispute_whoever_revokes(served: Served) -> None:
    lg = served.lg
    fid = lg.attest("failed")
    before = lg.size()
    code, _, err = served.revoke("operator", fid)
    assert code == 1 and "needs an independent review" in err and err.count("\n") == 1
    assert lg.size() == before
    did = lg("review", fid, "--dispute", "--note", "the host's RAM", "--key", "other")
    assert did.code == 0, did.err
    review = did.out.split()[0]
    # A reviewer revokes on its own dispute: signed by another reviewer key, refused.
    code, _, err = served.revoke("reviewer", fid, "--review", review, key="reviewer")
    assert code == 1 and "its own dispute" in err and lg.size() == before + 1, err
    code, out, err = served.revoke("reviewer", fid, "--review", review, "--json", key="other")
    assert code == 0, err
    assert json.loads(out)["by"] == "reviewer"
    assert lg.status()["state"] != "failed"


def test_a_reviewers_revocation_of_a_pass_counts_only_where_the_plan_says_so(
    served: Served,
) -> None:
    lg = served.lg
    rid = lg.attest("passed")
    own = lg("review", rid, "--dispute", "--note", "wrong host", "--key", "reviewer")
    assert own.code == 0, own.err
    code, out, err = served.revoke("reviewer", rid, "--review", own.out.split()[0])
    assert code == 0, err
    assert "a reviewer's" in out
    shown = json.loads(lg("show", rid, "--json").out)
    assert shown["revocation"]["review"] == own.out.split()[0]
    # No plan lets a reviewer revoke a pass here: it stands (disputed), and says why.
    row = lg.status()
    reasons = " ".join(map(str, row["reasons"]))
    assert row["state"] == "disputed", row
    assert "revocation not counted (the plan lets only the operator revoke a pass" in reasons
    assert lg("audit").code == 0
    # History weighs it alike: the pass is not void there either.
    hist = json.loads(lg("history", "--rev", "HEAD", "--repo", str(lg.repo), "--json").out)
    (item,) = [e for e in hist["entries"] if e["id"] == rid]
    assert not any("revoked:" in p for p in item["problems"]), item
    # The same answer from the server (the client judges its evidence), and from the log
    # the client checks the server by: the revocation is a reviewer's there too.
    url = served.srv.url
    ask = ["status", "--rev", "HEAD", "--repo", str(lg.repo), "--claim", CLAIM, "--json"]
    remote = run(lg.capsys, *ask, "--server", url)
    row = json.loads(remote.out)["claims"][0]
    assert row["state"] == "disputed", (row, remote.err)
    assert PLAN_KEEPS_PASSES in " ".join(map(str, row["reasons"]))
    # A verifier has no plan: it refuses the receipt on the reviewer's dispute.
    verified = lg("verify", rid)
    assert verified.code == 1 and "disputes it" in verified.err, verified.err
