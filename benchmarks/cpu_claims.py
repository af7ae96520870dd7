"""Two CPU claims run one after the other: the whole command's wall time and where it goes.

Runs ``ledger qualify --rev HEAD --claim A --claim B --device cpu --json`` (sandboxed,
as by default) on the example repository, for a baseline revision (a git worktree of
``--baseline REV``, its own code on ``PYTHONPATH``) and for the working tree, each
with a fresh ledger and a fresh ``LEDGER_CACHE``: the first run with cold caches, the
second with the caches the first left. The runs alternate between the two trees and
each figure is the median of ``--repeat`` rounds, so load from elsewhere on the host
falls on both alike.

The breakdown is read from the command's own progress lines, stamped here as each
arrives (the command's start, its first line, the doctor's line, the fork server's
"ready" line, each claim's start and end, the whole plan's line, the process's exit)
and from each receipt's ``claim_timeline_ns`` (launch to fork, fork to go, go to the
check's start, the check, the check's end to the exit proof) and
``harness_phase_times`` (the workload's load and setup inside the check).

    python -m benchmarks.cpu_claims [--baseline REV] [--claims A,B] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from scripts.ledger_run import ledger_cmd, ledger_env, ledger_show

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ("regression.24view-nograd", "cleanup.all-released")

_STAMP = re.compile(r"^\s*\d+(?:\.\d+)?s\s+(.*)$")
_CLAIM_START = re.compile(r"^\[(\d+)/(\d+)\] (\S+) \(")
_CLAIM_END = re.compile(r"^\[(\d+)/(\d+)\] (\S+) (passed|failed|inconclusive|infra-error|error)")


@dataclass
class Run:
    """One qualify command: stamps (seconds after its spawn) and its receipts' timelines."""

    wall: float = 0.0
    cpu: float | None = None
    """CPU seconds of the command and every process below it (`_Accounting`)."""
    rc: int = 0
    marks: dict[str, float] = field(default_factory=dict)
    timelines: list[dict[str, int]] = field(default_factory=list)
    phases: list[dict[str, int]] = field(default_factory=list)
    selftests: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


class _Accounting:
    """The CPU time of a command and every process below it, sandboxed ones included: a
    cgroup v1 ``cpuacct`` folder of its own, where this host has one and this process
    may write it (as root); else None."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self) -> None:
        self.folder: Path | None = self.ROOT / f"cpu-claims-{os.getpid()}-{time.time_ns()}"
        try:
            self.folder.mkdir()
        except OSError:
            self.folder = None

    def join(self) -> None:
        """In the child, before it runs the command."""
        if self.folder is not None:
            (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def close(self) -> float | None:
        if self.folder is None:
            return None
        used = int((self.folder / "cpuacct.usage").read_text()) / 1e9
        for _ in range(100):  # the command's last processes may take a moment to leave
            try:
                self.folder.rmdir()
                break
            except OSError:
                time.sleep(0.05)
        return used


def _example_repo(code: Path, dest: Path) -> None:
    """The example repository as the tree under test makes it (its module moved once)."""
    for module in ("scripts.example_repo", "runners.example_repo"):
        if (code / (module.replace(".", "/") + ".py")).exists():
            subprocess.run(
                [sys.executable, "-m", module, str(dest), "--no-remote"],
                cwd=code,
                env={**os.environ, "PYTHONPATH": str(code)},
                check=True,
                stdout=subprocess.DEVNULL,
            )
            return
    raise SystemExit(f"{code}: no example repository generator")


def _qualify(env: dict[str, str], repo: Path, claims: tuple[str, ...], cwd: Path) -> Run:
    args = [sys.executable, "-m", "ledger", "qualify", "--rev", "HEAD", "--repo", str(repo)]
    for c in claims:
        args += ["--claim", c]
    args += ["--device", "cpu", "--json"]
    run = Run()
    acct = _Accounting()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        args,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=acct.join,
    )
    assert p.stderr is not None and p.stdout is not None
    tail: list[str] = []
    for raw in p.stderr:
        at = time.perf_counter() - t0
        text = raw.decode(errors="replace").rstrip()
        tail = [*tail[-5:], text]
        m = _STAMP.match(text)
        if not m:
            continue
        line = m.group(1)
        if line.startswith("qualify:"):
            run.marks.setdefault("first line", at)
        elif line.startswith("doctor"):
            run.marks.setdefault("doctor", at)
        elif line.startswith("fork server:"):
            run.marks.setdefault("fork server ready", at)
        elif line.startswith("whole plan:"):
            run.marks.setdefault("whole plan", at)
        elif s := _CLAIM_START.match(line):
            run.marks.setdefault(f"claim {s.group(1)} start", at)
        elif e := _CLAIM_END.match(line):
            run.marks.setdefault(f"claim {e.group(1)} end", at)
    out = p.stdout.read()
    run.rc = p.wait()
    run.wall = time.perf_counter() - t0
    run.cpu = acct.close()
    run.marks["exit"] = run.wall
    try:
        doc = json.loads(out)
    except ValueError:
        raise SystemExit(f"qualify printed no JSON (exit {run.rc}): " + "\n".join(tail)) from None
    for r in doc.get("receipts", []):
        run.outcomes.append(f"{r.get('claim')}: {r.get('outcome')}")
        _ledger_show(env, cwd, str(r["id"]), run)
    return run


def _ledger_show(env: dict[str, str], cwd: Path, rid: str, run: Run) -> None:
    pred = ledger_show(env, cwd, rid)
    if pred is None:
        raise SystemExit(f"ledger show {rid} failed")
    meas = pred.get("measurements", {})
    run.timelines.append(dict(meas.get("claim_timeline_ns", {})))
    run.phases.append(dict(meas.get("harness_phase_times", {})))
    environment = pred.get("runner", {}).get("environment", {})
    run.selftests.append(str(environment.get("sandbox_selftest", "")))


def _span(marks: dict[str, float], a: str, b: str) -> float | None:
    return marks[b] - marks[a] if a in marks and b in marks else None


def breakdown(run: Run, n: int) -> dict[str, float | None]:
    """The whole command split into consecutive spans, then each claim's timeline."""
    m = {"spawn": 0.0, **run.marks}
    order = ["spawn", "first line", "doctor", "fork server ready"]
    for k in range(1, n + 1):
        order += [f"claim {k} start", f"claim {k} end"]
    order += ["whole plan", "exit"]
    seen = [k for k in order if k in m]
    rows: dict[str, float | None] = {"wall": run.wall, "cpu s (every process)": run.cpu}
    for a, b in itertools.pairwise(seen):
        rows[f"{a} -> {b}"] = _span(m, a, b)
    for k, (tl, ph) in enumerate(zip(run.timelines, run.phases, strict=False), start=1):
        for a, b in (
            ("launched", "forked"),
            ("forked", "go"),
            ("go", "check_started"),
            ("check_started", "check_finished"),
            ("check_finished", "exited"),
            ("exited", "proved"),
        ):
            if a in tl and b in tl:
                rows[f"  claim {k}: {a} -> {b}"] = (tl[b] - tl[a]) / 1e9
        for name in ("load_ns", "setup_ns"):
            if name in ph:
                rows[f"  claim {k}: check's {name[:-3]}"] = ph[name] / 1e9
    return rows


@contextmanager
def _worktree(rev: str) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="cpu-claims-baseline-"))
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), rev],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(where, ignore_errors=True)


def _pair(code: Path, claims: tuple[str, ...], scratch: Path) -> tuple[Run, Run]:
    """A fresh ledger and cache: the first run (cold), then the second (warm)."""
    home = Path(tempfile.mkdtemp(dir=scratch))
    repo = home / "repo"
    _example_repo(code, repo)
    env = ledger_env(code, home)
    ledger_cmd(env, home, "init")
    ledger_cmd(env, home, "keys", "new", "runner", "--role", "runner")
    cold = _qualify(env, repo, claims, home)
    warm = _qualify(env, repo, claims, home)
    shutil.rmtree(home, ignore_errors=True)
    return cold, warm


def _median(rows: list[dict[str, float | None]]) -> dict[str, float]:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out: dict[str, float] = {}
    for k in keys:
        vals = [v for r in rows if (v := r.get(k)) is not None]
        if vals:
            out[k] = statistics.median(vals)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1", help="revision for the baseline worktree")
    ap.add_argument("--claims", default=",".join(CLAIMS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    claims = tuple(c for c in a.claims.split(",") if c)
    if len(claims) < 1 or a.repeat < 1:
        raise SystemExit("cpu_claims: at least one claim and one round")
    results: dict[str, dict[str, list[dict[str, float | None]]]] = {}
    selftests: set[str] = set()
    with (
        tempfile.TemporaryDirectory(prefix="cpu-claims-") as scratch,
        _worktree(a.baseline) as base,
    ):
        trees = {f"baseline {a.baseline}": base, "working tree": ROOT}
        for _ in range(a.repeat):
            for name, code in trees.items():
                cold, warm = _pair(code, claims, Path(scratch))
                for which, run in (("cold", cold), ("warm", warm)):
                    if run.rc not in (0, 1) or len(run.timelines) != len(claims):
                        # Left out of the medians, said: a figure of fewer claims misleads.
                        print(f"{name} ({which}): exit {run.rc}, {run.outcomes}", file=sys.stderr)
                        continue
                    selftests.update(run.selftests)
                    per = results.setdefault(name, {}).setdefault(which, [])
                    per.append(breakdown(run, len(claims)))
    medians = {n: {w: _median(rs) for w, rs in per.items()} for n, per in results.items()}
    if a.json:
        print(json.dumps(medians, indent=2))
        return
    _print(medians, claims, a.repeat, selftests)


def _print(
    medians: dict[str, dict[str, dict[str, float]]],
    claims: tuple[str, ...],
    repeat: int,
    selftests: set[str],
) -> None:
    names = list(medians)
    cols = [(n, w) for n in names for w in ("cold", "warm")]
    print(f"claims: {', '.join(claims)}; --device cpu, sandboxed; median of {repeat} round(s), s")
    header = f"{'span':<44}" + "".join(f"{(n[:17] + ' ' + w):>23}" for n, w in cols)
    print(header)
    keys = list(dict.fromkeys(k for n, w in cols for k in medians[n][w]))
    for k in keys:
        cells = "".join(
            f"{medians[n][w][k]:>23.3f}" if k in medians[n][w] else f"{'-':>23}" for n, w in cols
        )
        print(f"{k:<44}{cells}")
    print("sandbox self-tests in the receipts: " + "; ".join(sorted(selftests)))


if __name__ == "__main__":
    main()
