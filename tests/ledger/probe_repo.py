"""A repository whose workload reports, from inside each claim process, what it saw:
its pid, ``CUDA_VISIBLE_DEVICES``, whether a library module was already imported,
where it was prepared. It reports by progress lines (``probe {json}``), which reach
whoever runs the claim, sandboxed or not. Modes make a claim hang, crash or run out
of memory (``oom``: its forward raises torch's OutOfMemoryError)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import git

PROBE = '''
from __future__ import annotations

import json
import os
import sys
import signal
from runners.workloads.moe import make_workload as _make

TINY = {"d_model": 32, "n_layers": 1, "n_experts": 4, "d_ff": 32, "vocab": 64}


def _note(**what):
    # A progress line: relayed by the harness to whoever runs the claim, sandboxed or not.
    # The pid the host sees (the sandbox has a pid namespace of its own); None where
    # this process cannot know it (the sandboxed fork server itself).
    from runners.harness.hostpid import host_pid

    pid = host_pid()
    rec = {"pid": pid, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), **what}
    print("\x1eprogress probe " + json.dumps(rec), file=sys.stderr, flush=True)


class Probe:
    """The reference workload, noting where it was built and prepared."""

    def __init__(self, mode: str = "plain") -> None:
        self.mode = mode
        self.prepared_in = None
        self.inner = _make(**TINY)

    def prepare(self) -> None:
        self.prepared_in = os.getpid()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def name(self):
        return self.inner.name

    @property
    def dtype(self):
        return self.inner.dtype

    def setup(self, device, seed):
        _note(event="setup", mode=self.mode, wave_preloaded="wave" in sys.modules,
              prepared_in=self.prepared_in)
        import wave  # noqa: F401  (a library module imported lazily, as trainers do)

        if self.mode == "hang":
            # A progress line (relayed by qualify) once the note is written.
            print("\x1eprogress probe: hanging now", file=sys.stderr, flush=True)
            signal.pause()  # blocks until the claim's deadline kills it
        if self.mode == "crash":
            os.kill(os.getpid(), 9)
        self.inner.setup(device, seed)

    def forward(self, batch, *, grad):
        if self.mode == "oom":
            import torch

            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.inner.forward(batch, grad=grad)


def make_workload(mode: str = "plain") -> Probe:
    return Probe(mode)
'''


def claim(name: str, mode: str = "plain", **extra: str) -> str:
    lines = [
        "[[claims]]",
        f'name = "{name}"',
        'check = "cleanup"',
        "params = { batch = 1, seq = 8 }",
        f'workload_params = {{ mode = "{mode}" }}',
        *(f"{k} = {v}" for k, v in extra.items()),
    ]
    return "\n".join(lines) + "\n"


def make_probe_repo(path: Path, claims: str, head: str = "", source: str = PROBE) -> Path:
    """A git repository at ``path`` with the probe workload (``source``: `PROBE` or one
    built on it) and the plan ``claims``."""
    path.mkdir(parents=True)
    (path / "probe_wl.py").write_text(source)
    (path / "qualification.toml").write_text(
        head + 'workload = "probe_wl:make_workload"\n\n' + claims
    )
    repo = git.Repo.init(path, initial_branch="main")
    repo.index.add(["probe_wl.py", "qualification.toml"])
    actor = git.Actor("Probe", "probe@ledger.invalid")
    repo.index.commit("probe", author=actor, committer=actor)
    return path


_NOTE = re.compile(r"probe (\{.*\})")


def notes(lines: str | list[str]) -> list[dict[str, object]]:
    """The probe's reports among progress lines, in order."""
    text = lines if isinstance(lines, list) else lines.splitlines()
    return [json.loads(m.group(1)) for x in text if (m := _NOTE.search(x))]
