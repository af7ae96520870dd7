"""What a workload's capabilities (`runners.doctor.probe`) mean for each claim.

A claim is ``judged`` when its check has every capability it uses natively,
``fallback`` when some come by a generic route (named), ``inconclusive`` when
the check will run and decide nothing (why, and the line to add), ``broken``
when a step the check needs fails at the tiny shape, and ``not-probed`` for a
check the CPU probe cannot exercise (several GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runners.contract.result import Json

Judgement = Literal["judged", "fallback", "inconclusive", "broken", "not-probed"]

_STEPS = ("load", "setup", "make_batch", "forward", "teardown")
_GRAD_STEPS = (*_STEPS, "forward_backward", "gradients")
NEEDS: dict[str, tuple[str, ...]] = {
    "admission": (*_GRAD_STEPS, "estimate"),
    "regression-24view": _STEPS,
    "gradient-compare": _GRAD_STEPS,
    "full-prefix-backward": (*_GRAD_STEPS, "optimizer_step", "zero_grad", "estimate"),
    "cleanup": (*_GRAD_STEPS, "optimizer_step", "zero_grad"),
    "estimator-calibration": (*_GRAD_STEPS, "zero_grad"),
}
"""Steps each check cannot do without (a broken or missing one: no verdict)."""


@dataclass(slots=True)
class ClaimReport:
    claim: str
    check: str
    judgement: Judgement = "judged"
    fallbacks: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    add: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Json]:
        return {
            "claim": self.claim,
            "check": self.check,
            "judgement": self.judgement,
            "fallbacks": list[Json](self.fallbacks),
            "why": list[Json](self.why),
            "add": list[Json](self.add),
        }

    def line(self) -> str:
        if self.judgement == "judged":
            return f"{self.claim}: judged"
        if self.judgement == "fallback":
            return f"{self.claim}: judged through a fallback ({'; '.join(self.fallbacks)})"
        if self.judgement == "not-probed":
            return f"{self.claim}: not probed ({'; '.join(self.why)})"
        verb = "will be inconclusive" if self.judgement == "inconclusive" else "cannot run"
        add = f"; add: {' | '.join(self.add)}" if self.add else ""
        return f"{self.claim}: {verb} ({'; '.join(self.why)}){add}"


_RANK = {"judged": 0, "fallback": 1, "not-probed": 2, "inconclusive": 3, "broken": 4}


def _worse(r: ClaimReport, j: Judgement) -> None:
    if _RANK[j] > _RANK[r.judgement]:
        r.judgement = j


def judge(
    claim: str, check: str, params: Mapping[str, Any], caps: Mapping[str, Mapping[str, str]]
) -> ClaimReport:
    """The report for one plan claim (module docstring)."""
    r = ClaimReport(claim=claim, check=check)
    if check == "observer-off-control":
        inner = params.get("check", "regression-24view")
        inner_params = params.get("params") or {}
        got = judge(claim, str(inner), inner_params, caps)
        got.check = check
        return got
    if check not in NEEDS:
        r.judgement = "not-probed"
        r.why.append(f"{check} is not exercised by the CPU probe")
        return r
    for step in NEEDS[check]:
        c = caps.get(step)
        if c is None:
            continue  # an earlier step broke: it is named already
        if c["state"] == "broken":
            _worse(r, "broken")
            r.why.append(f"{step}: {c['detail']}")
        elif c["state"] == "missing":
            _worse(r, "inconclusive")
            r.why.append(f"{step}: {c['detail']}")
            r.add.append(c["add"])
        elif c["state"] == "fallback" and step == "estimate":
            # Which estimator will predict: judged all the same.
            _worse(r, "fallback")
            r.fallbacks.append(f"estimate: {c['detail']}")
    if "setup" not in caps and "load" in caps and caps["load"]["state"] == "broken":
        _worse(r, "broken")
        r.why.append(f"load: {caps['load']['detail']}")
    reference = params.get("rule", "reference") == "reference"
    uses_reference = check == "gradient-compare" and reference
    if check == "regression-24view" and reference:
        uses_reference = caps.get("chunked_nll", {}).get("state") == "native"
    if uses_reference:
        _precision(r, caps.get("precision"))
    if check == "gradient-compare":
        _routing(r, caps)
    return r


def _precision(r: ClaimReport, c: Mapping[str, str] | None) -> None:
    if c is None:
        return
    if c["state"] == "fallback":
        _worse(r, "fallback")
        r.fallbacks.append(f"reference precision: {c['detail']}")
    elif c["state"] in ("missing", "broken"):
        _worse(r, "inconclusive")
        r.why.append(f"reference precision: {c['detail']}")
        r.add.append(c["add"])


def _routing(r: ClaimReport, caps: Mapping[str, Mapping[str, str]]) -> None:
    for what in ("routing", "replay"):
        c = caps.get(what)
        if c is None or c["state"] in ("native", "absent"):
            continue
        if c["state"] == "fallback":
            _worse(r, "fallback")
            r.fallbacks.append(f"{what}: {c['detail']}")
        else:
            # Judged still: only a difference beside flips goes inconclusive.
            _worse(r, "fallback")
            r.fallbacks.append(f"{what} missing ({c['detail']})")
            r.add.append(c["add"])


def summary(reports: list[ClaimReport]) -> str:
    """``doctor: 6 claims: 4 judged, 2 through a fallback, 0 inconclusive, 0 cannot run``."""
    n = {j: sum(r.judgement == j for r in reports) for j in _RANK}
    line = (
        f"doctor: {len(reports)} claim(s): {n['judged']} judged, {n['fallback']} through a "
        f"fallback, {n['inconclusive']} will be inconclusive, {n['broken']} cannot run"
    )
    if n["not-probed"]:
        line += f", {n['not-probed']} not probed"
    return line
