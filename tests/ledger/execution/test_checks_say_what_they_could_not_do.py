"""A check never says infra-error from inside (the parent rightly refuses to believe it,
and would make it a failure): an arm that did not finish judged nothing, a workload the
candidate cannot load is its failure, one the base cannot load leaves nothing to judge."""

from __future__ import annotations

from typing import Any

import pytest

from runners.checks.gradient_compare import _bad_arms

OK: dict[str, Any] = {"status": "ok"}


@pytest.mark.parametrize(
    ("arms", "outcome"),
    [
        ({"candidate": {"status": "timeout"}, "baseline": OK}, "inconclusive"),
        ({"candidate": {"status": "no-result"}, "baseline": OK}, "inconclusive"),
        ({"candidate": OK, "baseline": {"status": "timeout"}}, "inconclusive"),
        (
            {"candidate": {"status": "load-error", "error": "workload load: x"}, "baseline": OK},
            "failed",
        ),
        ({"candidate": OK, "baseline": {"status": "load-error", "error": "x"}}, "inconclusive"),
    ],
)
def test_an_arm_that_did_not_finish_is_never_an_infra_error(
    arms: dict[str, dict[str, Any]], outcome: str
) -> None:
    v = _bad_arms(arms, {})
    assert v is not None and v.outcome == outcome
    assert _bad_arms({"candidate": OK, "baseline": OK}, {}) is None


def test_a_handoff_handed_too_few_gpus_says_so_and_the_baseline_reads_it(tmp_path: Any) -> None:
    """Started all the same with fewer CUDA devices than ranks (the parent decides this
    first; here the check is called directly): inconclusive, with what it was handed."""
    import torch

    from ledger.execution.baseline import COULD_NOT_RUN
    from runners.checks import mesh_handoff
    from runners.checks.context import COULD_NOT_RUN as SAID
    from runners.checks.context import CheckContext
    from runners.harness.fingerprint import fingerprint

    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs here: the handoff would run")
    ctx = CheckContext(
        claim="mesh.handoff-in-place",
        repo_root=tmp_path,
        workload_ref="w:m",
        workload_params={},
        device=torch.device("cuda"),
        fingerprint=fingerprint(torch.device("cpu")),
        artifact_dir=tmp_path,
    )
    [r] = mesh_handoff.run(ctx, mesh_handoff.Params(world_size=2), {"world_size": 2})
    handed = torch.cuda.device_count()
    assert r.outcome == "inconclusive"
    assert r.reason == f"could not run: needs 2 CUDA devices; {handed} handed"
    # The one name the check writes and the baseline reads (the core imports no runners).
    assert SAID == COULD_NOT_RUN
    assert r.measurements[COULD_NOT_RUN] == f"needs 2 CUDA devices; {handed} handed"
