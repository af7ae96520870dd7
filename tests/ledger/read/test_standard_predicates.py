"""Standard predicates out: `export --format test-result` and `summary --pr N`, checked
against the published predicate definitions (the in-toto-attestation package's
protobuf bindings) and, for the signed summary, verified with securesystemslib."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import git
import pytest
from google.protobuf.json_format import ParseDict
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.predicates.vsa.v1.vsa_pb2 import VerificationSummary
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.exceptions import VerificationError as SslibVerificationError

from ledger.evidence.keys import KeyDir, active_ledger_key
from ledger.store.store import Store, resolve_url
from tests.conftest import commit_file
from tests.ledger.evidence.test_interop import sslib_key
from tests.ledger.helpers import run

PLAN = """\
[[claims]]
name = "suite.all"
check = "import-junit"
cleanup = false

[[claims]]
name = "suite.cmd"
check = "command"
"""
PR = 3


@pytest.fixture
def pr_repo(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    commit_file(repo, "qualification.toml", PLAN, "plan")
    head = commit_file(repo, "model/b.py", "y = 2\n", "change")
    repo.git.update_ref(f"refs/pull/{PR}/head", head)
    repo.git.reset("--hard", "HEAD~1")  # main stays at the plan commit
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    return repo


def _in_toto_checked(stmt: dict[str, Any], predicate_message: Any) -> Any:
    """Parse with the published bindings (unknown fields refused) and validate."""
    Statement.copy_from_pb(ParseDict(stmt, statement_pb2.Statement())).validate()
    return ParseDict(stmt["predicate"], predicate_message)


def _summary_checked(stmt: dict[str, Any]) -> tuple[Any, list[str]]:
    """The summary against the package's VSA v1 binding, and its levels against the
    SLSA spec: the binding declares `verifiedLevels` a single string, the spec an
    array of strings (in-toto/attestation#425), so that one field is checked apart."""
    levels = stmt["predicate"]["verifiedLevels"]
    assert isinstance(levels, list) and all(isinstance(x, str) for x in levels)
    rest = {
        **stmt,
        "predicate": {k: v for k, v in stmt["predicate"].items() if k != "verifiedLevels"},
    }
    return _in_toto_checked(rest, VerificationSummary()), levels


def _junit(tmp_path: Path, failed: bool) -> Path:
    body = '<failure message="boom"/>' if failed else ""
    f = tmp_path / ("fail.xml" if failed else "ok.xml")
    f.write_text(f'<testsuite><testcase classname="m" name="t">{body}</testcase></testsuite>')
    return f


def _import(capsys: pytest.CaptureFixture[str], repo: git.Repo, xml: Path) -> str:
    r = run(
        capsys,
        "import",
        "junit",
        str(xml),
        "--claim",
        "suite.all",
        "--pr",
        str(PR),
        "--repo",
        str(repo.working_tree_dir),
        "--key",
        "runner",
    )
    return r.out.strip()


def test_export_test_result_is_an_in_toto_test_result_statement(
    pr_repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = pr_repo.commit(f"refs/pull/{PR}/head").hexsha
    for failed, result in ((False, "PASSED"), (True, "FAILED")):
        rid = _import(capsys, pr_repo, _junit(tmp_path, failed))
        out = tmp_path / f"{result}.json"
        r = run(capsys, "export", rid, "--format", "test-result", "-o", str(out))
        assert r.code == 0, r.err
        stmt = json.loads(out.read_text())
        pred = _in_toto_checked(stmt, test_result_pb2.TestResult())
        assert pred.result == result
        assert stmt["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
        tests = list(pred.failed_tests if failed else pred.passed_tests)
        assert tests == ["suite.all"]
        [subject] = stmt["subject"]
        assert subject["digest"] == {"gitCommit": head}
        assert subject["annotations"] == {"sourceRefs": [f"refs/pull/{PR}/head"]}
        assert pred.configuration[0].digest["sha256"] == rid.removeprefix("sha256:")


def _summary(
    capsys: pytest.CaptureFixture[str], repo: git.Repo, out: Path
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    r = run(
        capsys,
        "summary",
        "--pr",
        str(PR),
        "--repo",
        str(repo.working_tree_dir),
        "-o",
        str(out),
    )
    env = json.loads(out.read_text())
    stmt = json.loads(base64.b64decode(env["payload"]))
    return r.code, env, stmt


def test_summary_is_a_signed_slsa_verification_summary_of_the_status_answer(
    pr_repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo_dir = str(pr_repo.working_tree_dir)
    head = pr_repo.commit(f"refs/pull/{PR}/head").hexsha
    rid = _import(capsys, pr_repo, _junit(tmp_path, False))
    code, env, stmt = _summary(capsys, pr_repo, tmp_path / "s1.json")
    # One required claim has no evidence yet: the summary says FAILED, as status does.
    status = run(capsys, "status", "--pr", str(PR), "--repo", repo_dir, "--json")
    assert code == status.code == 1
    pred, levels = _summary_checked(stmt)
    assert stmt["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert pred.verification_result == "FAILED"
    assert levels == ["LEDGER_QUALIFIED_suite.all"]
    [subject] = stmt["subject"]
    assert subject["digest"] == {"gitCommit": head}
    assert subject["annotations"] == {"sourceRefs": [f"refs/pull/{PR}/head"]}
    repo_id = json.loads(status.out)["subject"]["repo"]
    assert pred.resource_uri == f"git+{repo_id}"
    plan_digest = hashlib.sha256(PLAN.encode()).hexdigest()
    assert pred.policy.digest["sha256"] == plan_digest
    assert [a.digest["sha256"] for a in pred.input_attestations] == [rid.removeprefix("sha256:")]

    cmd = run(
        capsys,
        "run",
        "--claim",
        "suite.cmd",
        "--pr",
        str(PR),
        "--repo",
        repo_dir,
        "--key",
        "runner",
        "--",
        sys.executable,
        "-c",
        "pass",
    )
    assert cmd.code == 0, cmd.err
    code, env, stmt = _summary(capsys, pr_repo, tmp_path / "s2.json")
    assert code == 0
    pred, levels = _summary_checked(stmt)
    assert pred.verification_result == "PASSED"
    assert sorted(levels) == [
        "LEDGER_QUALIFIED_suite.all",
        "LEDGER_QUALIFIED_suite.cmd",
    ]

    # Signed by the ledger key in DSSE: securesystemslib verifies it, and not a tampered twin.
    info = active_ledger_key(Store.open(resolve_url(None)).keys())
    public = KeyDir.default().load(info.name).public
    keys = [sslib_key(public)]
    assert len(SslibEnvelope.from_dict(copy.deepcopy(env)).verify(keys, 1)) == 1
    stmt["predicate"]["verificationResult"] = "PASSED"
    stmt["predicate"]["verifiedLevels"].append("LEDGER_QUALIFIED_forged")
    forged = {**env, "payload": base64.b64encode(json.dumps(stmt).encode()).decode()}
    with pytest.raises(SslibVerificationError):
        SslibEnvelope.from_dict(copy.deepcopy(forged)).verify(keys, 1)


def test_summary_on_a_terminal_needs_a_file_or_dash(
    pr_repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """No base64 envelope dumped on a terminal: without -o the command refuses and
    names -o; `-o -` prints it, `-o FILE` writes it."""
    args = ("summary", "--pr", str(PR), "--repo", str(pr_repo.working_tree_dir))
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(sys.stdout, "isatty", lambda: True)
        r = run(capsys, *args)
        assert r.code == 2 and "-o FILE" in r.err and r.out == ""
        r = run(capsys, *args, "-o", "-")
        assert json.loads(r.out)["payloadType"] == "application/vnd.in-toto+json"
    r = run(capsys, *args)
    assert json.loads(r.out)["payload"]  # a pipe takes the envelope as before


def test_summary_under_another_plan_is_an_unsigned_what_if(
    pr_repo: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import(capsys, pr_repo, _junit(tmp_path, False))
    # A laxer plan that only asks for the claim that is qualified.
    lax = tmp_path / "lax.toml"
    lax.write_text(PLAN.split("[[claims]]")[0] + "[[claims]]" + PLAN.split("[[claims]]")[1])
    out = tmp_path / "lax.json"
    r = run(
        capsys, "summary", "--pr", str(PR), "--repo", str(pr_repo.working_tree_dir),
        "--plan", str(lax), "-o", str(out),
    )  # fmt: skip
    # Under its committed plan the head is not qualified: nothing may be signed PASSED.
    assert r.code == 1 and "what-if, nothing signed: PASSED" in r.err, r.err
    doc = json.loads(out.read_text())
    assert "payload" not in doc and "signatures" not in doc
    assert (
        doc["what_if"].startswith("unsigned: --plan") and "not the governing plan" in doc["what_if"]
    )
    assert doc["statement"]["predicate"]["verificationResult"] == "PASSED"
