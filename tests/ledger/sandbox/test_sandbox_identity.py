"""The sandbox's identity: no process that runs a pull request's code is host root.

Started by root, bubblewrap's ``--unshare-user --uid 65534`` mapped the sandbox's uid
onto host uid 0, and the kernel lets a global euid 0 write most sysctls whatever the
capability sets say: a pull request wrote ``kernel.core_pattern`` and had its own
script run as host root. Each test opens two host-global sysctls for writing (never
writing a byte) where the pull request's code runs: a `ledger run` command, a
workload's import in the fork server, a forked claim, each rank of a two-rank claim.
Each is refused; the same probe unsandboxed (``--sandbox none``, run as root here)
opens them, so a probe that found nothing because it was broken cannot pass.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import git
import pytest

from ledger.sandbox import Sandbox, find_bwrap, resolve
from ledger.sandbox.proof import SandboxBreach
from scripts.device.sandbox_attack import attacking_pr
from scripts.example_repo import make_example_repo
from tests.ledger.helpers import run

as_root = pytest.mark.skipif(
    os.geteuid() != 0 or (find_bwrap() is None and os.environ.get("CI") != "true"),
    reason="needs root (the attack is root's) and bubblewrap",
)
pytestmark = as_root

SYSCTLS = ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches")

PROBE = """
import errno as _errno, os as _os, sys as _sys

def _sysctls(where):
    got = []
    for p in {sysctls!r}:
        try:
            _os.close(_os.open(p, _os.O_WRONLY))
            got.append(p.rsplit("/", 1)[1] + "=opened")
        except OSError as e:
            got.append(p.rsplit("/", 1)[1] + "=" + _errno.errorcode.get(e.errno, "?"))
    tag = where + ":" + _os.path.basename(_sys.argv[0] or "python")
    print("\\x1eprogress sysctl-probe " + tag + " " + " ".join(got), file=_sys.stderr, flush=True)
"""

WORKLOAD_PROBE = (
    PROBE
    + """
_sysctls("import")

_FORWARDS = []


class _Probing(MoEWorkload):
    def forward(self, *args, **kwargs):
        if not _FORWARDS:  # once per process: the forked claim's own
            _FORWARDS.append(1)
            _sysctls("forward")
        return super().forward(*args, **kwargs)


def make_workload(**params):
    return _Probing(MoEConfig(**params))
"""
)


def _probed(text: str) -> dict[str, str]:
    """where -> what the probe got, from the progress lines."""
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"sysctl-probe (\S+) (core_pattern=\S+ drop_caches=\S+)", text)
    }


REFUSED = "core_pattern=EACCES drop_caches=EACCES"


def test_a_workload_cannot_open_a_host_sysctl_from_the_fork_server_or_a_forked_claim(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    example = make_example_repo(tmp_path / "repo").path
    attacking_pr(example, WORKLOAD_PROBE.format(sysctls=SYSCTLS))
    claim = ("--claim", "cleanup.all-released")
    r = run(capfd, "qualify", "--pr", "2", "--repo", str(example), *claim, "--json")
    got = _probed(r.err)
    # At import in the fork server, and in the claim process it forked.
    assert got.get("import:forkserver.py") == REFUSED, r.err[-3000:]
    # The claim process's entry point: `python -m runners.rank` (runners/rank/__main__.py).
    assert got.get("forward:__main__.py") == REFUSED, r.err[-3000:]
    [receipt] = json.loads(r.out)["receipts"]
    assert receipt["outcome"] == "passed", r.err[-3000:]
    shown = json.loads(run(capfd, "show", receipt["id"], "--json").out)
    env = shown["statement"]["predicate"]["runner"]["environment"]
    assert env["sandbox_host_uid"] == "65534"
    assert re.fullmatch(
        r"bwrap, self-test 9 of 9 refused, no devices, as given", env["sandbox_selftest"]
    )
    # The control: unsandboxed, as root, the same probe opens both.
    r = run(capfd, "qualify", "--pr", "2", "--repo", str(example), *claim, "--sandbox", "none")
    assert _probed(r.err).get("import:forkserver.py") == "core_pattern=opened drop_caches=opened"


def test_a_ledger_run_command_cannot_open_a_host_sysctl(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from tests.conftest import commit_file

    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", '[[claims]]\nname = "suite"\ncheck = "command"\n', "p")
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    code = PROBE.format(sysctls=SYSCTLS) + '\n_sysctls("run")\n'
    args = ("run", "--claim", "suite", "--rev", "main", "--repo", str(repo.working_tree_dir))
    cmd = ("--key", "runner", "--", sys.executable, "-c", code)
    r = run(capfd, *args, *cmd)
    assert r.code == 0, r.err
    assert _probed(r.err) == {"run:-c": REFUSED}, r.err
    shown = json.loads(run(capfd, "show", r.out.strip(), "--json").out)
    env = shown["statement"]["predicate"]["runner"]["environment"]
    assert env["sandbox_selftest"].startswith("bwrap, self-test 9 of 9 refused")
    # Both of what keeps one sandbox from starving another, as the host applied them
    # (bubblewrap's option or the filter; a pids cgroup where this host has one).
    from ledger.sandbox import pids
    from ledger.sandbox.proof import NO_PIDS_LIMIT, USERNS_DENIED

    assert env["sandbox_userns"] in USERNS_DENIED.values()
    limited = f"pids.max {pids.most()} per sandbox (a cgroup v1 pids cgroup of its own)"
    assert env["sandbox_pids"] == (limited if pids.controller() else NO_PIDS_LIMIT), env
    verified = run(capfd, "verify", r.out.strip())
    assert "sandbox: bwrap, self-test 9 of 9 refused" in verified.out + verified.err
    r = run(capfd, *args, "--sandbox", "none", *cmd)
    assert _probed(r.err) == {"run:-c": "core_pattern=opened drop_caches=opened"}, r.err


RANK_PROBE = """
import errno, glob, json, os, sys
import torch.distributed as dist
from runners.workloads.moe_ep import make_workload as _make

def _door(path, flags):
    try:
        os.close(os.open(path, flags, 0o600))
        return "opened"
    except OSError as e:
        return errno.errorcode.get(e.errno, "?")

def make_workload(**params):
    rank = dist.get_rank()
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    through = [f for p in pids for f in glob.glob(f"/proc/{{p}}/root{sibling}/*")]
    report = {{
        "rank": rank, "pid": os.getpid(), "pids": pids,
        "core_pattern": _door("/proc/sys/kernel/core_pattern", os.O_WRONLY),
        "drop_caches": _door("/proc/sys/vm/drop_caches", os.O_WRONLY),
        "sibling_write": _door("{sibling}/planted", os.O_WRONLY | os.O_CREAT),
        "sibling_read": _door("{sibling}/secret", os.O_RDONLY),
        "through_proc": through,
        "home": os.environ["HOME"],
    }}
    go = os.path.join(os.environ["HOME"], f"go{{rank}}")
    os.mkfifo(go, 0o600)
    print("\\x1eprogress rank-probe " + json.dumps(report), file=sys.stderr, flush=True)
    # Blocks until the parent, having read this process from outside, opens it.
    with open(go, "rb") as f:
        f.read()
    return _make(**params)
"""


def _host_view(inner: int) -> dict[str, str]:
    """The status, as the host reads it, of the sandboxed rank whose pid inside is
    ``inner``."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            status = (entry / "status").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = {k: v.strip() for k, _, v in (x.partition(":") for x in status.splitlines())}
        nspid = fields.get("NSpid", "").split()
        if len(nspid) >= 2 and nspid[-1] == str(inner) and b"runners.rank" in cmd:
            fields["ns/user"] = os.readlink(entry / "ns" / "user")
            return fields
    raise AssertionError(f"no sandboxed rank with pid {inner} inside")


def test_each_rank_of_a_two_rank_claim_is_unprivileged_and_sees_only_its_claim(
    tmp_path: Path,
) -> None:
    from runners.claim.isolated import ClaimRequest, run_claim_isolated
    from runners.contract.request import Claim

    box = resolve("auto")
    # A sibling sandbox running beside the claim, with a folder of its own.
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "secret").write_text("the sibling's")
    argv, env = box.launch(
        box.policy(scratch=sibling), [sys.executable, "-c", "import sys; sys.stdin.read()"], {}
    )
    beside = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE)
    root = tmp_path / "pr"
    root.mkdir()
    (root / "rank_probe.py").write_text(RANK_PROBE.format(sibling=sibling))
    reports: list[dict[str, Any]] = []
    seen: list[dict[str, str]] = []
    lock = threading.Lock()

    def progress(line: str) -> None:
        _, _, body = line.partition("rank-probe ")
        if not body:
            return
        doc = json.loads(body)
        view = _host_view(int(doc["pid"]))
        with lock:
            reports.append(doc)
            seen.append(view)
        with open(Path(doc["home"], f"go{doc['rank']}"), "wb"):
            pass  # the rank goes on once its pipe is opened and closed

    try:
        [r] = run_claim_isolated(
            ClaimRequest(
                Claim(
                    device="cpu",
                    claim="ep.cleanup",
                    check="cleanup",
                    params={},
                    workload_ref="rank_probe:make_workload",
                    workload_params={
                        "d_model": 32,
                        "n_layers": 1,
                        "n_heads": 2,
                        "n_experts": 4,
                        "d_ff": 64,
                        "vocab": 128,
                    },
                    observer_off=False,
                    world_size=2,
                    timeout_s=240,
                ),
                repo_root=root,
                base_root=None,
                artifact_dir=None,
            ),
            progress=progress,
            sandbox=box,
        )
    finally:
        assert beside.stdin is not None
        beside.stdin.close()
        beside.wait()
    assert sorted(d["rank"] for d in reports) == [0, 1], r.reason
    host_ns = os.readlink("/proc/self/ns/user")
    for doc, view in zip(reports, seen, strict=True):
        assert doc["core_pattern"] == "EACCES" and doc["drop_caches"] == "EACCES", doc
        # The sibling's folder is not there at all, nor through any /proc/<pid>/root.
        assert doc["sibling_write"] == "ENOENT" and doc["sibling_read"] == "ENOENT", doc
        assert doc["through_proc"] == [], doc
        # Only the claim's own processes: its ranks, their holder, bubblewrap's init.
        assert len(doc["pids"]) < 10 and 1 in doc["pids"], doc["pids"]
        assert view["Uid"].split() == ["65534"] * 4 and view["Gid"].split() == ["65534"] * 4
        assert int(view["CapEff"], 16) == 0 and view["ns/user"] != host_ns
    # Both ranks in one user namespace: the holder's.
    assert seen[0]["ns/user"] == seen[1]["ns/user"]
    assert not (sibling / "planted").exists()


def test_a_policy_that_would_run_as_host_root_runs_nothing(tmp_path: Path) -> None:
    box = resolve("auto")
    marker = tmp_path / "ran"
    scratch = tmp_path / "s"
    scratch.mkdir()
    code = f"open({str(marker)!r}, 'w').write('pull request code ran')"
    broken = Sandbox(box.mode, box.bwrap, box.base.with_(host_uid=0, host_gid=0))
    with pytest.raises(SandboxBreach, match="host uid and gid must not be 0"):
        broken.launch(broken.policy(scratch=scratch), [sys.executable, "-c", code], {})
    assert not marker.exists()


def test_a_policy_that_opens_a_door_fails_its_self_test_and_runs_nothing(tmp_path: Path) -> None:
    box = resolve("auto")
    marker = tmp_path / "ran"
    scratch = tmp_path / "s"
    scratch.mkdir()
    # Misconfigured: the whole host /tmp writable (where the self-test's sibling lies).
    broken = Sandbox(box.mode, box.bwrap, box.base.with_(writable=("/tmp",)))
    code = f"open({str(marker)!r}, 'w').write('pull request code ran')"
    with pytest.raises(SandboxBreach, match="sibling-folder"):
        broken.launch(broken.policy(scratch=scratch), [sys.executable, "-c", code], {})
    assert not marker.exists()
    # The honest policy passes the same self-test, and says so in one line.
    box.launch(box.policy(scratch=scratch), [sys.executable, "-c", code], {})
    [proof] = box.proofs.values()
    assert proof.ok and proof.summary == "self-test 9 of 9 refused, no devices, as given"
    assert proof.host_uid == 65534


def test_the_rootmap_route_maps_the_sandbox_onto_an_unprivileged_uid(tmp_path: Path) -> None:
    box = resolve("auto", environ={**os.environ, "LEDGER_SANDBOX_ROUTE": "rootmap"})
    assert box.base.route == "rootmap"
    scratch = tmp_path / "s"
    scratch.mkdir()
    code = PROBE.format(sysctls=SYSCTLS) + '\n_sysctls("rootmap")\nimport sys; sys.stdin.read()\n'
    argv, env = box.launch(box.policy(scratch=scratch), [sys.executable, "-c", code], {})
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdin is not None
    line = proc.stderr.readline()
    from ledger.sandbox.proof import read_outside

    bad, uid = read_outside(proc.pid, str(box.bwrap))
    proc.stdin.close()
    proc.wait()
    assert "core_pattern=EACCES drop_caches=EACCES" in line, line
    assert bad == [] and uid == 65534
    [proof] = box.proofs.values()
    assert proof.ok and proof.host_uid == 65534


def test_every_sandboxed_process_starts_through_the_one_launcher() -> None:
    """No module outside `ledger.sandbox` builds a bubblewrap command line or starts
    bubblewrap itself: each kind of process that runs the pull request's code goes
    through `Sandbox.launch` (self-test first) and `render` (the launcher first)."""
    root = Path(__file__).resolve().parents[3]
    found = []
    for folder in ("ledger", "runners"):
        for path in (root / folder).rglob("*.py"):
            if path.parent.name == "sandbox" and path.parent.parent.name == "ledger":
                continue
            text = path.read_text()
            for pattern in (r"\brender\([^)]*bwrap=", r"[\"']--unshare-", r"\bbwrap_path\(\)"):
                if re.search(pattern, text):
                    found.append(f"{path.relative_to(root)}: {pattern}")
    assert found == []
    from ledger.sandbox import LAUNCHER, SandboxPolicy, render

    argv = render(SandboxPolicy(), ["true"], bwrap="/usr/bin/bwrap")
    assert argv[:4] == [sys.executable, "-I", "-S", str(LAUNCHER)]


def test_a_claim_whose_sandbox_fails_its_self_test_is_an_infra_error_and_runs_nothing(
    tmp_path: Path,
) -> None:
    from runners.claim.isolated import ClaimRequest, run_claim_isolated
    from runners.contract.request import Claim

    box = resolve("auto")
    broken = Sandbox(box.mode, box.bwrap, box.base.with_(writable=("/tmp",)))
    root = tmp_path / "pr"
    root.mkdir()
    marker = tmp_path / "imported"
    (root / "wl.py").write_text(
        f"open({str(marker)!r}, 'w').write('pull request code ran')\n"
        "from runners.workloads.moe_ep import make_workload\n"
    )
    [r] = run_claim_isolated(
        ClaimRequest(
            Claim(
                device="cpu",
                claim="c.cleanup",
                check="cleanup",
                params={},
                workload_ref="wl:make_workload",
                workload_params={},
                observer_off=False,
                timeout_s=120,
            ),
            repo_root=root,
            base_root=None,
            artifact_dir=None,
        ),
        progress=lambda _m: None,
        sandbox=broken,
    )
    assert r.outcome == "infra-error", r.reason
    assert r.reason is not None and "self-test" in r.reason and "sibling-folder" in r.reason
    assert not marker.exists()


def test_the_self_test_reads_a_hidden_key_folder_and_reaches_nothing_through_its_covers(
    tmp_path: Path,
) -> None:
    """A ledger folder inside a bound one (a demo's `.ledger-demo` in the project), with
    the key folder inside it also hidden: bubblewrap's covers leave mount points, and
    only a key's content would count. Unhidden, the key is read: the probe can fail."""
    project = tmp_path / "project"
    keys = project / ".ledger" / "keys"
    keys.mkdir(parents=True)
    (keys / "runner.pem").write_text("-----BEGIN PRIVATE KEY-----\nsecret\n")
    env = {**os.environ, "LEDGER_DB": str(project / ".ledger" / "l.db"), "LEDGER_KEYS": str(keys)}
    box = resolve("auto", environ=env, read_only=[project])
    scratch = tmp_path / "s"
    scratch.mkdir()
    proof = box.prove(box.policy(scratch=scratch))
    assert proof.ok, proof.summary
    open_box = Sandbox(box.mode, box.bwrap, box.base.with_(hidden=()))
    from ledger.sandbox import render
    from ledger.sandbox.proof import prove

    policy = open_box.policy(scratch=scratch)
    bwrap = str(box.bwrap)
    leaky = prove(policy, bwrap, lambda a: render(policy, a, bwrap=bwrap), keys=[str(keys)])
    assert not leaky.ok and any(r.startswith("host-key:") for r in leaky.reached)


def test_a_folder_the_user_named_is_never_handed_to_the_sandbox(
    tmp_path: Path,
    key_dir: Path,
    repo: git.Repo,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """`ledger run --artifact /abs/*.txt`: the command writes a folder of Ledger's bound
    at that path; the user's folder keeps its owner and mode, and gets only what was
    declared, copied out after the command ended."""
    from tests.conftest import commit_file

    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.chdir(tmp_path)
    commit_file(repo, "qualification.toml", '[[claims]]\nname = "suite"\ncheck = "command"\n', "p")
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    out = tmp_path / "reports"
    out.mkdir(mode=0o755)
    (out / "keep.log").write_text("the user's own file")
    code = (
        "import os; d = " + repr(str(out)) + "\n"
        "open(os.path.join(d, 'r.txt'), 'w').write('ok')\n"
        "open(os.path.join(d, 'undeclared.bin'), 'w').write('x')\n"
        "print('uid', os.getuid(), 'sees', sorted(os.listdir(d)))\n"
    )
    args = ("run", "--claim", "suite", "--rev", "main", "--repo", str(repo.working_tree_dir))
    r = run(
        capfd,
        *args,
        "--artifact",
        str(out / "*.txt"),
        "--key",
        "runner",
        "--",
        sys.executable,
        "-c",
        code,
    )
    assert r.code == 0, r.err
    # Inside, the folder of Ledger's: empty but for what the command wrote.
    assert "uid 65534 sees ['r.txt', 'undeclared.bin']" in r.err, r.err
    st = out.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o755)
    assert sorted(p.name for p in out.iterdir()) == ["keep.log", "r.txt"]
    assert (out / "r.txt").read_text() == "ok" and (out / "r.txt").stat().st_uid == 0
    shown = json.loads(run(capfd, "show", r.out.strip(), "--json").out)
    assert [a["name"] for a in shown["statement"]["predicate"]["artifacts"]] == ["r.txt"]


def test_the_positive_control_compares_what_cuda_and_nvml_see_with_what_was_given() -> None:
    from ledger.sandbox.proof import _devices

    given = ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")
    seen = {"seen": ["/dev/nvidia0", "/dev/nvidia1"], "unopened": [], "nvml": 2, "cuda": 2}
    assert _devices(seen, given, {}) == "2 devices as given"
    # A claim's own GPU (CUDA_VISIBLE_DEVICES) and a CPU claim on a GPU host (none).
    assert _devices({**seen, "cuda": 1}, given, {"CUDA_VISIBLE_DEVICES": "1"}).endswith("as given")
    assert _devices({**seen, "cuda": 0}, given, {"CUDA_VISIBLE_DEVICES": ""}).endswith("as given")
    # A silent fall back to the CPU, a node that does not open, one missing or extra.
    assert "CUDA sees no device" in _devices({**seen, "cuda": None}, given, {})
    assert "CUDA sees 0" in _devices({**seen, "cuda": 0}, given, {"CUDA_VISIBLE_DEVICES": "0"})
    assert "do not open" in _devices({**seen, "unopened": ["/dev/nvidia1: EACCES"]}, given, {})
    assert "where" in _devices({**seen, "seen": ["/dev/nvidia0"]}, given, {})
    assert "NVML sees no" in _devices({**seen, "nvml": None}, given, {})
    assert _devices({"seen": [], "unopened": []}, (), {}) == "no devices, as given"


def test_on_the_rootmap_route_an_exec_regains_no_capability(tmp_path: Path) -> None:
    """Root of its own user namespace there: a program it execs gets no capability
    (no_new_privs), which the parent reads from outside too."""
    box = resolve("auto", environ={**os.environ, "LEDGER_SANDBOX_ROUTE": "rootmap"})
    scratch = tmp_path / "s"
    scratch.mkdir()
    argv, env = box.launch(
        box.policy(scratch=scratch),
        ["/bin/sh", "-c", "grep -E '^(Uid|Cap|NoNewPrivs)' /proc/self/status"],
        {},
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    seen = dict(line.split(":\t", 1) for line in done.stdout.splitlines())
    assert seen["Uid"].split() == ["0"] * 4, done.stdout
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(seen[cap], 16) == 0, done.stdout
    assert seen["NoNewPrivs"].strip() == "1"


def test_the_doctor_forked_in_the_sandbox_writes_its_report(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """qualify's probe before the first claim (as on a GPU host), forked from the fork
    server: its folder, made after the server's sandbox started, is handed to the
    sandbox's uid (it was not, and the probe could not read its request)."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_QUALIFY_PROBE", "1")
    assert run(capfd, "init").code == 0
    assert run(capfd, "keys", "new", "runner", "--role", "runner").code == 0
    example = make_example_repo(tmp_path / "repo").path
    r = run(
        capfd, "qualify", "--pr", "1", "--repo", str(example), "--claim", "cleanup.all-released"
    )
    assert "forked from the fork server" in r.err, r.err[-2000:]
    assert "wrote no report" not in r.err, r.err[-2000:]
    assert "cleanup.all-released passed" in r.err, r.err[-2000:]
