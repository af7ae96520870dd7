"""`ledger qualify --gpus`: claims side by side, each on devices of its own (logical
devices on this CPU host), a failing or hanging claim never holding up another, Ctrl-C
ending all of them; and qualify's messages."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import git
import pytest

from ledger.evidence.errors import UsageError
from ledger.execution.devices import Device, DevicePool, parse_gpus
from tests.ledger.helpers import run
from tests.ledger.probe_repo import claim, make_probe_repo, notes


def _runner(capsys: pytest.CaptureFixture[str], rid: str) -> dict[str, object]:
    shown = json.loads(run(capsys, "show", rid, "--json").out)
    return dict(shown["statement"]["predicate"]["runner"])


def test_parse_gpus_and_a_pool_that_never_hands_a_device_out_twice() -> None:
    h200 = [Device("0", "GPU-a"), Device("1", "GPU-b")]
    assert parse_gpus("all", h200) == h200
    assert parse_gpus("1", h200) == [h200[1]]
    assert [d.index for d in parse_gpus("0,1,2", [])] == ["0", "1", "2"]  # logical
    for bad in ("2", "0,0", "x", ""):
        with pytest.raises(UsageError):
            parse_gpus(bad, h200)
    pool = DevicePool(parse_gpus("0,1,2", []))
    a = pool.take(2)
    assert a is not None and pool.take(2) is None
    b = pool.take(1)
    assert b is not None and {d.index for d in a} & {d.index for d in b} == set()
    pool.give_back(a)
    again = pool.take(2)
    assert again is not None and [d.index for d in again] == ["0", "1"]


def test_claims_run_side_by_side_and_a_crash_or_hang_stalls_no_other(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = (
        claim("a.hangs", "hang", timeout_s="20")
        + claim("b.crashes", "crash")
        + claim("c.passes")
        + claim("d.passes")
    )
    repo = make_probe_repo(tmp_path / "repo", plan)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--gpus", "0,1", "--json")
    assert r.code == 1, r.err
    outcomes = {x["claim"]: x["outcome"] for x in json.loads(r.out)["receipts"]}
    assert outcomes == {
        "a.hangs": "failed",
        "b.crashes": "failed",
        "c.passes": "passed",
        "d.passes": "passed",
    }
    lines = r.err.splitlines()
    # Two claims were running at once, on different devices.
    side = [x for x in lines if "running: " in x and " | " in x]
    assert side and "slot 0" in side[0] and "slot 1" in side[0], r.err
    # The hanging claim held one device; the others ran and were recorded before it ended.
    done = {n: next(i for i, x in enumerate(lines) if f"] {n} " in x and "-> sha256:" in x)
            for n in outcomes}  # fmt: skip
    assert done["c.passes"] < done["a.hangs"] and done["d.passes"] < done["a.hangs"]
    assert "timed out after 20 s" in lines[done["a.hangs"]]
    # Each claim process saw only its own device; the receipts say which.
    seen = {n["mode"]: n["cvd"] for n in notes(r.err) if n.get("event") == "setup"}
    assert seen["hang"] in ("0", "1") and seen["plain"] in ("0", "1")
    ids = {x["claim"]: x["id"] for x in json.loads(r.out)["receipts"]}
    env = _runner(capsys, ids["c.passes"])["environment"]
    assert env["executor"] == "local" and env["executor_devices"] in ("0", "1")  # type: ignore[index]


def test_ctrl_c_stops_every_claim_and_removes_every_worktree(
    tmp_path: Path, ledger_env: Path, key_dir: Path
) -> None:
    repo = make_probe_repo(tmp_path / "repo", claim("a.hangs", "hang") + claim("b.hangs", "hang"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "LEDGER_KEYS": str(key_dir)}
    p = subprocess.Popen(
        [sys.executable, "-m", "ledger", "qualify", "--rev", "HEAD", "--repo", str(repo),
         "--gpus", "0,1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stderr is not None
    hanging = 0
    seen: list[str] = []
    for line in p.stderr:  # wait until both claims' workloads are running
        seen.append(line)
        hanging += "probe: hanging now" in line
        if hanging == 2:
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    wt = git.Repo(repo).git.worktree("list", "--porcelain")
    assert len([x for x in wt.splitlines() if x.startswith("worktree ")]) == 1
    # Worktrees, claim requests, the fork server's socket, artifacts: all gone.
    left = [p.name for p in tmp.iterdir()]
    owned = ("ledger-rev-", "ledger-base-", "ledger-claim-", "ledger-fork-", "ledger-artifacts-")
    assert [n for n in left if n.startswith(owned)] == [], left
    for n in notes(seen):  # the claim processes are gone
        assert not Path(f"/proc/{n['pid']}").exists() or _zombie(int(str(n["pid"])))
    audit = subprocess.run(
        [sys.executable, "-m", "ledger", "audit", "--json"], env=env, capture_output=True, text=True
    )
    # The keys and the governing plan (recorded before the first claim): no receipt.
    assert json.loads(audit.stdout)["entries"] == 3


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def test_qualify_says_what_it_skips_and_what_will_not_count_before_it_runs(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = (
        claim("runs.on-cuda-only", scope='{ device_kind = "cuda" }')
        + '[[claims]]\nname = "suite.pytest"\ncheck = "import-junit"\ncleanup = false\n'
        + '[[claims]]\nname = "smoke.script"\ncheck = "command"\ncleanup = false\n'
    )
    repo = make_probe_repo(tmp_path / "repo", plan)
    r = run(capsys, "qualify", "--rev", "HEAD", "--repo", str(repo), "--device", "cpu", "--json")
    lines = r.err.splitlines()
    # The first line names the revision and the plan, before torch or the fork server.
    assert "qualify: revision" in lines[0] and "3 claim(s) in the plan" in lines[0]
    assert "0.0s" in lines[0] or "0.1s" in lines[0] or float(lines[0].split("s")[0]) < 1.0
    # import/run claims are skipped with the command that feeds them, not refused.
    assert any("suite.pytest: skipped" in x and "`ledger import`" in x for x in lines)
    assert any("smoke.script: skipped" in x and "`ledger run`" in x for x in lines)
    note = next(i for i, x in enumerate(lines) if "runs.on-cuda-only: note:" in x)
    start = next(i for i, x in enumerate(lines) if "runs.on-cuda-only (cleanup) ..." in x)
    assert note < start and "device_kind=cuda; this run is on cpu" in lines[note]
    doc = json.loads(r.out)
    assert [x["claim"] for x in doc["receipts"]] == ["runs.on-cuda-only"]
    assert doc["skipped"] == ["suite.pytest", "smoke.script"]
    # The whole verdict: none of the three qualifies here.
    assert r.code == 1 and "whole plan: not qualified: 0 of 3 required claims" in r.err


def test_gradient_compare_arms_fork_from_the_servers_of_their_own_trees(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.example_repo import make_example_repo

    ex = make_example_repo(tmp_path / "ex")
    r = run(
        capsys, "qualify", "--pr", "1", "--repo", str(ex.path),
        "--claim", "numerics.gradient-compare", "--json",
    )  # fmt: skip
    [rec] = json.loads(r.out)["receipts"]
    assert rec["outcome"] == "passed", r.err
    arms = [x for x in r.err.splitlines() if "gradient arm " in x]
    assert len(arms) >= 2 and all("forked from its tree's fork server" in x for x in arms), arms
    assert any("/ledger-base-" in x for x in arms) and any("/ledger-rev-" in x for x in arms)


def test_a_claim_needing_more_devices_than_given_says_so_and_bad_lists_are_refused(
    tmp_path: Path, ledger_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_probe_repo(tmp_path / "repo", claim("wide", world_size="3") + claim("narrow"))
    args = ("qualify", "--rev", "HEAD", "--repo", str(repo))
    for bad in ("0,0", "x"):
        r = run(capsys, *args, "--gpus", bad)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "--gpus" in r.err
    r = run(capsys, *args, "--gpus", "0,1", "--json")
    assert "wide: not run: it needs 3 devices of its own and --gpus gives 2" in r.err
    assert [x["claim"] for x in json.loads(r.out)["receipts"]] == ["narrow"]


WATCH = """
import json, sys
import psutil

class Watch:
    # The moment the parent first looks up the runners' catalog (its torch import).
    def find_spec(self, name, path, target=None):
        if name == "runners.api" and not seen:
            kids = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
            seen.update(torch="torch" in sys.modules,
                        server=any("runners.fork.forkserver" in k for k in kids))
        return None

seen = {}
sys.meta_path.insert(0, Watch())
from ledger.cli import main
code = main(sys.argv[2:])
open(sys.argv[1], "w").write(json.dumps({**seen, "code": code}))
"""


def test_the_fork_server_is_launched_before_qualify_imports_torch(
    tmp_path: Path, ledger_env: Path, key_dir: Path
) -> None:
    """The server's imports (torch, the workload) and the parent's own import of the
    runners run at the same time, not one after the other."""
    repo = make_probe_repo(tmp_path / "repo", claim("c.passes"))
    (tmp_path / "watch.py").write_text(WATCH)
    out = tmp_path / "seen.json"
    env = {**os.environ, "LEDGER_KEYS": str(key_dir)}
    argv = [sys.executable, str(tmp_path / "watch.py"), str(out),
            "qualify", "--rev", "HEAD", "--repo", str(repo)]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    seen = json.loads(out.read_text())
    assert seen == {"torch": False, "server": True, "code": 0}, done.stderr
    assert "fork server: torch" in done.stderr
