"""Trustworthy answers: the question pinned to trusted facts (real git: bare
remotes, clones, force-pushes), and only exactly-signed statements count."""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path
from typing import Any

import git
import pytest

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.keys import KeyDir
from ledger.identity.repoid import canonical_repo
from ledger.store.store import Store, resolve_url
from tests.conftest import commit_file
from tests.ledger.factories import envelope, statement
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "c"
check = "admission"
cleanup = false
reviews = {reviews}
"""
ACTOR = git.Actor("T", "t@example.com")


@pytest.fixture
def ledger(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    db = tmp_path / "l.db"
    monkeypatch.setenv("LEDGER_DB", str(db))
    assert run(capsys, "init").code == 0
    # The runner key speaks for this host and for h1, the host an attest names.
    here = ("--host", socket.gethostname(), "--host", "h1")
    assert run(capsys, "keys", "new", "h200", "--role", "runner", *here).code == 0
    assert run(capsys, "keys", "new", "alice", "--role", "reviewer").code == 0
    return db


def _origin(tmp_path: Path, reviews: int = 0) -> tuple[git.Repo, git.Repo]:
    """A bare origin with main (plan committed) and a pusher clone."""
    bare = git.Repo.init(tmp_path / "origin.git", bare=True, initial_branch="main")
    pusher = git.Repo.clone_from(str(bare.git_dir), tmp_path / "pusher")
    pusher.git.checkout("-b", "main")
    commit_file(pusher, "qualification.toml", PLAN.format(reviews=reviews), "plan")
    pusher.git.push("origin", "main")
    return bare, pusher


def _push_pr(pusher: git.Repo, n: int, content: str, force: bool = False) -> str:
    pusher.git.checkout("-B", f"pr{n}", "main")
    sha = commit_file(pusher, "model/a.py", content, f"pr {n}")
    pusher.git.push(*(["--force"] if force else []), "origin", f"HEAD:refs/pull/{n}/head")
    return sha


def _attest(capsys: pytest.CaptureFixture[str], clone: git.Repo, *args: str) -> Any:
    return run(
        capsys, "attest", "--claim", "c", "--repo", str(clone.working_tree_dir), "--key", "h200",
        "--outcome", "passed", *args,
    )  # fmt: skip


def _status(capsys: pytest.CaptureFixture[str], clone: git.Repo, *args: str) -> tuple[int, Any]:
    r = run(capsys, "status", "--repo", str(clone.working_tree_dir), "--json", *args)
    return r.code, json.loads(r.out) if r.out.strip() else r.err


# -- 1. the PR's current head --------------------------------------------------------


def test_status_fetches_the_pr_head_every_time_and_sees_a_force_push(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare, pusher = _origin(tmp_path)
    head1 = _push_pr(pusher, 7, "x = 1\n")
    judge = git.Repo.clone_from(str(bare.git_dir), tmp_path / "judge")
    assert _attest(capsys, judge, "--pr", "7").code == 0
    code, doc = _status(capsys, judge, "--pr", "7")
    assert code == 0 and doc["subject"]["commit"] == head1
    assert any("fetched refs/pull/7/head" in n for n in doc["judged"])
    head2 = _push_pr(pusher, 7, "x = 2\n", force=True)
    code, doc = _status(capsys, judge, "--pr", "7")
    assert (code, doc["subject"]["commit"]) == (1, head2)
    code, doc = _status(capsys, judge, "--pr", "7", "--offline")
    assert doc["subject"]["commit"] == head2 and any("--offline" in n for n in doc["judged"])
    # A fetch failure is exit 2 with the reason, never a silent fallback.
    judge.git.remote("set-url", "origin", str(tmp_path / "gone.git"))
    code, err = _status(capsys, judge, "--pr", "7")
    assert code == 2 and "fetching PR 7" in err


def test_history_and_attest_follow_a_force_pushed_pr_head(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare, pusher = _origin(tmp_path)
    _push_pr(pusher, 5, "x = 1\n")
    judge = git.Repo.clone_from(str(bare.git_dir), tmp_path / "judge")
    first = run(capsys, "history", "--pr", "5", "--repo", str(judge.working_tree_dir), "--json")
    head2 = _push_pr(pusher, 5, "x = 2\n", force=True)
    r = run(capsys, "history", "--pr", "5", "--repo", str(judge.working_tree_dir), "--json")
    assert json.loads(first.out)["subject"]["commit"] != head2
    assert r.code == 0 and json.loads(r.out)["subject"]["commit"] == head2
    rid = _attest(capsys, judge, "--pr", "5").out.strip()
    shown = json.loads(run(capsys, "show", rid, "--json").out)
    assert shown["statement"]["predicate"]["source"]["commit"] == head2


def test_no_remote_uses_the_local_ref_and_says_so(
    ledger: Path, repo: git.Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.git.update_ref("refs/pull/3/head", "HEAD")
    # No plan at this head: a claim asked by name is the question.
    _, doc = _status(capsys, repo, "--pr", "3", "--claim", "c")
    assert any("no remote" in n for n in doc["judged"])
    assert _status(capsys, repo, "--pr", "4")[0] == 2  # unknown PR


# -- 2. the base branch governs ---------------------------------------------------------


def test_a_pr_cannot_relax_its_own_gate(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare, pusher = _origin(tmp_path, reviews=1)
    pusher.git.checkout("-B", "pr9", "main")
    commit_file(pusher, "qualification.toml", PLAN.format(reviews=0), "drop the review")
    pusher.git.push("origin", "HEAD:refs/pull/9/head")
    judge = git.Repo.clone_from(str(bare.git_dir), tmp_path / "judge")
    assert _attest(capsys, judge, "--pr", "9").code == 0
    code, doc = _status(capsys, judge, "--pr", "9")
    [row] = doc["claims"]
    assert (code, row["state"]) == (1, "needs-review")
    assert any("base branch main" in n for n in doc["judged"])
    assert any("proposed, not applied" in n for n in doc["judged"])
    plan = tmp_path / "p.toml"
    plan.write_text(PLAN.format(reviews=0))
    code, doc = _status(capsys, judge, "--pr", "9", "--plan", str(plan))
    assert code == 0 and any("explicit --plan" in n for n in doc["judged"])


# -- 3. one repository, one identity -------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "git@github.com:OpenPipe/ART.git",
        "https://github.com/OpenPipe/ART",
        "ssh://git@github.com/OpenPipe/ART.git",
        "https://user:tok@GitHub.com:443/OpenPipe/ART.git/",
    ],
)
def test_remote_url_forms_are_one_id(url: str) -> None:
    assert canonical_repo(url) == "github.com/OpenPipe/ART"


def test_clones_by_different_url_forms_see_the_same_receipts(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare, _ = _origin(tmp_path)
    a = git.Repo.clone_from(f"file://{bare.git_dir}", tmp_path / "a")
    b = git.Repo.clone_from(str(bare.git_dir), tmp_path / "b")
    b.git.remote("set-url", "origin", os.path.relpath(bare.git_dir, b.working_tree_dir))
    assert _attest(capsys, a, "--rev", "HEAD").code == 0
    code, doc = _status(capsys, b, "--rev", "HEAD")
    assert code == 0 and doc["subject"]["repo"] == os.path.realpath(bare.git_dir)
    # A folder copy with no remote uses the plan's [project] repo, not its folder name.
    commit_file(
        a, "qualification.toml", '[project]\nrepo = "acme/x"\n' + PLAN.format(reviews=0), "p"
    )
    a.delete_remote(a.remotes.origin)
    code, doc = _status(capsys, a, "--rev", "HEAD")
    assert doc["subject"]["repo"] == "acme/x"


def test_receipts_logged_under_a_raw_url_are_matched_through_the_normalisation(
    ledger: Path, tmp_path: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A receipt signed before ids were canonical names the raw remote URL; a clone
    whose remote is spelt another way still finds it."""
    _, pusher = _origin(tmp_path)
    pusher.git.remote("set-url", "origin", "git@GitHub.com:OpenPipe/ART.git")
    head = pusher.head.commit
    raw = tmp_path / "raw.json"
    source = {
        "repo": "https://github.com/OpenPipe/ART.git",
        "commit": head.hexsha,
        "tree": head.tree.hexsha,
        "dirty": False,
    }
    raw.write_bytes(envelope(KeyDir(key_dir).load("h200"), claim="c", scope={}, source=source))
    assert run(capsys, "record", str(raw)).code == 0
    code, doc = _status(capsys, pusher, "--rev", "HEAD")
    assert doc["subject"]["repo"] == "github.com/OpenPipe/ART"
    [row] = [c for c in doc["claims"] if c["claim"] == "c" and c["scope_role"] == "required"]
    assert row["receipts"] and row["state"] == "qualified", row
    assert code == 0


# -- 4. the ledger is not in the work tree --------------------------------------------


def test_default_ledger_lives_outside_the_work_tree(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, clone = _origin(tmp_path)
    monkeypatch.delenv("LEDGER_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(str(clone.working_tree_dir))
    assert resolve_url(None).endswith(str(tmp_path / "data" / "ledger" / "ledger.db"))
    assert run(capsys, "init").code == 0
    assert clone.git.status("--porcelain") == ""
    assert run(capsys, "keys", "new", "h200", "--role", "runner").code == 0
    r = run(
        capsys, "attest", "--claim", "c", "--rev", "HEAD", "--outcome", "passed", "--key", "h200"
    )
    assert r.code == 0, r.err
    assert "dirty" not in r.err


# -- 5. attest checks its input against the plan ---------------------------------------


def test_attest_refuses_before_writing(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, clone = _origin(tmp_path)
    size = Store.open(f"sqlite:///{ledger}").size()
    r = run(capsys, "attest", "--claim", "other", "--rev", "HEAD", "--repo",
            str(clone.working_tree_dir), "--outcome", "passed", "--key", "h200")  # fmt: skip
    assert r.code == 1 and "--unplanned" in r.err
    m = tmp_path / "m.json"
    m.write_text('{"start_ns": 1732000000000000000000}')
    r = _attest(capsys, clone, "--rev", "HEAD", "--measurements", str(m))
    assert r.code == 1 and "RFC 3339" in r.err and r.err.count("\n") == 1
    m.write_text('{"x": NaN}')
    assert _attest(capsys, clone, "--rev", "HEAD", "--measurements", str(m)).code == 1
    (Path(str(clone.working_tree_dir)) / "new.txt").write_text("dirty")
    r = _attest(capsys, clone, "--rev", "HEAD")
    assert r.code == 1 and "--allow-dirty" in r.err
    assert Store.open(f"sqlite:///{ledger}").size() == size
    r = _attest(capsys, clone, "--rev", "HEAD", "--allow-dirty", "--host", "h1", "--gpu-uuid",
                "GPU-1", "--started", "2026-01-01T00:00:00+01:00")  # fmt: skip
    assert r.code == 0, r.err
    p = json.loads(run(capsys, "show", r.out.strip(), "--json").out)["statement"]["predicate"]
    assert p["check"]["name"] == "admission"  # the plan's check for the claim
    assert p["source"]["dirty"] is True
    assert p["runner"]["host"] == "h1" and p["runner"]["gpu_uuids"] == ["GPU-1"]
    assert p["runner"]["started"].startswith("2025-12-31T23:00:00")
    assert "python" in p["runner"]["environment"]


# -- 6. strict ingest ---------------------------------------------------------------------


def _signed(payload: bytes, *keys: str) -> bytes:
    kd = KeyDir.default()
    sigs = [
        {"keyid": kd.load(k).keyid,
         "sig": base64.b64encode(kd.load(k).sign(dsse.pae(dsse.IN_TOTO_PAYLOAD_TYPE, payload))).decode()}  # noqa: E501
        for k in keys
    ]  # fmt: skip
    env = {"payloadType": dsse.IN_TOTO_PAYLOAD_TYPE,
           "payload": base64.b64encode(payload).decode(), "signatures": sigs}  # fmt: skip
    return json.dumps(env).encode()


def _doc(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = statement().model_dump(mode="json", by_alias=True)
    d["predicate"].update(over)
    return d


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (json.dumps(_doc(), indent=1).encode(), "canonical"),
        (canonical_bytes(_doc())[:-1] + b',"predicateType":"x"}', "duplicate"),
        (b"\xef\xbb\xbf" + canonical_bytes(_doc()), "byte-order mark"),
        (canonical_bytes(_doc(observer="off", cleanup={"complete": "yes", "resources": []})), "cleanup"),  # noqa: E501
        (canonical_bytes(_doc(source={**_doc()["predicate"]["source"], "dirty": "no"})), "dirty"),
        (canonical_bytes(_doc(source={**_doc()["predicate"]["source"], "pr": "7"})), "pr"),
        (canonical_bytes(_doc(source={**_doc()["predicate"]["source"], "repo": "other"})), "subject"),  # noqa: E501
        (b"", "2^53"),
    ],
)  # fmt: skip
def test_only_exactly_signed_statements_are_logged(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: bytes, why: str
) -> None:
    if why == "2^53":
        payload = canonical_bytes(_doc())[:-2] + b',"x":9007199254740993}}'
    f = tmp_path / "e.json"
    f.write_bytes(_signed(payload, "h200"))
    size = Store.open(f"sqlite:///{ledger}").size()
    r = run(capsys, "record", str(f))
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert Store.open(f"sqlite:///{ledger}").size() == size


def test_a_cosigning_reviewer_never_counts_as_the_independent_review(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "e.json"
    f.write_bytes(_signed(canonical_bytes(_doc()), "h200", "alice"))
    r = run(capsys, "record", str(f))
    assert r.code == 1 and "reviewer" in r.err
    f.write_bytes(_signed(canonical_bytes(_doc()), "alice", "h200"))
    assert run(capsys, "record", str(f)).code == 1  # order never changes acceptance


def test_revocation_is_read_at_every_write(ledger: Path, tmp_path: Path) -> None:
    from ledger.evidence.errors import RefusedError
    from ledger.write.ingest import record, revoke_key

    server = Store.open(f"sqlite:///{ledger}")
    server.keys()  # a long-lived process has read the keys once
    revoke_key(Store.open(f"sqlite:///{ledger}"), "h200", "stolen")
    with pytest.raises(RefusedError, match="revoked"):
        record(server, [_signed(canonical_bytes(_doc()), "h200")])


# -- 7. review ----------------------------------------------------------------------------


def test_review_takes_exactly_one_verdict(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["--concur", "--dispute"], []):
        r = run(capsys, "review", "sha256:" + "0" * 64, *flags, "--key", "alice")
        assert r.code == 2 and "exactly one" in r.err


# -- 8. verify states what it checked ---------------------------------------------------


def test_verify_checks_what_the_user_expects(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare, _ = _origin(tmp_path)
    judge = git.Repo.clone_from(str(bare.git_dir), tmp_path / "judge")
    rid = _attest(capsys, judge, "--rev", "HEAD").out.strip()
    head = judge.head.commit.hexsha
    r = run(capsys, "verify", rid, "--json", "--commit", head[:12], "--claim", "c",
            "--signer", "h200", "--repo", f"file://{bare.git_dir}")  # fmt: skip
    doc = json.loads(r.out)
    assert r.code == 0 and doc["verified"] is True, r.err
    assert doc["subject"]["commit"] == head and doc["scope"] == {} and doc["steps"]
    bundle = tmp_path / "b.json"
    assert run(capsys, "export", rid, "-o", str(bundle)).code == 0
    ledger_pem = str(Path(os.environ["LEDGER_KEYS"]) / "ledger.pem")
    off = json.loads(run(capsys, "verify", str(bundle), "--trust", ledger_pem, "--json").out)
    assert set(off) == set(doc) - {"expected"} | {"expected"}
    r = run(capsys, "verify", rid, "--json", "--claim", "other")
    assert r.code == 1 and json.loads(r.out)["verified"] is False
    r = run(capsys, "verify", "./missing.json")
    assert r.code == 2 and "no such file" in r.err
    r = run(capsys, "verify", "./missing.json", "--json")
    assert json.loads(r.out)["verified"] is False


# -- 9/10. exit codes, not-applicable, the table ---------------------------------------


def test_contradicting_scope_answers_not_applicable(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, pusher = _origin(tmp_path)
    commit_file(
        pusher,
        "qualification.toml",
        PLAN.format(reviews=0) + 'scope = { device_kind = "cuda" }\n',
        "s",
    )
    code, doc = _status(capsys, pusher, "--rev", "HEAD", "--scope", "device_kind=cpu")
    assert code == 1 and doc["claims"][0]["state"] == "not-applicable"


def test_status_table_fits_80_columns_and_names_needs_review(
    ledger: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    _, pusher = _origin(tmp_path, reviews=1)
    assert (
        _attest(capsys, pusher, "--rev", "HEAD", "--scope", "packages_digest=" + "ab" * 32).code
        == 0
    )
    r = run(capsys, "status", "--repo", str(pusher.working_tree_dir), "--rev", "HEAD")
    assert r.code == 1 and "needs-review" in r.out and "\x1b" not in r.out
    assert max(len(line) for line in r.out.splitlines()) <= 80
    assert "ab" * 32 not in r.out
