"""Every check by name, and their description for plan writers (`describe`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from runners.checks import (
    admission,
    calibration,
    cleanup,
    full_prefix_backward,
    gradient_compare,
    mesh_handoff,
    observer_off_control,
    regression_24view,
)
from runners.checks.context import CheckContext, infra_result
from runners.checks.params import CheckParams, ParamError
from runners.contract.result import CheckResult, Json


@dataclass(frozen=True, slots=True)
class CheckSpec:
    name: str
    version: str
    params: type[CheckParams]
    runner: Callable[[CheckContext, Any, dict[str, Json]], list[CheckResult]]
    summary: str
    """The first line of the check module's docstring."""

    @property
    def defaults(self) -> dict[str, Json]:
        return self.params.defaults()

    def run(self, ctx: CheckContext, given: Mapping[str, Json]) -> list[CheckResult]:
        """Run the check with the parameters a plan gave; a bad one is inconclusive (the
        plan's, not the code's: nothing found either way, and no infrastructure error,
        which only the parent's evidence makes)."""
        recorded = self.params.recorded(given)
        try:
            p = self.params.parse(given)
        except ParamError as e:
            reason = f"bad parameter for {self.name}: {e}"
            r = infra_result(
                ctx, check=self.name, version=self.version, params=recorded, reason=reason
            )
            r.outcome = "inconclusive"
            return [r]
        return self.runner(ctx, p, recorded)


def _spec(
    module: Any, runner: Callable[[CheckContext, Any, dict[str, Json]], list[CheckResult]]
) -> CheckSpec:
    doc = (module.__doc__ or "").strip().splitlines()
    return CheckSpec(
        name=module.NAME,
        version=module.VERSION,
        params=module.Params,
        runner=runner,
        summary=doc[0] if doc else "",
    )


def _runner(name: str) -> observer_off_control.Runner:
    return get_check(name).run


CHECKS: dict[str, CheckSpec] = {
    m.NAME: _spec(m, m.run)
    for m in (
        admission,
        regression_24view,
        full_prefix_backward,
        gradient_compare,
        cleanup,
        mesh_handoff,
        calibration,
    )
}
CHECKS[observer_off_control.NAME] = _spec(
    observer_off_control, partial(observer_off_control.run, lookup=_runner)
)


def get_check(name: str) -> CheckSpec:
    """The check called ``name``; KeyError naming the known checks otherwise."""
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"unknown check {name!r}; known: {', '.join(sorted(CHECKS))}") from None


def params_error(name: str, given: Mapping[str, Json]) -> str | None:
    """Why ``given`` are not valid parameters of the check ``name`` (one line), or None."""
    try:
        get_check(name).params.parse(given)
    except ParamError as e:
        return f"bad parameter for {name}: {e}"
    return None


def describe() -> list[dict[str, Json]]:
    """Every check, sorted by name: its name, version, one-line summary and parameters
    (each with name, type, default and docstring). JSON-able."""
    return [
        {
            "name": spec.name,
            "version": spec.version,
            "summary": spec.summary,
            "params": spec.params.describe(),  # type: ignore[dict-item]
        }
        for spec in sorted(CHECKS.values(), key=lambda s: s.name)
    ]


__all__ = ["CHECKS", "CheckSpec", "describe", "get_check", "params_error"]
