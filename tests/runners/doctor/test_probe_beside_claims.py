"""The doctor's probe runs beside the claims (`ledger.execution.preflight`), and a claim
that finished before it judged waits for the judgement to be *recorded*, not to hand its
device on: the claims after it start meanwhile (`ledger.execution.scheduler`). Before,
the scheduler waited for the probe at the first finished claim, so on one GPU every later
claim waited for the probe's seconds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import git
import pytest

from tests.ledger.helpers import run
from tests.runners.doctor.test_doctor import TOY

# The toy workload of test_doctor, its batches marked: a claim's batch of 24-token
# rows leaves a mark, and the probe's tiny batch (2 x 8) waits for that mark, so the
# probe cannot judge until the second claim has started.
MARKED = (
    TOY.replace("class Toy:", "import os, time\n\nclass Toy:")
    .replace(
        "def __init__(self, autocast=False, estimator=True):",
        "def __init__(self, autocast=False, estimator=True, marks=''):\n        self.marks = marks",
    )
    .replace(
        "    def make_batch(self, shape, seed):\n",
        "    def make_batch(self, shape, seed):\n        self._mark(shape)\n",
    )
    .replace(
        "def make_workload(**params):",
        "def _wait_for(path, bound_s):\n"
        "    # The condition is the event waited for; the bound only ends a run that\n"
        "    # would otherwise never see it (the failure this test exists for).\n"
        "    end = time.monotonic() + bound_s\n"
        "    while not os.path.exists(path) and time.monotonic() < end:\n"
        "        time.sleep(0.02)\n"
        "    return os.path.exists(path)\n\n"
        "def _mark(self, shape):\n"
        "    if shape.seq == 24:\n"
        "        open(os.path.join(self.marks, 'second-claim-started'), 'w').close()\n"
        "    elif (shape.batch, shape.seq) == (2, 8):\n"
        "        seen = _wait_for(os.path.join(self.marks, 'second-claim-started'), 60)\n"
        "        with open(os.path.join(self.marks, 'probe'), 'w') as f:\n"
        "            f.write('saw the second claim' if seen else 'never saw it')\n\n"
        "Toy._mark = _mark\n\n"
        "def make_workload(**params):",
    )
)

PLAN = """
workload = "toy_wl:make_workload"
[workload_params]
marks = "{marks}"
[[claims]]
name = "regression.first"
check = "regression-24view"
params = {{ views = 2, seq = 16 }}
[[claims]]
name = "regression.second"
check = "regression-24view"
params = {{ views = 2, seq = 24 }}
"""


def _repo(path: Path, marks: Path) -> Path:
    path.mkdir()
    (path / "toy_wl.py").write_text(textwrap.dedent(MARKED))
    (path / "qualification.toml").write_text(PLAN.format(marks=marks))
    repo = git.Repo.init(path)
    repo.index.add(["toy_wl.py", "qualification.toml"])
    actor = git.Actor("T", "t@example.invalid")
    repo.index.commit("toy", author=actor, committer=actor)
    repo.create_remote("origin", f"https://example.invalid/{path.name}.git")
    return path


def test_a_claim_after_one_that_finished_before_the_probe_judged_starts_meanwhile(
    tmp_path: Path,
    key_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "l.db"))
    monkeypatch.setenv("LEDGER_QUALIFY_PROBE", "1")
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = _repo(tmp_path / "repo", marks)
    assert run(capsys, "init").code == 0
    assert run(capsys, "keys", "new", "runner", "--role", "runner").code == 0
    r = run(
        capsys, "qualify", "--rev", "HEAD", "--device", "cpu", "--sandbox", "none",
        "--repo", str(repo),
    )  # fmt: skip
    # The probe judged only once the second claim had started: so the first claim's
    # end did not hold the second back until the judgement.
    assert (marks / "probe").read_text() == "saw the second claim", r.err
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    at = {
        what: next(i for i, ln in enumerate(lines) if what in ln)
        for what in ("[2/2] regression.second (", "doctor: 2 claim(s)", "regression.first passed")
    }
    # The second claim started before the doctor judged, and the first was recorded
    # after the judgement, its own time said (not the time it waited).
    assert at["[2/2] regression.second ("] < at["doctor: 2 claim(s)"]
    assert at["doctor: 2 claim(s)"] < at["regression.first passed"]
    h = run(capsys, "history", "--rev", "HEAD", "--repo", str(repo), "--json")
    got = sorted((e["claim"], e["outcome"]) for e in json.loads(h.out)["entries"])
    assert got == [("regression.first", "passed"), ("regression.second", "passed")], h.out
