"""Every statement this host signs on the write path is in its journal.

The journal is written by the write path's signer (`ledger.write.journal.sign`),
not by the evidence format: each way a receipt or a review is signed here
(`attest`, `run`, `import`, `review`, `supersede`, and a claim's results on this
host or a Ray worker, `record_results`) must leave its line, or `ledger monitor`
would name our own receipts as signed elsewhere with a copy of the key.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path

import git
import pytest

from ledger.evidence.dsse import decode_payload, parse_envelope
from ledger.evidence.keys import KeyDir
from ledger.evidence.statement import ArtifactFile, build_review, sign_statement
from ledger.execution.receipts import record_results
from ledger.identity.revision import Revision
from ledger.write.ingest import Recorded
from ledger.write.journal import read_journal
from ledger.write.record import open_recorder
from runners.contract.result import infra_error
from tests.conftest import commit_file
from tests.ledger.helpers import run

ROOT = Path(__file__).resolve().parents[3]

PLAN = """
[[claims]]
name = "suite.acceptance"
check = "command"
"""


def _journal(path: Path, keyid: str) -> set[str]:
    return read_journal(path).get(keyid, set()) if path.exists() else set()


def _id(out: str) -> str:
    rid = out.strip().splitlines()[-1]
    assert rid.startswith("sha256:"), out
    return rid


def test_each_signing_path_writes_the_journal(
    repo: git.Repo,
    key_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    journal = tmp_path / "journal.jsonl"
    monkeypatch.setenv("LEDGER_JOURNAL", str(journal))
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", PLAN, "plan")
    assert run(capsys, "init").code == 0
    for name, role in (("runner", "runner"), ("reviewer", "reviewer")):
        assert run(capsys, "keys", "new", name, "--role", role).code == 0
    keys = KeyDir(key_dir)
    runner, reviewer = keys.load("runner"), keys.load("reviewer")
    target = ("--rev", "main", "--repo", str(repo.working_tree_dir), "--key", "runner")
    signed: dict[str, str] = {}

    attested = run(
        capsys, "attest", "--unplanned", "--claim", "a.b", "--outcome", "passed", *target
    )
    assert attested.code == 0, attested.err
    signed["attest"] = _id(attested.out)

    ran = run(
        capsys, "run", "--claim", "suite.acceptance", *target, "--", sys.executable, "-c", "pass"
    )
    assert ran.code == 0, ran.err
    signed["run"] = _id(ran.out)

    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuite name="s" tests="1"><testcase classname="t" name="a"/></testsuite>')
    imported = run(
        capsys, "import", "junit", str(junit), "--claim", "suite.unit", "--unplanned", *target
    )
    assert imported.code == 0, imported.err
    signed["import"] = _id(imported.out)

    reviewed = run(capsys, "review", signed["attest"], "--concur", "--key", "reviewer")
    assert reviewed.code == 0, reviewed.err
    signed["review"] = _id(reviewed.out)

    failed = run(
        capsys,
        "attest",
        "--unplanned",
        "--claim",
        "a.c",
        "--outcome",
        "failed",
        "--reason",
        "flaky",
        *target,
    )
    assert failed.code == 0, failed.err
    superseded = run(capsys, "supersede", _id(failed.out), "--reason", "flaky", "--key", "runner")
    assert superseded.code == 0, superseded.err
    signed["supersede"] = _id(superseded.out)

    # A claim's results, as the local executor and a Ray worker sign them (`record_results`):
    # into the local ledger, and through a recorder that sends them on (a worker's server).
    rev = Revision(repo="github.com/org/repo", commit="a" * 40, tree="b" * 40)
    result = infra_error(
        claim="memory.no-oom",
        check="admission",
        version="1",
        params={},
        reason="x",
        scope={"device_kind": "cpu"},
        started_ns=1,
        finished_ns=2,
    )
    [local] = record_results(open_recorder(None, None), runner, rev, [result], tmp_path)
    signed["qualify"] = local.id
    sent = _Sent()
    [remote] = record_results(sent, runner, rev, [result], tmp_path)
    signed["ray worker"] = remote.id

    on_host = _journal(journal, runner.keyid) | _journal(journal, reviewer.keyid)
    missing = {path: rid for path, rid in signed.items() if rid not in on_host}
    assert not missing, f"signed without a journal line: {missing}"
    assert signed["review"] in _journal(journal, reviewer.keyid)

    # The format alone signs and writes nothing: a statement signed outside the write
    # path (a copy of the key elsewhere) is what the monitor is there to find.
    before = journal.read_text()
    sign_statement(build_review(signed["run"], "concur", "elsewhere"), reviewer)
    assert journal.read_text() == before


class _Sent:
    """A recorder that keeps what it would send, as a Ray worker's does to its server."""

    where = "a server"
    stores_artifacts = False

    def record(
        self, envelopes: Sequence[bytes], artifacts: Sequence[ArtifactFile] = ()
    ) -> list[Recorded]:
        from ledger.evidence.canonical import receipt_id

        out = []
        for env in envelopes:
            rid = receipt_id(decode_payload(parse_envelope(env)))
            out.append(Recorded(rid, "receipt", None, False))
        return out


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def test_only_the_write_paths_signer_signs_statements() -> None:
    """No module of ledger/ signs a statement past the journal: the format's signing
    functions are called by `ledger.write.journal` alone, and every executor signs a
    claim's results through `record_finished` and `record_results`, which sign through it."""
    signers = {"sign_statement", "sign_payload"}
    callers = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "ledger").rglob("*.py")
        if signers & _calls(p) and p.parts[-2:] != ("evidence", "statement.py")
    )
    assert callers == ["ledger/write/journal.py"], callers
    for executor in ("local_run.py", "ray_worker.py"):
        assert "record_finished" in _calls(ROOT / "ledger" / "execution" / executor), executor
    receipts = _calls(ROOT / "ledger" / "execution" / "receipts.py")
    assert {"record_results", "sign_and_record"} <= receipts
    record = (ROOT / "ledger" / "write" / "record.py").read_text()
    assert "from ledger.write.journal import sign" in record
