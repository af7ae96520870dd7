"""`ledger run -- CMD ...`: run any harness's command and describe what happened.

The command runs in its own process group, with a marker in its environment
that its descendants inherit, in the directory it is given (`ledger run`
gives it a fresh worktree of the revision). Around it: the machine's
fingerprint and the command's own interpreter (`ledger.identity.interpreter`), NVML
device memory before and after (where NVML answers), wall-clock start and
finish, the exit status. Afterwards every process still in the group, or
still carrying the marker (a child that left the group with setsid), is named
as leaked, then ended; the cleanup proof says what was found and that the
group is gone. The outcome comes from the exit status, or from the result
file the command wrote (`RESULT_SCHEMA`, documented in docs/import.md).

What the command leaves (artifacts, the result file) is read as data beneath
the folder it was declared in, never through a link (`ledger.outputs`): a
symbolic link, hard link, FIFO, device or oversized file is named in the
receipt's ``refused_outputs`` and never read, and the outcome still stands.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from ledger.evidence.dsse import MAX_ENVELOPE_BYTES
from ledger.evidence.errors import UsageError
from ledger.evidence.models import Outcome
from ledger.evidence.statement import ArtifactFile, Facts, timestamp
from ledger.identity.environment import gpu_used_bytes, host_environment
from ledger.identity.interpreter import NONE, probe, scope_of
from ledger.outputs.beneath import Refused, why_not
from ledger.outputs.declared import Collected, Declared, collect, declare, refusal
from ledger.sandbox import SandboxedPopen, find_bwrap
from ledger.write.artifacts import MAX_ARTIFACT_BYTES

__all__ = ["CHECK", "RESULT_SCHEMA", "CommandRun", "run_command", "spawn"]

CHECK = "command"
VERSION = "1"
MARKER = "LEDGER_RUN_ID"
GRACE_S = 5.0
MAX_RESULT_BYTES = MAX_ENVELOPE_BYTES
"""A result file larger than a whole receipt could not be in one: refused unread."""
RESULT_SCHEMA = {
    "outcome": "passed | failed | inconclusive | refused | infra-error (required)",
    "reason": "one sentence; required for anything but passed",
    "measurements": "a JSON object (optional)",
}
# A process that dies of one of these crashed by itself: evidence against the code.
# Any other signal came from outside (the OOM killer, an operator, a timeout).
_CRASHES = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
_OUTCOMES: tuple[str, ...] = get_args(Outcome)


@dataclass
class CommandRun:
    """What `run_command` observed; `facts` turns it into a receipt's facts."""

    argv: list[str]
    returncode: int | None
    timed_out: bool
    started_ns: int
    finished_ns: int
    outcome: Outcome
    reason: str | None
    measurements: dict[str, Any]
    resources: list[dict[str, Any]]
    files: list[ArtifactFile] = field(default_factory=list)
    """The artifacts read (beneath their folders); refused ones are in `measurements`."""
    interpreter: dict[str, Any] = field(default_factory=dict)
    """What `python` on the command's PATH is (`ledger.identity.interpreter.probe`)."""

    def facts(self, claim: str) -> Facts:
        env = host_environment()
        # The machine is Ledger's; the Python and its packages are the command's.
        scope = {**env.scope, **scope_of(self.interpreter)}
        return Facts(
            claim=claim,
            check=CHECK,
            check_version=VERSION,
            parameters={"command": list(self.argv)},
            scope=scope,
            outcome=self.outcome,
            reason=self.reason,
            measurements=self.measurements,
            observer="off",
            cleanup={
                "complete": all(r["released"] for r in self.resources),
                "resources": self.resources,
                "tolerance_bytes": 0,
            },
            artifacts=[],
            supersedes=[],
            host=env.host,
            gpu_uuids=env.gpu_uuids,
            started=timestamp(self.started_ns),
            finished=timestamp(self.finished_ns),
            environment={"interpreter": str(self.interpreter.get("path", NONE))},
        )


def _strays(marker: str, pgid: int) -> dict[int, str]:
    """Live processes in the group ``pgid`` or whose environment carries ``marker``
    (inherited by every descendant, also one that left the group): pid -> name."""
    found: dict[int, str] = {}
    needle = f"{MARKER}={marker}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat.rpartition(")")[2].split()
            if fields[0] == "Z":
                continue
            if int(fields[3]) == pgid or needle in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = stat.partition("(")[2].rpartition(")")[0]
    return found


def _exe(pid: int) -> tuple[int, int] | None:
    """The file a process runs, as (device, inode): a path would be the one seen from
    the process's own mount namespace (the sandbox's launcher makes a private one)."""
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end(
    pgid: int, pids: Sequence[int], own: subprocess.Popen[bytes] | None = None
) -> tuple[bool, str]:
    """SIGTERM, a grace period, SIGKILL to the group and to the strays; prove them gone.
    ``own``: the group's leader where it is this process's child, reaped as it ends (a
    zombie still counts as the group's member, so unreaped it would hold both graces)."""
    sent: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in pids if _alive(p)]
        if not _group_alive(pgid) and not alive:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        for p in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        sent.append(signal.Signals(sig).name)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if own is not None:
                own.poll()
            if not _group_alive(pgid) and not any(_alive(p) for p in pids):
                break
            time.sleep(0.02)
    if own is not None:
        own.poll()
    gone = not _group_alive(pgid) and not any(_alive(p) for p in pids)
    did = f"sent {', '.join(sent)}; " if sent else ""
    return gone, f"{did}os.killpg({pgid}, 0) {'raised ProcessLookupError' if gone else 'succeeded'}"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


Wrap = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
"""(command line, environment) -> the same inside a sandbox (`ledger.sandbox`)."""


def spawn(
    argv: Sequence[str], env: dict[str, str], cwd: Path | None, wrap: Wrap | None = None
) -> subprocess.Popen[bytes]:
    """Start the command in its own process group; the one place it is started
    (inside the sandbox ``wrap`` builds, where there is one)."""
    cmd, env = (list(argv), env) if wrap is None else wrap(list(argv), env)
    popen = subprocess.Popen if wrap is None else SandboxedPopen
    # stdout to our stderr: the receipt id is the only thing on stdout.
    return popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=2, process_group=0)


_COPY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_COPY_CHUNK = 1024 * 1024


def copy_out(
    src: Path,
    dst: Path,
    declared: Sequence[str],
    never: Sequence[str] = (),
    deadline: float | None = None,
) -> list[Refused]:
    """The regular files the sandboxed command wrote in ``src`` (a folder of Ledger's,
    owned by the sandbox's uid) that it was declared to write (``declared``: the
    --result path and absolute --artifact globs), copied beneath ``dst`` (the folder
    the user named): never through a link, never out of ``dst``, never onto a path the
    sandbox hid (``never``: the empty files bubblewrap leaves where it covered one),
    nothing else (the reading beneath ``dst`` that follows judges what arrived).

    Each is opened without following a link and without blocking (a FIFO would wait
    for a writer forever), its kind checked on what was opened, and the copying stops
    at ``deadline`` (`time.monotonic`). Returns what was declared but not copied,
    each with why, by the path the user named."""
    refused: list[Refused] = []
    for here, dirs, files in os.walk(src, followlinks=False):
        rel = Path(here).relative_to(src)
        for name in files:
            path = Path(here, name)
            wanted = str(dst / rel / name)
            if wanted in never or not any(fnmatch.fnmatchcase(wanted, d) for d in declared):
                continue
            if deadline is not None and time.monotonic() >= deadline:
                refused.append(Refused(wanted, "not copied out by the run's deadline"))
                continue
            why = _copy_one(path, dst / rel / name, dst, deadline)
            if why is not None:
                refused.append(Refused(wanted, why))
        dirs[:] = [d for d in dirs if not Path(here, d).is_symlink()]
    return refused


def _copy_one(path: Path, target: Path, dst: Path, deadline: float | None) -> str | None:
    """Copy one file the sandbox wrote; why it was not copied, or None."""
    try:
        fd = os.open(path, _COPY_FLAGS)
    except OSError as e:
        with contextlib.suppress(OSError):
            return why_not(os.lstat(path).st_mode) or e.strerror or "cannot be opened"
        return e.strerror or "cannot be opened"
    with os.fdopen(fd, "rb") as f:
        why = why_not(os.fstat(fd).st_mode)
        if why is not None:
            return why
        if not _beneath(target, dst):
            return "outside the folder it was declared in"
        # A regular file never blocks; cleared so that a read is a plain read.
        os.set_blocking(fd, True)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        with open(target, "wb") as out:
            while chunk := f.read(_COPY_CHUNK):
                if deadline is not None and time.monotonic() >= deadline:
                    out.close()
                    target.unlink()
                    return "not copied out by the run's deadline"
                out.write(chunk)
    return None


def _beneath(path: Path, folder: Path) -> bool:
    real = os.path.realpath(path.parent)
    top = os.path.realpath(folder)
    return real == top or real.startswith(top + "/")


def run_command(
    argv: Sequence[str],
    *,
    timeout_s: float | None,
    result_file: Path | None,
    artifact_globs: Sequence[str],
    cwd: Path | None = None,
    sandbox: Wrap | None = None,
    staged: Mapping[Path, Path] | None = None,
    hidden: Sequence[str] = (),
) -> CommandRun:
    """Run `argv` in `cwd`; relative `result_file` and artifact globs are read beneath it,
    absolute ones beneath their folder (`ledger.outputs.declared`). ``staged``: (a
    folder a user named -> the folder of Ledger's the sandboxed command wrote in its
    place); what it was declared to write there is copied out before anything is read
    (never onto a ``hidden`` path)."""
    if not argv:
        raise UsageError("ledger run needs a command after --")
    marker = uuid.uuid4().hex
    env = {**os.environ, MARKER: marker}
    # Their folders are fixed now, before the command can plant anything.
    declared = [declare(g, cwd) for g in artifact_globs]
    result = None if result_file is None else declare(result_file, cwd)
    if result is not None:
        result.remove()  # only what this run writes counts
    interpreter = probe(env)
    before = gpu_used_bytes()
    started = time.time_ns()
    t0 = time.monotonic()
    proc, rc, timed_out = _wait(argv, env, cwd, sandbox, timeout_s)
    duration = time.monotonic() - t0
    strays, resources = _reap(proc, marker, sandbox)
    if timed_out:
        rc = proc.wait()
    finished = time.time_ns()
    after = gpu_used_bytes()
    m: dict[str, Any] = {
        "interpreter": interpreter,
        "exit_status": rc,
        "duration_ns": int(duration * 1e9),
        "timeout_s": timeout_s,
        "leaked_processes": [{"pid": p, "comm": n} for p, n in sorted(strays.items())],
    }
    if before is not None and after is not None:
        m["nvml_used_before_bytes"] = before
        m["nvml_used_after_bytes"] = after
        m["nvml_used_delta_bytes"] = {u: after.get(u, 0) - b for u, b in before.items()}
    wrote = [str(p) for p in [result_file, *artifact_globs] if p is not None]
    # The copies too end by the run's deadline, or a short grace after a command that
    # used all of its time: a file the command left cannot hold the run open.
    deadline = None if timeout_s is None else max(t0 + timeout_s, time.monotonic() + GRACE_S)
    uncopied: list[Refused] = []
    for theirs, mine in (staged or {}).items():
        absolute = [w for w in wrote if w.startswith("/")]
        uncopied += copy_out(mine, theirs, absolute, hidden, deadline)
    result_at = None if result is None else str(result.folder / result.rel)
    refused = [r for r in uncopied if r.path != result_at]
    withheld = next((r for r in uncopied if r.path == result_at), None)
    outcome, reason = _outcome(rc, timed_out, timeout_s, result, m, refused, withheld)
    got = collect(declared, MAX_ARTIFACT_BYTES)
    refused.extend(got.refused)
    if refused:
        m["refused_outputs"] = [refusal(r) for r in refused]
    if got.unmatched:
        m["artifact_globs_unmatched"] = got.unmatched
    outcome, reason = _kept(outcome, reason, got)
    return CommandRun(
        argv=list(argv),
        returncode=rc,
        timed_out=timed_out,
        started_ns=started,
        finished_ns=finished,
        outcome=outcome,
        reason=reason,
        measurements=m,
        resources=resources,
        files=got.files,
        interpreter=interpreter,
    )


def _wait(
    argv: Sequence[str],
    env: dict[str, str],
    cwd: Path | None,
    sandbox: Wrap | None,
    timeout_s: float | None,
) -> tuple[subprocess.Popen[bytes], int | None, bool]:
    """Start the command and wait for it, within ``timeout_s``: the process, its return
    code (None where it timed out, still running) and whether it timed out."""
    try:
        proc = spawn(argv, env, cwd, sandbox)
    except OSError as e:
        raise UsageError(f"cannot run {argv[0]}: {e.strerror}") from None
    timed_out = False
    try:
        rc: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out, rc = True, None
    finally:
        if proc.poll() is None and not timed_out:
            # Ctrl-C or an error in this process: the command goes with it.
            _end(proc.pid, [], proc)
    return proc, rc, timed_out


def _reap(
    proc: subprocess.Popen[bytes], marker: str, sandbox: Wrap | None
) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """End what the command left behind (its marked processes) and say it: the strays
    by pid, and the cleanup's resources (the process, its group) with their proof."""
    # The sandbox's own init may still be exiting after its parent returned: not a
    # leak (and nothing inside outlives it: the pid namespace ends with it).
    bwrap = find_bwrap() if sandbox is not None else None
    own = (os.stat(bwrap).st_dev, os.stat(bwrap).st_ino) if bwrap is not None else None
    strays = {
        p: n
        for p, n in _strays(marker, proc.pid).items()
        if p != proc.pid and (own is None or _exe(p) != own)
    }
    gone, why = _end(proc.pid, list(strays), proc)
    leaked = ", ".join(f"pid {p} ({n})" for p, n in sorted(strays.items()))
    resources = [
        {
            "kind": "process",
            "id": str(proc.pid),
            "released": proc.returncode is not None,
            "proof": f"reaped by waitpid (returncode {proc.returncode})",
        },
        {
            "kind": "process-group",
            "id": str(proc.pid),
            "released": gone and not strays,
            "proof": (f"left behind after the command exited: {leaked}; " if strays else "") + why,
        },
    ]
    return strays, resources


def _kept(outcome: Outcome, reason: str | None, got: Collected) -> tuple[Outcome, str | None]:
    """A pass whose declared outputs could not all be kept is not a pass; any other
    outcome stands (a failure is recorded as one, whatever it left behind)."""
    if outcome == "passed" and got.refused:
        r = got.refused[0]
        return "inconclusive", f"declared artifact {r.path} was refused: {r.why}"
    if outcome == "passed" and got.unmatched:
        return "inconclusive", f"declared artifact {got.unmatched[0]!r} matched no file"
    return outcome, reason


def _outcome(
    rc: int | None,
    timed_out: bool,
    timeout_s: float | None,
    result: Declared | None,
    m: dict[str, Any],
    refused: list[Refused],
    withheld: Refused | None = None,
) -> tuple[Outcome, str | None]:
    """The outcome, the command's own whatever it did: a hang past the timeout, a
    signal (it can send itself any), a crash, no result file or a malformed one are
    failures (never an infra-error, which only the host's own evidence makes: the
    command could hide a failure behind one); otherwise the result file when declared,
    else the exit status. A result file refused unread (appended to ``refused``; or
    ``withheld``: not copied out of the sandbox's folder) leaves the exit status alone:
    a failure stays one, a zero status cannot pass (inconclusive)."""
    if timed_out:
        return "failed", f"timed out after {timeout_s:g} s; its process group was killed"
    assert rc is not None
    if rc < 0:
        sig = signal.Signals(-rc)
        m["signal"] = sig.name
        if sig in _CRASHES:
            return "failed", f"the command crashed: killed by {sig.name}"
        return "failed", f"the command was killed by {sig.name} (not by this runner)"
    if result is None:
        return ("passed", None) if rc == 0 else ("failed", f"the command exited with status {rc}")
    try:
        if withheld is not None:
            raise withheld
        raw = result.read(MAX_RESULT_BYTES)
    except FileNotFoundError:
        return "failed", f"the command exited with status {rc} without writing {result.text}"
    except Refused as r:
        refused.append(r)
        why = f"result file refused ({r.path}: {r.why})"
        if rc != 0:
            return "failed", f"the command exited with status {rc}; its {why}"
        return "inconclusive", f"{why}: the exit status alone cannot pass a run that declares one"
    try:
        doc = json.loads(raw)
    except ValueError as e:
        return "failed", f"result file {result.text} is not JSON: {e}"
    problem = _result_problem(doc)
    if problem:
        return "failed", f"result file {result.text}: {problem}"
    m["result"] = doc.get("measurements", {})
    outcome: Outcome = doc["outcome"]
    if outcome == "infra-error":
        # The command's word, not the host's evidence.
        return "failed", f"the result file says infra-error (the command's word): {doc['reason']}"
    if outcome == "passed" and rc != 0:
        return "failed", f"the result file says passed but the command exited with status {rc}"
    return outcome, doc.get("reason") if outcome != "passed" else None


def _result_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return "must hold a JSON object"
    extra = sorted(set(doc) - set(RESULT_SCHEMA))
    if extra:
        return f"unknown keys {extra} (known: {sorted(RESULT_SCHEMA)})"
    if doc.get("outcome") not in _OUTCOMES:
        return f"outcome must be one of {', '.join(_OUTCOMES)}, got {doc.get('outcome')!r}"
    if doc["outcome"] != "passed" and not isinstance(doc.get("reason"), str):
        return f"outcome {doc['outcome']} needs a reason"
    if not isinstance(doc.get("measurements", {}), dict):
        return "measurements must be a JSON object"
    return None
