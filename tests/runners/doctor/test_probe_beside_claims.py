"""The doctor's probe runs beside the claims (`ledger.execution.preflight`), and a claim
that finished before it judged waits for the judgement to be *recorded*, not to hand its
device on: the claims after it start meanwhile (`ledger.execution.scheduler`). Before,
the scheduler waited for the probe at the first finished claim, so on one GPU every later
claim waited for the probe's seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ledger.helpers import run
from tests.runners.doctor.test_doctor import TOY, toy_repo

# The toy workload of test_doctor, its batches marked: a claim's batch of 24-token
# rows says so (a file, then a datagram to the probe's socket), and the probe's tiny
# batch (2 x 8) waits for that word, so the probe cannot judge until the second claim
# has started. The probe binds its socket before it looks for the file: whichever comes
# first, the word is not missed.
MARKED = (
    TOY.replace("class Toy:", "import os, socket\n\nclass Toy:")
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
        "def _started(marks):\n"
        "    # Waited for as an event; the deadline only ends a run that would otherwise\n"
        "    # never see it (the failure this test exists for).\n"
        "    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:\n"
        "        s.bind(os.path.join(marks, 'probe.sock'))\n"
        "        if os.path.exists(os.path.join(marks, 'second-claim-started')):\n"
        "            return True\n"
        "        s.settimeout(60)\n"
        "        try:\n"
        "            return s.recv(16) == b'started'\n"
        "        except TimeoutError:\n"
        "            return False\n\n"
        "def _mark(self, shape):\n"
        "    if shape.seq == 24:\n"
        "        open(os.path.join(self.marks, 'second-claim-started'), 'w').close()\n"
        "        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:\n"
        "            try:\n"
        "                s.sendto(b'started', os.path.join(self.marks, 'probe.sock'))\n"
        "            except OSError:\n"
        "                pass  # no probe listening yet: it will find the file\n"
        "    elif (shape.batch, shape.seq) == (2, 8):\n"
        "        seen = _started(self.marks)\n"
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
    repo = toy_repo(tmp_path / "repo", autocast=False, code=MARKED, plan=PLAN.format(marks=marks))
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
