"""A plan qualified whole, as a pull request's author waits for it: wall time and breakdown.

Each plan is a fresh repository whose pull request 1 makes a benign change, so the
24-view check compares the head with its base:

- ``example``: the example plan (``examples/qwen3_moe``: Qwen3-MoE + LoRA with its
  own workload and estimator, 5 claims; PR 1 adds a comment to its model file);
- ``adapter``: a third party's Qwen3-MoE + PEFT LoRA trainer through the ready
  adapter (``examples/qwen3_adapter``; PR 1 swaps the attention kernel);
- ``frozen``: the same trainer written against the earlier workload protocol
  (``tests/examples/frozen_protocol``; PR 1 adds a comment to its model file).

``ledger qualify --pr 1 --offline --gpus all --json`` runs twice on each: the first
run on a fresh ledger with empty caches (``LEDGER_CACHE``, the calibration folder),
the second on the same ledger and caches, as the author's second push would. With
``--baseline DIR`` (a checkout of an earlier revision) the same plans run under that
code first, in the same process, so both sit on one card in one run.

The breakdown is read from qualify's own progress lines, stamped here as each
arrives: its first line, the doctor's probe, the fork server ready, each claim's
start and end, the base's runs (``baseline:``), the whole plan's verdict, the exit.
The critical path is printed as the spans between consecutive events. Each claim's
own time (what its line says: a claim that finished before the doctor judged is said
once the judgement came) and, from each receipt qualify recorded (``ledger show``),
its timeline (``claim_timeline_ns``: launch, fork, the check, the exit proof) and the
harness's phases inside the check (``harness_phase_times``) follow.

    python -m benchmarks.whole_plan [--plans example,adapter,frozen] [--runs 2]
        [--baseline DIR] [--device cuda] [--profile h200] [--out DIR] [--timeout 300]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scripts.ledger_run import ledger_cmd, ledger_env, ledger_show

ROOT = Path(__file__).resolve().parents[1]
PLANS = ("example", "adapter", "frozen")
_COPIED = {"example": "examples/qwen3_moe", "frozen": "tests/examples/frozen_protocol"}

_STAMP = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(.*)$")
_START = re.compile(r"^\[(\d+)/(\d+)\] (\S+) \(")
_END = re.compile(r"^\[(\d+)/(\d+)\] (\S+) (passed|failed|inconclusive|infra-error|not run\S*)\b")
_OWN = re.compile(r"\((\d+(?:\.\d+)?) s\)")
_PROGRESS = re.compile(r"^\[(\d+)/\d+\]  (.*)$")
_FORK = re.compile(r"^fork server: .*\((\d+(?:\.\d+)?) s\)")


@dataclass
class Run:
    """One qualify command: events (seconds after its spawn), claims, exit."""

    plan: str
    code: str
    run: int
    wall: float = 0.0
    rc: int = -1
    events: list[tuple[float, str]] = field(default_factory=list)
    claims: dict[str, dict[str, float | str]] = field(default_factory=dict)
    fork_own: float | None = None
    tail: list[str] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)
    """Every line qualify said, stamped as it arrived (the claims' own progress too)."""
    inside: dict[str, dict[str, float]] = field(default_factory=dict)
    """Claim -> seconds of each span of its receipt's timeline and harness phases."""
    against_base: dict[str, Any] = field(default_factory=dict)
    """Claim -> the head's outputs against the base's as its receipt judged them (the
    24-view's ``against_base`` rows): equal under two codes where a change kept what
    the receipt says."""


def _benign_comment(repo: Path, name: str) -> None:
    import git

    r = git.Repo(repo)
    r.git.checkout("-b", "pr-1")
    with open(repo / name, "a") as f:
        f.write("\n# Reviewed: no change to what the model computes.\n")
    r.index.add([name])
    who = git.Actor("Third Party", "tp@example.invalid")
    head = r.index.commit("A comment on the model\n", author=who, committer=who)
    r.git.update_ref("refs/pull/1/head", head.hexsha)
    r.git.checkout("main")


def make_repo(plan: str, dest: Path) -> None:
    """The plan's repository with its pull request 1 (the same input for every code)."""
    if plan == "adapter":
        from scripts.device.against_base import qwen3_eager

        qwen3_eager(dest)
    elif plan in _COPIED:
        import git

        shutil.copytree(ROOT / _COPIED[plan], dest)
        for cache in dest.rglob("__pycache__"):
            shutil.rmtree(cache)
        r = git.Repo.init(dest, initial_branch="main")
        r.git.remote("add", "origin", f"https://example.invalid/qwen3-{plan}.git")
        r.git.add("-A")
        who = git.Actor("Third Party", "tp@example.invalid")
        r.index.commit("Qwen3-MoE LoRA trainer\n", author=who, committer=who)
        model = next(p for p in sorted(dest.rglob("*.py")) if p.name != "__init__.py")
        _benign_comment(dest, str(model.relative_to(dest)))
    else:
        raise SystemExit(f"whole_plan: no plan {plan!r} (one of {', '.join(PLANS)})")


def qualify(env: dict[str, str], repo: Path, cwd: Path, a: argparse.Namespace, run: Run) -> Run:
    args = [sys.executable, "-m", "ledger", "qualify", "--pr", "1", "--offline"]
    args += ["--repo", str(repo), "--device", a.device, "--gpus", "all", "--json"]
    args += ["--sandbox", a.sandbox] + (["--profile", a.profile] if a.profile else [])
    t0 = time.perf_counter()

    def line(text: str) -> None:
        at = time.perf_counter() - t0
        run.tail = [*run.tail[-11:], text]
        run.lines.append((round(at, 3), text))
        m = _STAMP.match(text)
        if m:
            _event(run, at, m.group(2))
        elif text.startswith("whole plan"):
            run.events.append((at, text[:90]))

    run.rc, out = watch(args, env, cwd, a.timeout, line)
    run.wall = time.perf_counter() - t0
    run.events.append((run.wall, "exit"))
    try:
        receipts = json.loads(out).get("receipts", [])
    except ValueError:
        receipts = []  # a run that printed no JSON: its lines say why
    for r in receipts:
        claim = str(r.get("claim"))
        predicate = ledger_show(env, cwd, str(r["id"]))
        meas = {} if predicate is None else predicate.get("measurements", {})
        run.inside[claim] = inside(meas)
        if "against_base" in meas:
            run.against_base[claim] = meas["against_base"]
    return run


def inside(meas: dict[str, Any]) -> dict[str, float]:
    """One receipt's timeline spans and harness phases (its measurements), in seconds."""
    # Every mark the receipt has (launch, fork, serving, device ready, the check, the
    # exit proof), in the order they happened.
    tl = sorted((int(ns), name) for name, ns in meas.get("claim_timeline_ns", {}).items())
    spans = {f"{a} -> {b}": (nb - na) / 1e9 for (na, a), (nb, b) in itertools.pairwise(tl)}
    for name, ns in sorted(meas.get("harness_phase_times", {}).items()):
        if isinstance(ns, int):
            spans[f"check: {name.removesuffix('_ns')}"] = ns / 1e9
    spans.update(attempts(meas.get("shapes")))
    return spans


def attempts(rows: Any) -> dict[str, float]:
    """Admission's attempts summed (rows that time them): the whole attempts, the
    measured steps inside them and the edge searches with their ballast; the rest is
    the harness's release, admission calls and step setup."""
    timed = [r for r in rows or [] if isinstance(r, dict) and isinstance(r.get("attempt_ns"), int)]
    if not timed:
        return {}
    whole = sum(int(r["attempt_ns"]) for r in timed)
    step = sum(int(r.get("duration_ns") or 0) for r in timed)
    edge = sum(int(r.get("edge_ns") or 0) for r in timed)
    return {
        f"attempts: {len(timed)} whole": whole / 1e9,
        "attempts: measured steps": step / 1e9,
        "attempts: edge search and ballast": edge / 1e9,
        "attempts: the rest": (whole - step - edge) / 1e9,
    }


def watch(
    args: list[str], env: dict[str, str], cwd: Path, bound_s: float, line: Callable[[str], None]
) -> tuple[int, bytes]:
    """Run ``args``, each line of its stderr to ``line`` as it arrives; its exit status
    and stdout. Its stdout (qualify's JSON, which outgrows a pipe's 64 KiB once the
    base's receipts are reused) goes to a file: a pipe read only at the end would block
    it, and the run would never end. Past ``bound_s`` it is killed, printing or not."""
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE)
        assert p.stderr is not None
        # A bound, not a synchronisation: a run past it is killed even when silent.
        bound = threading.Timer(bound_s, p.kill)
        bound.start()
        try:
            for raw in p.stderr:
                line(raw.decode(errors="replace").rstrip())
        finally:
            bound.cancel()
        rc = p.wait()
        out.seek(0)
        return rc, out.read()


def _event(run: Run, at: float, line: str) -> None:
    if s := _START.match(line):
        run.claims.setdefault(s.group(3), {})["start"] = at
        run.events.append((at, f"start {s.group(3)}"))
    elif (e := _END.match(line)) and e.group(3) in run.claims:
        c = run.claims[e.group(3)]
        c.update(end=at, outcome=e.group(4))
        if own := _OWN.search(line):
            # The claim's own time, as its line says: it may be said later than it ended.
            c["own"] = float(own.group(1))
        run.events.append((at, f"end {e.group(3)} {e.group(4)}"))
    elif f := _FORK.match(line):
        run.fork_own = float(f.group(1))
        run.events.append((at, "fork server ready"))
    elif line.startswith("qualify:") and not any(n == "first line" for _, n in run.events):
        run.events.append((at, "first line"))
    elif line.startswith(("doctor:", "baseline:", "whole plan")):
        run.events.append((at, line[:70]))


def _one(code_name: str, code: Path, plan: str, a: argparse.Namespace, scratch: Path) -> list[Run]:
    home = Path(tempfile.mkdtemp(prefix=f"{plan}-", dir=scratch))
    repo = home / "repo"
    make_repo(plan, repo)
    env = ledger_env(code, home)
    ledger_cmd(env, home, "init")
    ledger_cmd(env, home, "keys", "new", "runner", "--role", "runner")
    runs = []
    for k in range(1, a.runs + 1):
        r = qualify(env, repo, home, a, Run(plan=plan, code=code_name, run=k))
        runs.append(r)
        print(_summary(r), flush=True)
    shutil.rmtree(home, ignore_errors=True)
    return runs


def _summary(r: Run) -> str:
    verdicts = [str(c.get("outcome", "?")) for c in r.claims.values()]
    ok = sum(v == "passed" for v in verdicts)
    ready = next((t for t, n in r.events if n == "fork server ready"), None)
    longest = max(
        (
            (float(c["end"]) - float(c["start"]), name)
            for name, c in r.claims.items()
            if "end" in c and "start" in c
        ),
        default=(0.0, "-"),
    )
    return (
        f"{r.code:<14} {r.plan:<8} run {r.run}: {r.wall:6.1f} s, exit {r.rc}, "
        f"{ok}/{len(verdicts)} passed, fork server ready at "
        + (f"{ready:.1f} s ({r.fork_own:.1f} s own)" if ready is not None else "-")
        + f", longest claim {longest[1]} {longest[0]:.1f} s"
    )


def render(runs: list[Run]) -> str:
    """Every run's events as the critical path: each span since the previous event."""
    out = []
    for r in runs:
        out.append(f"\n{r.code} / {r.plan} / run {r.run}: {r.wall:.1f} s wall, exit {r.rc}")
        prev = 0.0
        said_by = progress(r)
        for at, name in sorted(r.events):
            out.append(f"  {at:7.2f} s  (+{at - prev:6.2f})  {name}")
            prev = at
        for name, c in r.claims.items():
            if "start" in c and "end" in c:
                span = float(c["end"]) - float(c["start"])
                own = f" ({float(c['own']):.1f} s its own)" if "own" in c else ""
                out.append(f"  claim {name:<34} {span:6.2f} s  {c.get('outcome')}{own}")
                for what, secs in r.inside.get(name, {}).items():
                    out.append(f"      {what:<34} {secs:7.3f} s")
                prev = float(c["start"])
                for at, said in said_by.get(name, []):
                    out.append(f"      (+{at - prev:6.2f} s) {said[:80]}")
                    prev = at
        out += _same_judgement(r, runs)
        if r.rc != 0:
            out += ["  last lines:", *(f"    {t}" for t in r.tail[-4:])]
    return "\n".join(out)


def progress(r: Run) -> dict[str, list[tuple[float, str]]]:
    """Each claim's own progress lines (``[k/n]  what``), stamped as they arrived: the
    spans inside its check (the base's arms, each forward, the comparisons)."""
    names: dict[str, str] = {}
    out: dict[str, list[tuple[float, str]]] = {}
    for at, text in r.lines:
        m = _STAMP.match(text)
        if not m:
            continue
        if s := _START.match(m.group(2)):
            names[s.group(1)] = s.group(3)
        elif (p := _PROGRESS.match(m.group(2))) and p.group(1) in names:
            out.setdefault(names[p.group(1)], []).append((at, p.group(2)))
    return out


def _same_judgement(r: Run, runs: list[Run]) -> list[str]:
    """Whether this run's comparisons with the base judged the same figures as the first
    run of the same plan under the other code (``before``): a faster path must not move
    what a receipt says."""
    other = next((o for o in runs if o.plan == r.plan and o.code != r.code), None)
    if other is None or r.code == "before" or not r.against_base:
        return []
    same = r.against_base == other.against_base
    return [f"  against the base: {'the same rows' if same else 'DIFFERENT rows'} as {other.code}"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", default=",".join(PLANS))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="a checkout of the earlier code")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    plans = [p for p in a.plans.split(",") if p]
    if a.runs < 1 or not plans:
        raise SystemExit("whole_plan: at least one plan and one run")
    codes = ([("before", a.baseline.resolve())] if a.baseline else []) + [("after", ROOT)]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="whole-plan-") as scratch:
        for plan in plans:
            for name, code in codes:
                runs += _one(name, code, plan, a, Path(scratch))
                _write(a.out, runs)  # what has run so far survives a cut-off call
    print(render(runs))


def _write(out: Path | None, runs: list[Run]) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "whole_plan.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    summary = "\n".join(_summary(r) for r in runs)
    (out / "whole_plan.txt").write_text(summary + "\n" + render(runs) + "\n")


if __name__ == "__main__":
    main()
