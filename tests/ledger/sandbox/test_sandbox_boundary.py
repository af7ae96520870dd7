"""The sandbox is a boundary: each door an attacker tried, shut, with its control.

Every test runs a probe under the real bubblewrap sandbox (`ledger.sandbox.resolve`)
and the same probe unsandboxed (mode ``none``) as the control, so that a probe that
found nothing because it was broken cannot pass: the control must reach the door.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.sandbox import Sandbox, find_bwrap, resolve

needs_bwrap = pytest.mark.skipif(
    find_bwrap() is None and os.environ.get("CI") != "true", reason="no bubblewrap"
)
pytestmark = needs_bwrap


def _run(box: Sandbox, scratch: Path, code: str, env: dict[str, str]) -> str:
    """Run ``code`` under ``box`` with ``scratch`` as its private folder; its stdout."""
    argv, child_env = box.launch(box.policy(scratch=scratch), [sys.executable, "-c", code], env)
    done = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "runner.pem").write_text("-----BEGIN PRIVATE KEY-----\nsecret-runner-key\n")
    return keys


def _boxes(keys: Path) -> tuple[Sandbox, Sandbox, dict[str, str]]:
    env = {**os.environ, "LEDGER_KEYS": str(keys)}
    return resolve("auto", environ=env, hide=[keys]), Sandbox("none"), env


WALK = """
import glob, os
found = []
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in pids:
    pats = [f"/proc/{{pid}}/root{keys}/*.pem", f"/proc/{{pid}}/cwd{keys}/*.pem"]
    for f in [g for pat in pats for g in glob.glob(pat)]:
        try:
            found.append(open(f).read().strip().splitlines()[-1])
        except OSError:
            pass
    try:
        if b"LEDGER_KEYS" in open(f"/proc/{{pid}}/environ", "rb").read():
            found.append("environ:" + pid)
    except OSError:
        pass
print(len(pids), " ".join(sorted(set(found))) or "nothing")
"""


def test_no_host_process_is_visible_so_no_proc_root_leads_to_a_key(
    tmp_path: Path, keys: Path
) -> None:
    box, none, env = _boxes(keys)
    # The qualifier's own process, as the one whose /proc/<pid>/root the attack walked.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env
    )
    try:
        scratch = tmp_path / "s"
        scratch.mkdir()
        count, got = _run(box, scratch, WALK.format(keys=keys), env).split(" ", 1)
        # Its own pid namespace: the probe, and bubblewrap's init.
        assert int(count) <= 3 and got == "nothing"
        control = _run(none, scratch, WALK.format(keys=keys), env).split(" ", 1)[1]
        assert "secret-runner-key" in control
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()


CONNECT = """
import socket
out = []
for path in {paths!r}:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        out.append("connected:" + path.lstrip("\\0"))
    except OSError:
        pass
    s.close()
print(" ".join(out) or "nothing")
"""

_PG_SOCKETS = ("/run/postgresql/.s.PGSQL.5432", "/var/run/postgresql/.s.PGSQL.5432")


@contextlib.contextmanager
def _listeners(tmp_path: Path) -> Iterator[list[str]]:
    """Unix listeners outside the sandbox: in the host's /tmp, in /run where it is
    writable, and in the abstract namespace."""
    paths = [str(tmp_path / "host.sock")]
    run = Path("/run") / f"ledger-test-{secrets.token_hex(4)}.sock"
    if os.access("/run", os.W_OK):
        paths.append(str(run))
    paths.append("\0ledger-test-" + secrets.token_hex(4))
    socks = []
    for p in paths:
        s = socket.socket(socket.AF_UNIX)
        s.bind(p)
        s.listen(4)
        socks.append(s)
    try:
        yield paths
    finally:
        for s in socks:
            s.close()
        run.unlink(missing_ok=True)


def test_no_host_unix_socket_is_reachable(tmp_path: Path, keys: Path) -> None:
    box, none, env = _boxes(keys)
    scratch = tmp_path / "s"
    scratch.mkdir()
    with _listeners(tmp_path) as paths:
        pg = [p for p in _PG_SOCKETS if os.path.exists(p)][:1]
        code = CONNECT.format(paths=[*paths, *pg])
        assert _run(box, scratch, code, env) == "nothing"
        # The control reaches every listener (and PostgreSQL's socket where one exists).
        control = _run(none, scratch, code, env).split()
        assert len(control) == len(paths) + len(pg), control


DAEMON = """
import ctypes, os, signal, sys
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, {name!r}.encode(), 0, 0, 0)  # PR_SET_NAME
        for fd in (0, 1, 2):
            os.close(fd)
        signal.pause()
    os._exit(0)
os.waitpid(pid, 0)
print("left")
"""


def _named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
    return found


def test_nothing_a_sandboxed_command_starts_outlives_it(tmp_path: Path, keys: Path) -> None:
    box, none, env = _boxes(keys)
    scratch = tmp_path / "s"
    scratch.mkdir()
    name = "lgr" + secrets.token_hex(4)
    assert _run(box, scratch, DAEMON.format(name=name), env) == "left"
    # The command has exited: its pid namespace ended with it, and the daemon was
    # killed then. Seen now, it can only be on its way out: each pid found must
    # report its exit (a pidfd turns readable) without anyone signalling it.
    for pid in _named(name):
        with contextlib.suppress(ProcessLookupError):
            fd = os.pidfd_open(pid)
            try:
                ready, _, _ = select.select([fd], [], [], 60)
            finally:
                os.close(fd)
            assert ready, f"pid {pid} ({name}) outlived the sandboxed command"
    control = "ctl" + secrets.token_hex(4)
    assert _run(none, scratch, DAEMON.format(name=control), env) == "left"
    left = _named(control)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left, "the control's daemon should have outlived its command"


CROSS = """
import os
wrote = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    # Only a process working in the victim's folder: the unsandboxed control must not
    # write into the working folder of every process on the machine.
    try:
        if os.readlink(f"/proc/{{pid}}/cwd") != {victim!r}:
            continue
    except OSError:
        continue
    for target in (f"/proc/{{pid}}/cwd/PWNED", f"/proc/{{pid}}/root{victim}/PWNED"):
        try:
            with open(target, "w") as f:
                f.write("x")
            wrote.append(target)
        except OSError:
            pass
try:
    with open({victim!r} + "/PWNED", "w") as f:
        f.write("x")
    wrote.append("direct")
except OSError:
    pass
print(" ".join(wrote) or "nothing")
"""


def test_one_run_cannot_write_into_another_runs_folders(tmp_path: Path, keys: Path) -> None:
    box, none, env = _boxes(keys)
    victim = tmp_path / "victim"
    victim.mkdir()
    # Another run's sandboxed process, working in its own folder (its worktree).
    argv, venv = box.launch(
        box.policy(scratch=victim, chdir=victim),
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        env,
    )
    other = subprocess.Popen(argv, env=venv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == b"up"
        attacker = tmp_path / "attacker"
        attacker.mkdir()
        assert _run(box, attacker, CROSS.format(victim=str(victim)), env) == "nothing"
        assert not (victim / "PWNED").exists()
        # Unsandboxed, the same code writes there.
        assert _run(none, attacker, CROSS.format(victim=str(victim)), env) != "nothing"
        assert (victim / "PWNED").exists()
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait()


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_seen_from_the_host_the_sandboxed_process_holds_no_capability(
    tmp_path: Path, keys: Path
) -> None:
    box, _, env = _boxes(keys)
    scratch = tmp_path / "s"
    scratch.mkdir()
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    argv, child_env = box.launch(box.policy(scratch=scratch), [sys.executable, "-c", code], env)
    proc = subprocess.Popen(argv, env=child_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        from runners.harness.processes import descendants

        inside = [p for p, i in descendants(proc.pid).items() if i.comm.startswith("python")]
        assert inside
        for pid in inside:
            st = _status(pid)
            for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
                assert int(st[cap], 16) == 0, (cap, st[cap])
            assert st["NoNewPrivs"] == "1"
            # Its pid here is not its pid inside: a namespace of its own.
            assert len(st["NSpid"].split()) == 2
            # Never host root: the launcher dropped to the policy's unprivileged uid
            # before bubblewrap started (docs/security.md), all four ids.
            assert st["Uid"].split() == [str(box.base.host_uid)] * 4, st["Uid"]
            assert st["Gid"].split() == [str(box.base.host_gid)] * 4, st["Gid"]
            assert st["Groups"] == "", st["Groups"]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
