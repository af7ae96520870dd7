"""One arm of gradient-compare: a process that runs a tree's workload for one step
and writes its gradients, forked from that tree's fork server when `ledger qualify`
runs one (torch and the workload already imported), else a fresh interpreter."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from ledger.outputs.beneath import Folder, Refused
from runners.checks.context import Session
from runners.contract.forkwire import client_argv
from runners.contract.result import Json
from runners.harness import child

__all__ = ["Arm", "Schedule", "finish_arm", "run_arms", "side_by_side_fits", "start_arm"]


@dataclass(slots=True)
class Arm:
    name: str
    popen: subprocess.Popen[bytes]
    out_dir: Path


def start_arm(
    sess: Session,
    arm: str,
    root: Path,
    wparams: dict[str, Json],
    settings: dict[str, Json],
    work: Path,
    extra: dict[str, Json] | None = None,
) -> Arm:
    ctx = sess.ctx
    out_dir = work / arm
    out_dir.mkdir()
    spec = {
        "arm": arm,
        "root": str(root),
        "ref": ctx.workload_ref,
        "params": wparams,
        "device": str(sess.device),
        "seed": sess.seed,
        **settings,
        "out_dir": str(out_dir),
        **(extra or {}),
    }
    spec_path = out_dir / "spec.json"
    child.write_request(spec_path, spec)
    # The arm forks from the fork server of its own tree (torch and that tree's workload
    # already imported) when `ledger qualify` runs one; else a fresh interpreter.
    sock = _fork_server_for(root)
    how = "forked from its tree's fork server" if sock else "fresh interpreter"
    sess.progress(f"gradient arm {arm}: {spec['ref']} from {root} ({how})")
    result = out_dir / "arm.json"
    argv = (
        client_argv(sock, "runners.checks.grad_arm", spec_path, result)
        if sock
        else child.argv("runners.checks.grad_arm", spec_path, result)
    )
    with open(out_dir / "arm.log", "wb") as log:
        # Its own process group in this session, so the forked arm can join it and the
        # registry's group kill reaches it.
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            argv,
            process_group=0,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child.env(),
            cwd=str(out_dir),
        )
    sess.registry.own_popen(popen, group=True)
    return Arm(name=arm, popen=popen, out_dir=out_dir)


def _fork_server_for(root: Path) -> str | None:
    """The socket of a fork server preloaded from ``root`` (``LEDGER_FORK_SERVERS``)."""
    try:
        servers = json.loads(os.environ.get("LEDGER_FORK_SERVERS") or "{}")
        sock = servers.get(str(root)) if isinstance(servers, dict) else None
    except ValueError:
        return None
    return str(sock) if sock and Path(str(sock)).exists() else None


def finish_arm(arm: Arm, deadline: float) -> dict[str, Any]:
    try:
        rc: int | None = arm.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        rc = None  # the registry stops it when the check ends
    pid = arm.popen.pid
    # A forked arm: the process that ran it (read as data: the arm ran the PR's code).
    with contextlib.suppress(OSError, ValueError, Refused), Folder(arm.out_dir) as out:
        pid = int(out.read("arm.json.pid", 64))
    info: dict[str, Any] = {"returncode": rc, "pid": pid}
    got = None if rc is None else child.read_result(arm.out_dir / "arm.json")
    if rc is None:
        info["status"] = "timeout"
    elif got is not None:
        info.update(got)
    else:
        info["status"] = "no-result"
        info["log_tail"] = (arm.out_dir / "arm.log").read_text(errors="replace")[-2000:]
    return info


Schedule = Literal["in-turn", "side-by-side", "by-room"]
"""How a check's arms share a device: one after the other; all at once (the
candidate's reference arm after the reference arm, whose routing it replays); or
the base arm alone, then the others at once when its footprint says they fit
(`side_by_side_fits`), else in turn."""

Planned = tuple[str, Path, dict[str, Json]]
"""(arm, tree, workload parameters)."""


def run_arms(
    sess: Session,
    plan: list[Planned],
    told: dict[str, Json],
    work: Path,
    specs: dict[str, dict[str, Json]],
    deadline: float,
    mode: Schedule,
) -> tuple[dict[str, dict[str, Any]], list[list[str]]]:
    """Run ``plan``'s arms as ``mode`` says; what each reported, and the waves run (the
    arms started together, in order)."""
    arms: dict[str, dict[str, Any]] = {}
    waves: list[list[str]] = []

    def wave(group: list[Planned]) -> None:
        started = [start_arm(sess, n, r, wp, told, work, specs.get(n)) for n, r, wp in group]
        arms.update({a.name: finish_arm(a, deadline) for a in started})
        waves.append([n for n, _, _ in group])

    if mode == "in-turn":
        for x in plan:
            wave([x])
        return arms, waves
    now = [x for x in plan if x[0] != "candidate_reference"]
    later = [x for x in plan if x[0] == "candidate_reference"]
    if mode == "by-room":
        wave(now[:1])
        now, base = now[1:], arms[now[0][0]]
        held = int(base.get("reserved_after_setup_bytes") or 0) + int(
            base.get("forward_backward_increment_bytes") or 0
        )
        free = torch.cuda.mem_get_info(sess.device)[0] if held else 0
        if base.get("status") != "ok" or not side_by_side_fits(held, free, [x[0] for x in now]):
            for x in now:
                wave([x])
            now = []
    if now:
        wave(now)
    for x in later:
        wave([x])
    return arms, waves


def side_by_side_fits(held: int, free: int, names: list[str]) -> bool:
    """Whether arms ``names`` fit beside each other in ``free`` bytes, each holding what
    the base arm held (``held``; a reference arm, computing in float32, twice that),
    within 80 % of it; never on an unknown footprint."""
    need = sum(held * (2 if "reference" in n else 1) for n in names)
    return held > 0 and need * 5 <= free * 4
