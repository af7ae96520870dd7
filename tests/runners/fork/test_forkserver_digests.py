"""The model a claim forked from the fork server gets (built once in the server, each
setup a copy: `runners.workloads.prebuilt`) has, parameter by parameter, the digest of
the model the workload's own ``setup`` builds in a fresh process: building once
changes no weight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runners.claim.isolated import ClaimRequest, run_claim_isolated
from runners.contract.request import Claim
from runners.fork.forkparent import ForkServer, Spec
from runners.harness.child import env
from tests.ledger.probe_repo import make_probe_repo, notes

REF = "probe_wl:make_workload"
PARAMS = {"d_model": 32, "n_layers": 2, "n_experts": 4, "d_ff": 32, "vocab": 64}

# The reference workload, reporting the digest of each parameter as its first forward
# sees them (before any step changes one), and how its setup was made.
DIGESTED = """
from __future__ import annotations

import hashlib
import json
import sys

from runners.workloads.moe import MoEConfig, MoEWorkload


def digests(model):
    return {
        n: hashlib.sha256(p.detach().cpu().contiguous().view(-1).numpy().tobytes()).hexdigest()
        for n, p in model.named_parameters()
    }


class Digested(MoEWorkload):
    said = False

    def forward(self, batch, *, grad):
        if not self.said:
            self.said = True
            from runners.workloads import prebuilt

            rec = {"digests": digests(self.model), "routes": prebuilt.routes()}
            print("\\x1eprogress probe " + json.dumps(rec), file=sys.stderr, flush=True)
        return super().forward(batch, grad=grad)


def make_workload(**params):
    return Digested(MoEConfig(**params))
"""

PLAIN = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import probe_wl
w = probe_wl.make_workload(**json.loads(sys.argv[2]))
w.setup(torch.device("cpu"), 0)
print(json.dumps(probe_wl.digests(w.model)))
"""


def test_a_forked_claims_model_has_the_digests_of_one_built_the_plain_way(
    tmp_path: Path,
) -> None:
    root = make_probe_repo(tmp_path / "repo", "", source=DIGESTED)
    # Listed twice: the server builds it once (as for a claim that sets up twice).
    spec = Spec.of(root, [(REF, PARAMS), (REF, PARAMS)])
    assert spec.prebuild, "the server is to build the workload once"
    server = ForkServer.launch(
        spec.preload, env(), prepare=spec.prepare, prebuild=spec.prebuild
    ).wait()
    said: list[str] = []
    try:
        [r] = run_claim_isolated(
            ClaimRequest(
                Claim(
                    claim="t.cleanup",
                    check="cleanup",
                    params={"batch": 1, "seq": 8},
                    workload_ref=REF,
                    workload_params=PARAMS,
                    device="cpu",
                    observer_off=True,
                ),
                repo_root=root,
                base_root=None,
                artifact_dir=None,
            ),
            progress=said.append,
            fork_server=server,
        )
    finally:
        server.close()
    assert r.outcome == "passed", r
    [forked] = [n for n in notes(said) if "digests" in n][:1]
    # The copy of the server's build, not a setup of the claim's own.
    assert forked["routes"] == ["prebuilt"]
    plain = subprocess.run(
        [sys.executable, "-c", PLAIN, str(root), json.dumps(PARAMS)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        capture_output=True,
        text=True,
        check=True,
    )
    built = json.loads(plain.stdout)
    assert len(built) > 4 and forked["digests"] == built
