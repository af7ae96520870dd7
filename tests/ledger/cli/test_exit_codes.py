"""Exit statuses a CI retry policy can act on: 3 only where infrastructure alone kept a
revision from qualifying (or a receipt from passing), 1 wherever the code was judged."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from ledger.cli._common import open_store
from ledger.cli.qualify import qualify_exit
from ledger.cli.run import exit_for
from ledger.identity import source
from ledger.plans.governing import identify
from ledger.qualification.report import StatusReport
from ledger.read.query import query_status
from tests.conftest import commit_file
from tests.ledger.helpers import run

PLAN = """
[[claims]]
name = "a.admission"
check = "admission"
cleanup = false

[[claims]]
name = "b.admission"
check = "admission"
cleanup = false
"""


@pytest.fixture
def upstream(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> git.Repo:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    return r


def _attest(
    capsys: pytest.CaptureFixture[str], r: git.Repo, claim: str, outcome: str
) -> tuple[str, str, str]:
    res = run(
        capsys,
        "attest",
        "--claim",
        claim,
        "--check",
        "admission",
        "--outcome",
        outcome,
        *(("--reason", f"{outcome} here") if outcome != "passed" else ()),
        "--rev",
        "HEAD",
        "--repo",
        str(r.working_tree_dir),
        "--key",
        "runner",
    )
    assert res.code == 0, res.err
    return res.out.strip().split()[0], claim, outcome


def _report(tmp_path: Path, r: git.Repo) -> StatusReport:
    ident = identify(source.open_repo(Path(str(r.working_tree_dir))), rev="HEAD")
    return query_status(open_store(str(tmp_path / "l.db")), ident, claims=(), scope={})


def test_infra_errors_alone_blocking_exit_3(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = [_attest(capsys, upstream, "a.admission", "infra-error")]
    ran.append(_attest(capsys, upstream, "b.admission", "passed"))
    report = _report(tmp_path, upstream)
    assert not report.qualified
    assert qualify_exit(ran, report.to_json()) == 3


def test_a_failure_beside_an_infra_error_exits_1(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = [_attest(capsys, upstream, "a.admission", "infra-error")]
    ran.append(_attest(capsys, upstream, "b.admission", "failed"))
    assert qualify_exit(ran, _report(tmp_path, upstream).to_json()) == 1


def test_a_blocking_claim_this_run_did_not_try_exits_1(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # b.admission has no evidence at all: a retry of this run would not give it any.
    ran = [_attest(capsys, upstream, "a.admission", "infra-error")]
    assert qualify_exit(ran, _report(tmp_path, upstream).to_json()) == 1


def test_an_earlier_counterexample_is_not_washed_out_by_a_retry(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _attest(capsys, upstream, "a.admission", "failed")
    ran = [_attest(capsys, upstream, "a.admission", "infra-error")]
    ran.append(_attest(capsys, upstream, "b.admission", "passed"))
    assert qualify_exit(ran, _report(tmp_path, upstream).to_json()) == 1


def test_qualified_exits_0(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = [_attest(capsys, upstream, c, "passed") for c in ("a.admission", "b.admission")]
    assert qualify_exit(ran, _report(tmp_path, upstream).to_json()) == 0


def test_a_run_that_measured_nothing_is_never_green(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for c in ("a.admission", "b.admission"):
        _attest(capsys, upstream, c, "passed")
    ran = [_attest(capsys, upstream, "a.admission", "infra-error")]
    assert qualify_exit(ran, _report(tmp_path, upstream).to_json()) == 3


def test_without_a_verdict_to_ask_the_run_was_not_judged() -> None:
    # Through a server that was not reached (the receipts wait in the outbox).
    assert qualify_exit([("i", "a", "passed")], None) == 3


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        (["passed"], 0),
        (["passed", "infra-error"], 3),
        (["infra-error", "infra-error"], 3),
        (["infra-error", "failed"], 1),
        (["inconclusive", "infra-error"], 1),
        (["refused"], 1),
    ],
)
def test_run_and_import_exit_as_their_receipts_say(outcomes: list[str], code: int) -> None:
    if code == 0:
        exit_for(outcomes)
        return
    with pytest.raises(SystemExit) as e:
        exit_for(outcomes)
    assert e.value.code == code


JUNIT_ERROR = """<testsuite name="s" tests="1">
<testcase classname="t" name="test_setup"><error message="fixture broke"/></testcase>
</testsuite>"""


def test_an_import_of_errors_only_exits_3(
    upstream: git.Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT_ERROR)
    r = run(
        capsys,
        "import",
        "junit",
        str(report),
        "--claim",
        "suite.unit",
        "--unplanned",
        "--rev",
        "HEAD",
        "--repo",
        str(upstream.working_tree_dir),
        "--key",
        "runner",
    )
    assert r.code == 3, r.err
    assert r.out.strip().startswith("sha256:")
