"""One exit status per meaning, for every command: 0 qualified (or done), 1 not
qualified because of the code or its evidence (or a definite negative), 2 usage or
environment, 3 not qualified only because of infrastructure. A CI retry policy
retries 3 alone, so no command may say 3 for the code's failure, nor 1 or 2 for the
host's."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import git
import pytest

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

Cap = pytest.CaptureFixture[str]


@pytest.fixture
def repo(tmp_path: Path, key_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Cap) -> Path:
    # A closed port refuses at once; its retries' backoff would only slow the table.
    monkeypatch.setattr("ledger.remote.client.RETRIES", 0)
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the outbox's folder
    assert run(capsys, "init").code == 0
    # The key speaks for this host and for the GPU host whose fault a receipt names.
    here = ("--host", socket.gethostname(), "--host", "gpu-host-7")
    assert run(capsys, "keys", "new", "runner", "--role", "runner", *here).code == 0
    r = git.Repo.init(tmp_path / "up", initial_branch="main")
    commit_file(r, "qualification.toml", PLAN, "plan")
    return Path(str(r.working_tree_dir))


def _attest(capsys: Cap, repo: Path, claim: str, outcome: str, *extra: str) -> None:
    why = ("--reason", f"{outcome} here") if outcome not in ("passed",) and not extra else ()
    res = run(
        capsys,
        "attest",
        "--claim",
        claim,
        "--check",
        "admission",
        "--outcome",
        outcome,
        *why,
        *extra,
        "--rev",
        "HEAD",
        "--repo",
        str(repo),
        "--key",
        "runner",
    )
    assert res.code == 0, res.err


XID79 = ("--reason", "NVML XID 79: GPU has fallen off the bus", "--host", "gpu-host-7")
H200 = ("--scope", "gpu_model=NVIDIA H200")


def _qualified(capsys: Cap, repo: Path) -> None:
    for c in ("a.admission", "b.admission"):
        _attest(capsys, repo, c, "passed")


def _failed(capsys: Cap, repo: Path) -> None:
    _attest(capsys, repo, "a.admission", "passed")
    _attest(capsys, repo, "b.admission", "failed")


def _infra_only(capsys: Cap, repo: Path) -> None:
    _attest(capsys, repo, "a.admission", "passed")
    _attest(capsys, repo, "b.admission", "infra-error", *XID79, *H200)


def _infra_and_missing(capsys: Cap, repo: Path) -> None:
    # b has no receipt at all: no retry of a run gives it one, so the code's side decides.
    _attest(capsys, repo, "a.admission", "infra-error", *XID79)


def _no_plan(capsys: Cap, repo: Path) -> None:
    r = git.Repo(repo)
    r.index.remove(["qualification.toml"], working_tree=True)
    r.index.commit("no plan")


def _nothing(capsys: Cap, repo: Path) -> None:
    return None


def _taken_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def _closed_port() -> str:
    """A URL nothing answers HTTP on: the connection itself fails."""
    with _taken_port() as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    return url


def _kept(capsys: Cap, repo: Path) -> None:
    # A receipt that waits in the outbox: a server not reached kept it.
    res = run(
        capsys,
        "attest",
        "--claim",
        "a.admission",
        "--check",
        "admission",
        "--outcome",
        "passed",
        "--rev",
        "HEAD",
        "--repo",
        str(repo),
        "--key",
        "runner",
        "--server",
        _closed_port(),
    )
    assert res.code == 3, res.err


STATUS = ("status", "--rev", "HEAD")

Row = tuple[str, Callable[[Cap, Path], None], tuple[str, ...], int, str]
TABLE: list[Row] = [
    ("status qualified", _qualified, STATUS, 0, "qualified: 2 of 2"),
    ("status failed", _failed, STATUS, 1, "b.admission: failed"),
    ("status infra only", _infra_only, STATUS, 3, "only because of infrastructure"),
    ("status infra beside not-run", _infra_and_missing, STATUS, 1, "not-run"),
    ("status json infra only", _infra_only, (*STATUS, "--json"), 3, '"infra_only": true'),
    ("status markdown infra only", _infra_only, (*STATUS, "--format", "markdown"), 3, "🔧"),
    ("status junit infra only", _infra_only, (*STATUS, "--format", "junit"), 3, "<error"),
    ("status check infra only", _infra_only, (*STATUS, "--format", "github-check"), 3, "failure"),
    ("status no plan", _no_plan, STATUS, 2, "no qualification.toml"),
    ("qualify no plan", _no_plan, ("qualify", "--rev", "HEAD", "--sandbox", "none"), 2, "no qu"),
    ("doctor no plan", _no_plan, ("doctor", "--rev", "HEAD", "--sandbox", "none"), 2, "no qu"),
    ("summary no plan", _no_plan, ("summary", "--rev", "HEAD"), 2, "no qualification.toml"),
    ("history", _failed, ("history", "--rev", "HEAD"), 0, "b.admission: failed"),
    ("show unknown", _nothing, ("show", "sha256:" + "0" * 64), 1, "ledger:"),
    ("unknown option", _nothing, ("status", "--no-such-option"), 2, "No such option"),
    ("attest, server not reached", _nothing, ("attest-unreachable",), 3, "kept in the outbox"),
    ("status, server not reached", _nothing, (*STATUS, "--server", "CLOSED"), 3, "cannot reach"),
    (
        "qualify, server not reached",
        _nothing,
        ("qualify", "--rev", "HEAD", "--sandbox", "none", "--server", "CLOSED"),
        3,
        "cannot reach",
    ),
    ("push, server not reached", _kept, ("push", "--server", "CLOSED"), 3, "cannot reach"),
]


@pytest.mark.parametrize(
    ("setup", "argv", "code", "said"), [r[1:] for r in TABLE], ids=[r[0] for r in TABLE]
)
def test_each_command_exits_by_what_it_found(
    repo: Path,
    capsys: Cap,
    setup: Callable[[Cap, Path], None],
    argv: tuple[str, ...],
    code: int,
    said: str,
) -> None:
    setup(capsys, repo)
    if argv == ("attest-unreachable",):
        argv = ("attest", "--claim", "a.admission", "--check", "admission", "--outcome")
        argv += ("passed", "--rev", "HEAD", "--key", "runner", "--server", _closed_port())
    argv = tuple(_closed_port() if a == "CLOSED" else a for a in argv)
    repo_arg = ("--repo", str(repo)) if argv[0] not in ("show", "push") else ()
    res = run(capsys, *argv, *repo_arg)
    assert res.code == code, (res.out, res.err)
    assert said in res.out + res.err


def test_an_infra_only_block_says_host_gpu_fault_and_retry(repo: Path, capsys: Cap) -> None:
    _infra_only(capsys, repo)
    res = run(capsys, *STATUS, "--repo", str(repo))
    assert res.code == 3, res.err
    assert "b.admission: infra-error" in res.out
    why = res.out.split("why: ", 1)[1]
    assert "gpu-host-7" in why and "NVIDIA H200" in why and "XID 79" in why
    assert "next: retry: `ledger qualify --rev" in res.out and "--claim b.admission" in res.out
    assert "not-run" not in res.out and "no receipt that counts" not in res.out
    doc = json.loads(run(capsys, *STATUS, "--repo", str(repo), "--json").out)
    b = doc["verdict"]["blockers"][0]
    assert b["state"] == "infra-error" and b["next"].startswith("retry: ")
    assert doc["verdict"]["headline"].startswith("not qualified only because of infrastructure")
    check = json.loads(run(capsys, *STATUS, "--repo", str(repo), "--format", "github-check").out)
    # Branch protection passes success, neutral and skipped: never for an unqualified head.
    assert check["conclusion"] == "failure"
    assert "gpu-host-7" in check["output"]["annotations"][0]["message"]


def test_serve_on_a_taken_port_is_the_operators_to_fix(repo: Path, capsys: Cap) -> None:
    with _taken_port() as s:
        res = run(capsys, "serve", "--port", str(s.getsockname()[1]))
    assert res.code == 2, res.err
    assert "could not start" in res.err and "--port" in res.err


def test_a_self_test_that_did_not_run_is_the_hosts(tmp_path: Path) -> None:
    from ledger.evidence.errors import UsageError
    from ledger.sandbox import resolve
    from ledger.sandbox.proof import SandboxBreach, prove

    try:
        box = resolve("bwrap")
    except UsageError as why:  # no bubblewrap here: nothing to prove
        pytest.skip(why.reason())
    assert box.base is not None and box.bwrap is not None
    # The self-test started as the pull request's process would, but its start fails:
    # it printed nothing, so it did not run.
    with pytest.raises(SandboxBreach, match="did not run") as e:
        prove(box.base, box.bwrap, lambda argv: ["/bin/true"])
    assert e.value.exit_code == 3
