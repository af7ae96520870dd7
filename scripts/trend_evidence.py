"""Evidence for `ledger trend` on a CPU: a committed ledger whose receipts come from
real `ledger qualify` runs (real torch, CPU profile) on an example repository with a
base branch of two commits and a pull request of three heads.

The repository holds the reference MoE workload (``runners/workloads``, as
`scripts.example_repo` lays it out) and a plan of two of the example plan's claims,
``admission.no-oom-after-admit`` (figure: worst measured/predicted) and
``backward.full-prefix`` (figure: the claim process's peak bytes). Its remote is
``https://example.invalid/ledger/moe-trend.git``, served from a bare repository
beside it (git's ``url.<path>.insteadOf``), so ``--pr 2`` is fetched as from a host.

- ``main`` 1: the workload and the plan.
- ``main`` 2: the vocabulary grows from 512 to 2,048 tokens (the workload's default).
- PR 2 (``loss-in-float64``), each head one more commit, qualified as pushed:
  head 1 computes the router softmax and the loss in float64 (the estimator still
  prices the logits in float32: admission finds counterexamples), head 2 prices the
  logits in the loss dtype, head 3 tightens the estimator's margin from 1/8 to 1/16.

Each change is made in the source, never in a figure. Writes the run's ledger, its
public keys, one bundle per receipt, every command's output and the repository as
a git bundle into ``--out`` (default evidence/cpu-trend), replacing what is there.
Private keys stay in a temporary folder that is removed.

    .venv/bin/python scripts/trend_evidence.py [--out evidence/cpu-trend]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.example_repo import PLAN as EXAMPLE_PLAN  # noqa: E402

WORKLOADS = ROOT / "runners" / "workloads"
REMOTE = "https://example.invalid/ledger/moe-trend.git"
PR = 2
PR_BRANCH = "loss-in-float64"
CLAIMS = ("admission.no-oom-after-admit", "backward.full-prefix")
KEY = "cpu-trend"

README = """\
# Example MoE workload

A small mixture-of-experts transformer with LoRA experts (`model/`), qualified by
the plan in `qualification.toml`. Pull request 2 computes the loss in float64.
"""

# (file, old, new): each must occur once in the file before the change.
Change = tuple[str, str, str]

MAIN: list[tuple[str, list[Change]]] = [
    ("Example MoE workload and qualification plan\n", []),
    (
        "Grow the vocabulary to 2,048 tokens\n",
        [("model/workload.py", "    vocab: int = 512\n", "    vocab: int = 2048\n")],
    ),
]
HEADS: list[tuple[str, list[Change]]] = [
    (
        "Compute the router softmax and the loss in float64\n",
        [
            (
                "model/workload.py",
                "    return torch.promote_types(dtype, torch.float32)\n",
                "    return torch.promote_types(dtype, torch.float64)\n",
            ),
            (
                "model/workload.py",
                '    """Router softmax and loss: float32, or float64 when the model computes'
                ' in it."""\n',
                '    """Router softmax and loss: float64 whatever the model computes in."""\n',
            ),
        ],
    ),
    (
        "Price the logits in the loss dtype\n\nAdmission found the estimate short: the"
        " logits and their gradients are float64 now.\n",
        [
            ("model/estimator.py", "I64 = 8\n", "I64 = 8\nLOSS = 8\n"),
            ("model/estimator.py", "    logits = t * v * F32\n", "    logits = t * v * LOSS\n"),
        ],
    ),
    (
        "Tighten the estimator margin to 1/16\n",
        [("model/estimator.py", "MARGIN_DIVISOR = 8\n", "MARGIN_DIVISOR = 16\n")],
    ),
]


def plan_text() -> str:
    """The example plan's header and the two claims followed here, verbatim."""
    head, *blocks = EXAMPLE_PLAN.split("[[claims]]\n")
    kept = [b for b in blocks if any(f'name = "{c}"' in b for c in CLAIMS)]
    if len(kept) != len(CLAIMS):
        raise RuntimeError(f"the example plan no longer names {CLAIMS}")
    return head + "".join("[[claims]]\n" + b for b in kept)


class Run:
    def __init__(self, work: Path, out: Path) -> None:
        self.work, self.out = work, out
        self.repo = work / "moe-trend"
        self.origin = work / "moe-trend-origin.git"
        self.env = {
            **os.environ,
            "LEDGER_DB": str(out / "ledger.db"),
            "LEDGER_KEYS": str(work / "keys"),
            "LEDGER_CACHE": str(work / "cache"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        self.runs: list[dict[str, object]] = []
        self.ids: list[str] = []
        self.day = 1

    def ledger(self, *args: str, out: str | None = None, check: bool = True) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "ledger", *args],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=self.work,
        )
        if out is not None:
            (self.out / out).write_text(res.stdout + (res.stderr if res.returncode else ""))
        if check and res.returncode != 0:
            raise RuntimeError(f"ledger {' '.join(args)}: exit {res.returncode}\n{res.stderr}")
        return res.stdout

    def git(self, where: Path, *args: str) -> str:
        # Fixed names and dates (a day per commit): commit ids depend only on the content.
        stamp = f"2026-10-{self.day:02d}T12:00:00Z"
        env = {
            **self.env,
            "GIT_AUTHOR_NAME": "Ledger Example",
            "GIT_AUTHOR_EMAIL": "example@ledger.invalid",
            "GIT_COMMITTER_NAME": "Ledger Example",
            "GIT_COMMITTER_EMAIL": "example@ledger.invalid",
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_DATE": stamp,
        }
        res = subprocess.run(
            ["git", "-C", str(where), *args], env=env, capture_output=True, text=True, check=True
        )
        return res.stdout.strip()

    def commit(self, where: Path, message: str, changes: list[Change]) -> str:
        for rel, old, new in changes:
            path = where / rel
            text = path.read_text(encoding="utf-8")
            if text.count(old) != 1:
                raise RuntimeError(f"{rel} no longer holds {old.strip()!r} once")
            path.write_text(text.replace(old, new), encoding="utf-8")
        self.git(where, "add", "-A")
        self.git(where, "commit", "-q", "-m", message)
        self.day += 1
        return self.git(where, "rev-parse", "HEAD")

    def qualify(self, label: str, where: str, commit: str, message: str, *rev: str) -> None:
        claims = [a for c in CLAIMS for a in ("--claim", c)]
        # Relative to the work folder (every command's cwd), as the receipts need no path.
        args = ["--repo", self.repo.name, *rev, "--device", "cpu", "--key", KEY, *claims]
        t0 = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-m", "ledger", "qualify", *args, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=self.work,
        )
        wall = time.monotonic() - t0
        first = message.splitlines()[0]
        (self.out / "qualify" / f"{label}.json").write_text(res.stdout)
        (self.out / "qualify" / f"{label}.log").write_text(res.stderr)
        doc = json.loads(res.stdout)
        receipts = doc["receipts"]
        self.ids += [r["id"] for r in receipts]
        if sorted(r["claim"] for r in receipts) != sorted(CLAIMS):
            raise RuntimeError(f"{label}: qualify recorded {receipts}\n{res.stderr}")
        self.runs.append(
            {
                "label": label,
                "where": where,
                "commit": commit,
                "change": first,
                "command": f"ledger qualify {' '.join(args)}",
                "exit": res.returncode,
                "wall_s": round(wall, 1),
                "receipts": {r["claim"]: r["id"] for r in receipts},
                "outcomes": {r["claim"]: r["outcome"] for r in receipts},
            }
        )
        print(f"{label:<10} {commit[:12]} exit {res.returncode} ({wall:.1f} s) {first}")

    def main_branch(self) -> None:
        self.repo.mkdir()
        self.git(self.repo, "init", "-q", "-b", "main")
        files = {
            "README.md": README,
            "qualification.toml": plan_text(),
            "model/__init__.py": '"""Example MoE workload package."""\n',
            "model/workload.py": (WORKLOADS / "moe.py").read_text(encoding="utf-8"),
            "model/estimator.py": (WORKLOADS / "estimator.py").read_text(encoding="utf-8"),
        }
        for rel, text in files.items():
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / rel).write_text(text, encoding="utf-8")
        self.git(self.origin.parent, "init", "-q", "--bare", "-b", "main", self.origin.name)
        self.git(self.repo, "remote", "add", "origin", REMOTE)
        # Fetches and pushes of the remote go to the bare repository beside the checkout.
        self.git(self.repo, "config", f"url.{self.origin}.insteadOf", REMOTE)
        for i, (message, changes) in enumerate(MAIN, 1):
            commit = self.commit(self.repo, message, changes)
            self.git(self.repo, "push", "-q", "origin", "main")
            self.qualify(f"main-{i}", "base", commit, message, "--rev", commit)
        self.git(self.repo, "fetch", "-q", "origin")
        self.git(self.repo, "remote", "set-head", "origin", "main")

    def pull_request(self) -> None:
        """Each head is committed in a clone of the origin and pushed there, as an author
        would; the checkout sees it only by `qualify --pr`'s fetch."""
        clone = self.work / "author"
        self.git(self.work, "clone", "-q", str(self.origin), clone.name)
        self.git(clone, "checkout", "-q", "-b", PR_BRANCH)
        for i, (message, changes) in enumerate(HEADS, 1):
            commit = self.commit(clone, message, changes)
            self.git(clone, "push", "-q", "-f", "origin", f"HEAD:refs/heads/{PR_BRANCH}")
            self.git(clone, "push", "-q", "-f", "origin", f"HEAD:refs/pull/{PR}/head")
            self.qualify(f"pr{PR}-head-{i}", f"PR #{PR} head {i}", commit, message, "--pr", str(PR))

    def record(self) -> None:
        for rid in self.ids:
            self.ledger("export", rid, "-o", str(self.out / "bundles" / f"{rid[7:19]}.json"))
        (self.out / "ledger.pub.pem").write_text(self.ledger("keys", "export", "ledger"))
        (self.out / "runner.pub.pem").write_text(self.ledger("keys", "export", KEY))
        pr = ("--pr", str(PR), "--repo", self.repo.name)
        claims = [a for c in CLAIMS for a in ("--claim", c)]
        self.ledger("trend", *pr, *claims, out="trend.txt")
        self.ledger("trend", *pr, *claims, "--json", out="trend.json")
        self.ledger("status", *pr, out="status.txt", check=False)
        self.ledger("history", *pr, "--json", out="history.json")
        self.ledger("audit", out="audit.txt")
        self.git(
            self.origin,
            "bundle",
            "create",
            "-q",
            str(self.out / "repo.bundle"),
            "main",
            PR_BRANCH,
            f"refs/pull/{PR}/head",
        )
        log = self.git(self.origin, "log", "--reverse", "--format=%H %s", "main", PR_BRANCH)
        (self.out / "commits.txt").write_text(log + "\n")
        import torch

        env = {
            "ledger_source": source_state(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "machine": platform.machine(),
            "system": platform.platform(),
            "cpus": os.cpu_count(),
            "remote": REMOTE,
            "pr": PR,
            "claims": list(CLAIMS),
            "runs": self.runs,
        }
        (self.out / "runs.json").write_text(json.dumps(env, indent=2) + "\n")


def source_state() -> dict[str, object]:
    """The commit of this checkout that ran (the ledger and its runners), and any path
    that differed from it."""

    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return res.stdout.strip() if res.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {"commit": git("rev-parse", "HEAD") or None, "changed": changed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "evidence" / "cpu-trend")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    work = Path(tempfile.mkdtemp(prefix="trend-evidence-"))
    stage = work / "out"
    try:
        (stage / "qualify").mkdir(parents=True)
        (stage / "bundles").mkdir()
        run = Run(work, stage)
        run.ledger("init")
        run.ledger("keys", "new", KEY, "--role", "runner")
        run.main_branch()
        run.pull_request()
        run.record()
        readme = out / "README.md"
        kept = readme.read_text(encoding="utf-8") if readme.is_file() else None
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(stage, out)
        if kept is not None:
            (out / "README.md").write_text(kept, encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print((out / "trend.txt").read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
