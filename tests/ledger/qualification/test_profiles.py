"""Plan profiles (`[profiles.NAME]`) and per-claim `workload_params`."""

from __future__ import annotations

import pytest

from ledger.evidence.errors import InputError
from ledger.qualification.engine import evaluate
from ledger.qualification.plan import parse_plan
from ledger.qualification.rules import Requirement

PLAN = """
workload = "m:f"
[workload_params]
d_model = 64
layers = 2

[profiles.cpu]
workload_params = { d_model = 32 }
[profiles.cpu.claims.adm]
params = { batches = [1] }

[profiles.h200]
workload_params = { d_model = 2048 }
[profiles.h200.claims.adm]
params = { batches = [8, 16] }
workload_params = { layers = 24 }

[[claims]]
name = "adm"
check = "admission"
params = { batches = [1, 2], seqs = [16] }
workload_params = { layers = 4 }

[[claims]]
name = "reg"
check = "regression-24view"
"""


def test_claim_workload_params_update_the_plans() -> None:
    plan = parse_plan(PLAN)
    adm, reg = plan.claims
    assert plan.workload_params_for(adm) == {"d_model": 64, "layers": 4}
    assert plan.workload_params_for(reg) == {"d_model": 64, "layers": 2}


def test_a_profile_overrides_workload_params_and_check_params() -> None:
    plan = parse_plan(PLAN)
    cpu = plan.with_profile("cpu")
    adm, reg = cpu.claims
    assert adm.params == {"batches": [1], "seqs": [16]}
    assert cpu.workload_params_for(adm) == {"d_model": 32, "layers": 4}
    assert cpu.workload_params_for(reg) == {"d_model": 32, "layers": 2}
    h200 = plan.with_profile("h200")
    assert h200.workload_params_for(h200.claims[0]) == {"d_model": 2048, "layers": 24}
    assert h200.claims[0].params["batches"] == [8, 16]
    assert plan.claims[0].params["batches"] == [1, 2]  # the plan itself is unchanged


def test_unknown_profile_and_profile_typos_are_refused() -> None:
    with pytest.raises(InputError, match=r"no profile 'gpu'.*cpu, h200"):
        parse_plan(PLAN).with_profile("gpu")
    with pytest.raises(InputError, match=r"profiles\.cpu\.claims\.nope: no such claim"):
        parse_plan(PLAN + "[profiles.cpu.claims.nope]\nparams = {}\n")
    bad = PLAN.replace("workload_params = { d_model = 32 }", "workload_parms = { d_model = 32 }")
    known = r"unknown key \(known keys: workload_params, claims\)"
    with pytest.raises(InputError, match=r"profiles\.cpu\.workload_parms: " + known):
        parse_plan(bad)


def test_status_judges_a_profiled_receipt_against_its_profile() -> None:
    plan = parse_plan(PLAN)
    req = Requirement.from_plan(plan.claims[0], plan)
    assert req.profile_params["h200"]["batches"] == [8, 16]
    assert req.params["batches"] == [1, 2]
    assert callable(evaluate)
