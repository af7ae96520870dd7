"""The fork server pays once what claims really import: modules a claim imported are
imported for the next, a workload's prepare() runs once in the server, and each forked
claim sees its own environment (CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import threading
from pathlib import Path

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.fork.forkparent import ForkServer
from runners.harness.child import env
from tests.ledger.probe_repo import claim, make_probe_repo, notes

REF = "probe_wl:make_workload"


def _run(root: Path, server: ForkServer, mode: str, cvd: str, said: list[str]) -> str:
    [r] = run_claim_isolated(
        ClaimRequest(
            Claim(
                claim="t.cleanup",
                check="cleanup",
                params={"batch": 1, "seq": 8},
                workload_ref=REF,
                workload_params={"mode": mode},
                device="cpu",
                observer_off=False,
            ),
            repo_root=root,
            base_root=None,
            artifact_dir=None,
            env={"CUDA_VISIBLE_DEVICES": cvd},
        ),
        progress=said.append,
        fork_server=server,
    )
    return r.outcome


def test_learned_modules_prepared_workloads_and_per_claim_environment(tmp_path: Path) -> None:
    said: list[str] = []
    root = make_probe_repo(tmp_path / "repo", claim("x"))
    server = ForkServer.launch(
        [(str(root), REF)],
        env(),
        modules=["colorsys"],
        prepare=[(str(root), REF, {"mode": "plain"})],
    ).wait()
    try:
        assert server.ready["prepared"] == [REF] and "torch._dynamo" in server.ready["modules"]
        assert "colorsys" in server.ready["modules"]  # the plan's preload list
        assert server.ready["cuda_initialized"] is False
        assert _run(root, server, "plain", "1", said) == "passed"
        assert _run(root, server, "plain", "0", said) == "passed"
        # Two claims at once from the one server.
        outcomes: list[str] = []
        ts = [
            threading.Thread(
                target=lambda c=c: outcomes.append(_run(root, server, "plain", c, said))
            )
            for c in ("2", "3")
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert outcomes == ["passed", "passed"]
    finally:
        server.close()
    setups = [n for n in notes(said) if n["event"] == "setup"]
    # Prepared once, in the server; every forked claim inherited it.
    assert [n["prepared_in"] for n in setups] == [server.proc.pid] * 4
    assert all(n["pid"] != server.proc.pid for n in setups)  # each claim its own process
    assert [n["cvd"] for n in setups[:2]] == ["1", "0"]
    assert sorted(str(n["cvd"]) for n in setups[2:]) == ["2", "3"]
    # The first claim imported `wave` itself; the server then imported it for the next.
    assert [n["wave_preloaded"] for n in setups[:2]] == [False, True]
