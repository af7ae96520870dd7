"""Claims side by side: `ledger qualify` serial against `--gpus 0,1`, locally and on Ray.

Qualifies the same plan (four claims of the reference workload, each about
half a second of CPU work once forked from a warm fork server) of the
example repository four ways, in one run, on this host's logical devices:
one claim at a time (the serial baseline) and ``--gpus 0,1`` (two claims at
once, each on a device of its own), each a `ledger qualify` process as a user
runs it (its own start and torch import included), timed in turns, the
median of ``--repeat`` rounds after a warm-up run; then through ``--executor
ray`` against a local Ray cluster with one and with two logical GPUs, a
cluster each in a process of its own, timed in turns (the median of
``--repeat`` runs after each job's first, which starts Ray's workers, their
fork servers and checkouts, and is printed apart; these run inside the Ray
driver, whose torch is imported once). Each run is a fresh ledger; the
figure is the median of the rounds' ratios of two devices over one (target:
<= 0.6), locally and on Ray; locally also of the claims alone (from the fork
server ready to the verdict, by the progress clock), apart from the start that
both ways pay alike.

    python benchmarks/qualify_parallel.py [--claims 4] [--no-ray] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger.cli import main as ledger_main  # noqa: E402
from scripts.example_repo import make_example_repo  # noqa: E402

CLAIM = """
[[claims]]
name = "bench.{i}"
check = "regression-24view"
params = {{ views = 24, seq = 32 }}
"""


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ledger(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = ledger_main(list(args))
    return code, out.getvalue() + err.getvalue()


def _local(work: Path, repo: Path, plan: Path, gpus: str | None) -> dict[str, Any]:
    """One `ledger qualify` process, as a user runs it (its own torch import counts), on
    a fresh ledger in ``work``."""
    work.mkdir()
    env = {
        **os.environ,
        "LEDGER_DB": f"sqlite:///{work / 'l.db'}",
        "LEDGER_KEYS": str(work / "keys"),
    }
    ledger = [sys.executable, "-m", "ledger"]
    for setup in (["init"], ["keys", "new", "runner", "--role", "runner"]):
        subprocess.run([*ledger, *setup], env=env, capture_output=True, check=True)
    extra = ["--gpus", gpus] if gpus else []
    argv = [*ledger, "qualify", "--rev", "HEAD", "--repo", str(repo), "--plan", str(plan),
            *extra, "--json"]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    ready = re.search(r"^ *([0-9.]+)s +fork server: torch", done.stderr, re.M)
    verdict = re.search(r"^ *([0-9.]+)s +whole plan:", done.stderr, re.M)
    return {
        "wall_s": wall,
        "exit": done.returncode,
        "outcomes": _outcomes(done.stdout),
        # When the claims could start: the fork server ready, as the progress clock says.
        "server_ready_s": float(ready.group(1)) if ready else None,
        # The claims themselves: from the server ready to the verdict (the part that
        # two devices can halve; what comes before is paid alike by both ways).
        "claims_s": float(verdict.group(1)) - float(ready.group(1)) if ready and verdict else None,
    }


def _local_ways(base: Path, repo: Path, plan: Path, repeat: int) -> dict[str, Run]:
    """Serial and ``--gpus 0,1``, timed in turns (serial first, then the other first, ...)
    so that a machine's load reaches both alike; each way's figure is its median run, the
    ratio the median of the rounds' ratios."""
    names = ("local serial", "local --gpus 0,1")
    gpus = {"local serial": None, "local --gpus 0,1": "0,1"}
    _local(base / "warm-up", repo, plan, "0,1")  # the page cache, bytecode, learned modules
    runs: dict[str, list[Run]] = {n: [] for n in names}
    for r in range(max(1, repeat)):
        for name in names if r % 2 == 0 else names[::-1]:
            runs[name].append(
                _local(base / f"{name}-{r}".replace(" ", "_"), repo, plan, gpus[name])
            )
        print(f"  round {r + 1}: " + ", ".join(
            f"{n} {runs[n][-1]['wall_s']:.1f} s" for n in names), file=sys.stderr)  # fmt: skip
    out: dict[str, Run] = {}
    for name in names:
        walls = [x["wall_s"] for x in runs[name]]
        out[name] = {**runs[name][-1], "wall_s": statistics.median(walls), "runs_s": walls}
    pairs = list(zip(runs[names[0]], runs[names[1]], strict=True))
    out[names[1]]["to_serial"] = statistics.median(b["wall_s"] / a["wall_s"] for a, b in pairs)
    if all(a["claims_s"] and b["claims_s"] for a, b in pairs):
        out[names[1]]["claims_to_serial"] = statistics.median(
            b["claims_s"] / a["claims_s"] for a, b in pairs
        )
    return out


def _outcomes(text: str) -> list[str]:
    start = text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
        return sorted(x["outcome"] for x in doc["receipts"])
    except ValueError:
        return []


@contextlib.contextmanager
def _ray_cluster(work: Path, repo: Path, plan: Path, gpus: int) -> Iterator[Callable[[], Run]]:
    """A local Ray cluster with ``gpus`` logical GPUs, a ledger server, and the worker's
    key in the workers' environment; yields what runs `ledger qualify --executor ray`."""
    import ray

    from ledger.evidence.keys import KeyDir
    from ledger.service.run import start

    db = f"sqlite:///{work / 'server.db'}"
    keys, worker_keys = work / "keys", work / "worker-keys"
    with _env(LEDGER_DB=db, LEDGER_KEYS=str(keys), LEDGER_OUTBOX=str(work / "outbox")):
        _ledger("init")
        with _env(LEDGER_KEYS=str(worker_keys)):
            _ledger("keys", "new", "worker", "--role", "runner")
            _, pem = _ledger("keys", "export", "worker")
        (work / "worker.pem").write_text(pem)
        _ledger("keys", "add", str(work / "worker.pem"), "--name", "worker", "--role", "runner")
        srv = start(db, KeyDir(keys))
        env = {"LEDGER_KEYS": str(worker_keys), "LEDGER_OUTBOX": str(work / "worker-outbox")}
        ray.init(
            num_cpus=4,
            num_gpus=gpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=40,  # logging.ERROR
            runtime_env={"env_vars": env},
        )

        def run() -> Run:
            t0 = time.perf_counter()
            code, text = _ledger(
                "qualify", "--rev", "HEAD", "--repo", str(repo), "--plan", str(plan),
                "--executor", "ray", "--server", srv.url, "--key", "worker", "--json",
            )  # fmt: skip
            return {
                "wall_s": time.perf_counter() - t0,
                "exit": code,
                "outcomes": _outcomes(text),
                # Whether the run found warm workers: how many ran it, how many unpacked.
                "workers": len(set(re.findall(r"worker pid (\d+)\)", text))),
                "unpacked": text.count("(unpacked here)"),
            }

        try:
            yield run
        finally:
            ray.shutdown()
            srv.stop()


Run = dict[str, Any]
MARK = "@@ "
"""Starts a line of a Ray way's process that its parent reads."""


def _ray_way(work: Path, repo: Path, plan: Path, gpus: int) -> None:
    """A Ray way in a process of its own (a Ray driver has one cluster): the job's first
    run, then a timed run for each ``go`` line on stdin, each reported on stdout."""
    with _ray_cluster(work, repo, plan, gpus) as run:
        # Ray keeps a job's workers, and each worker's fork server and checkout, for the
        # tasks that follow. The first run starts them (what one `ledger qualify` process
        # pays: a job of its own); the runs after it find them.
        first = run()
        print(MARK + json.dumps({"first_run_s": first["wall_s"]}), flush=True)
        for line in sys.stdin:
            if line.strip() == "go":
                print(MARK + json.dumps(run()), flush=True)


class _Way:
    """The parent's handle on a Ray way's process."""

    def __init__(self, work: Path, repo: Path, plan: Path, gpus: int) -> None:
        work.mkdir()
        argv = [sys.executable, __file__, "--ray-way", str(gpus), "--work", str(work),
                "--repo", str(repo), "--plan", str(plan)]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        self.first_run_s = float(self._read()["first_run_s"])

    def _read(self) -> Run:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return dict(json.loads(line[len(MARK) :]))
        raise RuntimeError(f"the Ray way exited ({self.proc.wait()})")

    def run(self) -> Run:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def _ray_ways(base: Path, repo: Path, plan: Path, repeat: int) -> dict[str, Run]:
    """Ray with one and with two logical GPUs, a cluster each, timed in turns (one, two;
    two, one; ...) so that the load of a machine shared with other work reaches both
    alike; each way's figure is its median run, and their ratio the median of the
    rounds' ratios."""
    names = ("ray, 1 logical GPU", "ray, 2 logical GPUs")
    ways: list[_Way] = []
    try:
        # One after the other: each first run starts its workers alone.
        for i, name in enumerate(names):
            ways.append(_Way(base / f"ray-{i + 1}", repo, plan, i + 1))
            print(f"  {name}: first run {ways[-1].first_run_s:.1f} s", file=sys.stderr)
        runs: list[list[Run]] = [[], []]
        for r in range(max(1, repeat)):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                runs[i].append(ways[i].run())
            print(f"  round {r + 1}: " + ", ".join(
                f"{n} {rs[-1]['wall_s']:.1f} s" for n, rs in zip(names, runs, strict=True)
            ), file=sys.stderr)  # fmt: skip
    finally:
        for w in ways:
            w.close()
    out: dict[str, Run] = {}
    for name, way, rs in zip(names, ways, runs, strict=True):
        walls = [x["wall_s"] for x in rs]
        last = rs[-1]
        out[name] = {**last, "wall_s": statistics.median(walls), "runs_s": walls,
                     "first_run_s": way.first_run_s}  # fmt: skip
    out[names[1]]["to_ray_serial"] = statistics.median(
        b["wall_s"] / a["wall_s"] for a, b in zip(runs[0], runs[1], strict=True)
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=4)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per way (median)")
    ap.add_argument("--json", action="store_true")
    for hidden in ("--ray-way", "--work", "--repo", "--plan"):  # a Ray way's own process
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.ray_way:
        _ray_way(Path(a.work), Path(a.repo), Path(a.plan), int(a.ray_way))
        return {}
    with tempfile.TemporaryDirectory(prefix="ledger-bench-par-") as d:
        base = Path(d)
        repo = make_example_repo(base / "repo", with_remote=False).path
        plan = base / "plan.toml"
        plan.write_text(
            'workload = "model.workload:make_workload"\n'
            "[workload_params]\nd_model = 64\nn_layers = 2\n"
            + "".join(CLAIM.format(i=i) for i in range(a.claims))
        )
        ways: dict[str, dict[str, Any]] = _local_ways(base, repo, plan, a.repeat)
        if not a.no_ray:
            ways.update(_ray_ways(base, repo, plan, a.repeat))
    serial = ways["local serial"]["wall_s"]
    doc = {
        "claims": a.claims,
        "cpus": os.cpu_count(),
        "ways": ways,
        "local_ratio": ways["local --gpus 0,1"]["to_serial"],
        "local_claims_ratio": ways["local --gpus 0,1"].get("claims_to_serial"),
    }
    if "ray, 2 logical GPUs" in ways:
        doc["ray_ratio"] = ways["ray, 2 logical GPUs"]["wall_s"] / serial
        doc["ray_ratio_to_ray_serial"] = ways["ray, 2 logical GPUs"]["to_ray_serial"]
    if a.json:
        print(json.dumps(doc, indent=2))
        return doc
    print(f"{a.claims} claims (regression-24view, reference MoE on CPU), {os.cpu_count()} CPUs")
    print(f"{'way':24} {'wall s':>8} {'/ serial':>9}  outcomes")
    for name, w in ways.items():
        outs = ",".join(sorted(set(w["outcomes"]))) or "-"
        where = f", {w['workers']} worker(s), {w['unpacked']} unpacked" if "workers" in w else ""
        print(
            f"{name:24} {w['wall_s']:8.1f} {w['wall_s'] / serial:9.2f}  {outs} "
            f"(exit {w['exit']}{where})"
        )
    ready = ", ".join(
        f"{n} {w['server_ready_s']:.1f} s" for n, w in ways.items() if w.get("server_ready_s")
    )
    print(f"fork server ready (last run): {ready}")
    par = ways["local --gpus 0,1"]
    if "claims_to_serial" in par:
        print(
            f"local claims alone (fork server ready to verdict, last run): serial "
            f"{ways['local serial']['claims_s']:.1f} s, --gpus 0,1 {par['claims_s']:.1f} s; "
            f"median ratio {par['claims_to_serial']:.2f}"
        )

    print(f"target: two devices <= 0.60 x serial; local {doc['local_ratio']:.2f}", end="")
    if "ray_ratio" in doc:
        print(f", ray {doc['ray_ratio']:.2f} ({doc['ray_ratio_to_ray_serial']:.2f} x ray serial)")
        firsts = ", ".join(
            f"{name} {w['first_run_s']:.1f} s" for name, w in ways.items() if "first_run_s" in w
        )
        print(f"ray, first run of the job (starts the workers and their fork servers): {firsts}")
        for name, w in ways.items():
            if "runs_s" in w:
                runs = " ".join(f"{x:.1f}" for x in w["runs_s"])
                print(f"{name}: median of the runs {runs} s")
        print("ray, 2 logical GPUs / 1: the median of the rounds' ratios")
    else:
        print()
    return doc


if __name__ == "__main__":
    main()
