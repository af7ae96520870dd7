"""The runners' entry point for `ledger qualify`: run one claim's check, get results.

`run_claim` resolves the device, fingerprints the environment, runs the check
(and, where the plan needs it, its observer-off control) and returns plain
`CheckResult` objects, one per check and scope, for the ledger to sign. It
never raises for a workload's failure or an unusable environment: those are
``failed`` / ``infra-error`` results. It raises `UnknownCheck` for a check name
no runner implements (a plan error).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from runners.checks.catalog import CHECKS, describe, get_check, params_error
from runners.checks.context import CheckContext, infra_result
from runners.contract.names import NEEDS_BASE, OBSERVER_OFF_CONTROL, Device
from runners.contract.result import CheckResult, Json, Observer
from runners.harness import timeline
from runners.harness.fingerprint import fingerprint

__all__ = [
    "Device",
    "UnknownCheck",
    "check_names",
    "describe",
    "needs_base",
    "params_error",
    "resolve_device",
    "run_claim",
]


class UnknownCheck(KeyError):
    """The plan names a check that no runner implements."""


def check_names() -> list[str]:
    """Names of the checks `run_claim` accepts."""
    return sorted(CHECKS)


def needs_base(check: str) -> bool:
    """Whether ``check`` compares against a checkout of the base revision (`run_claim`'s
    ``base_root``); the caller checks one out only for those."""
    return check in NEEDS_BASE


def resolve_device(device: Device) -> torch.device | None:
    """``auto``: CUDA when available, else CPU. None when ``cuda`` is asked for and
    there is none."""
    if device == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return None if device == "cuda" else torch.device("cpu")


def run_claim(
    *,
    claim: str,
    check: str,
    params: Mapping[str, Json],
    repo_root: Path,
    workload_ref: str,
    workload_params: Mapping[str, Json],
    device: Device,
    observer_off_required: bool,
    base_root: Path | None,
    progress: Callable[[str], None],
    artifact_dir: Path | None = None,
) -> list[CheckResult]:
    """Run ``check`` for ``claim`` on the workload ``workload_ref`` of ``repo_root``.

    ``params`` are the check's parameters; ``params["observer"]`` (``"on"`` /
    ``"off"``, default off) turns the instrumentation on. With an observer-on run
    and ``observer_off_required``, the observer-off control runs too and the result
    list is [observer-on run, observer-off run, comparison]. ``artifact_dir``
    (default: a new directory under the system temp dir) receives artifacts that
    must outlive the call. Results carry scope facets from the environment
    fingerprint plus ``workload``, ``workload_digest`` and ``dtype``.
    """
    try:
        spec = get_check(check)
    except KeyError as e:
        raise UnknownCheck(str(e.args[0])) from None
    p: dict[str, Json] = dict(params)
    observer = _observer(p.pop("observer", "off"))
    artifacts = (
        Path(tempfile.mkdtemp(prefix="ledger-artifacts-"))
        if artifact_dir is None
        else Path(artifact_dir)
    )
    artifacts.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    timeline.mark("device_ready")
    fp_device = dev if dev is not None else torch.device("cpu")
    fp = fingerprint(fp_device)
    timeline.mark("fingerprinted")
    ctx = CheckContext(
        claim=claim,
        repo_root=Path(repo_root),
        workload_ref=workload_ref,
        workload_params=dict(workload_params),
        device=fp_device,
        fingerprint=fp,
        artifact_dir=artifacts,
        observer=observer,
        base_root=None if base_root is None else Path(base_root),
        progress=progress,
    )
    if dev is None:
        reason = "device 'cuda' requested but torch.cuda.is_available() is False"
        r = infra_result(ctx, check=check, version=spec.version, params=p, reason=reason)
        r.scope["device_kind"] = "cuda"
        return [r]
    progress(f"{check} for {claim} on {dev} (observer {observer})")
    if observer == "on" and observer_off_required and check != OBSERVER_OFF_CONTROL:
        control = get_check(OBSERVER_OFF_CONTROL)
        return control.run(ctx, {"check": check, "params": p, "float_rtol": 0.0})
    return spec.run(ctx, p)


def _observer(value: Json) -> Observer:
    if value == "on":
        return "on"
    if value == "off":
        return "off"
    raise ValueError(f"params['observer'] must be 'on' or 'off', got {value!r}")
