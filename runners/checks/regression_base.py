"""regression-24view's base comparison: the head's no-grad outputs against the base's.

The two runs of the head compare it only with itself; a change that moves every
no-grad output alike (BatchNorm kept on batch statistics when evaluating, dropout
left live) repeats bit for bit. So the base runs the same 24 views from its own
tree, on the same device and inputs, in two arms (`runners.checks.arms`, each forked
from the base tree's fork server where `ledger qualify` runs one): ``base`` in the
workload's precision and ``reference`` in the reference precision. Every declared
output of the head is judged by gradient-compare's reference rule
(`runners.checks.precision`): ``err(head, base_ref) <= k * err(base, base_ref) +
atol``, and for a 16-bit workload the head's own reference run against the base's
(the function part). The head's reference arm is the one the check runs anyway
(`runners.checks.regression_reference`).

Routing. Where the base's arm saw its routers choose (a mixture of experts), the
head runs its forward once more with the base's selections replayed (the workload's
`runners.protocol.ReplaysRouting`, else the harness's router hooks), so a near tie
flipping under a kernel swap does not pass for the change; its own choices are
counted against the base's. A head that cannot replay (or a check told not to:
``replay_base_routing = false``) is judged on its own routing, except for the tokens
it routed otherwise than the base where the base's router margin (its k-th less its
(k+1)-th probability, recorded per token by the harness's hooks or offered by the
workload, `runners.protocol.DeclaresRouterMargins`) is within ``k`` times what the
reference precision moves it (`runners.checks.routing.benign_flips`): a near tie that
any change of rounding flips. Those tokens are set aside from the per-token outputs
(the views holding them from per-view ones; scalars over every token are then not
judged); a flip with a larger base margin is a real change of the router and is
judged. Above ``max_set_aside_share`` of the tokens set aside, a comparison that
would pass is inconclusive.

The observer-off control's two runs share the base's arms (`CheckContext.shared`):
they ran before the head was loaded and do not depend on the observer. Without a
base tree the comparison is skipped and the receipt says so.
"""

from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from runners.checks import precision, routing
from runners.checks.arms import Planned, Schedule, run_arms
from runners.checks.context import Session, Verdict, phase_step, seeded
from runners.checks.grad_arm import replay, router_hooks, routing_of
from runners.checks.gradient_verdicts import compare, errors
from runners.contract.result import Json
from runners.protocol import Batch, DeclaresRouting, ForwardOutputs, ReplaysRouting, Workload

_ARM_KEYS = (
    "status",
    "pid",
    "duration_ns",
    "workload_digest",
    "dtype",
    "error",
    "precision_route",
    "precision_route_equivalent",
    "routing_route",
    "routed_layers",
    "forward_seed",
    "setup_routes",
)
"""What each base arm reports that the receipt records."""


class BaseRule(Protocol):
    """The check's parameters the comparison reads."""

    @property
    def views(self) -> int: ...

    @property
    def seq(self) -> int: ...

    @property
    def k(self) -> float: ...

    @property
    def atol(self) -> float: ...

    @property
    def reference_dtype(self) -> str | None: ...

    @property
    def base_workload_params(self) -> dict[str, Json]: ...

    @property
    def base_workload_ref(self) -> str: ...

    @property
    def arm_timeout_s(self) -> int: ...

    @property
    def replay_base_routing(self) -> bool: ...

    @property
    def max_set_aside_share(self) -> float: ...

    @property
    def deterministic_warn_only(self) -> bool: ...


@dataclass(slots=True)
class BaseArms:
    """What the base's two arms reported and saved (CPU tensors)."""

    root: Path
    info: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    routing: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    routing_file: Path | None = None
    """The base arm's saved routing, while this run's folder lasts (replayed by the head)."""
    margins: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    """Each arm's router margins per routed layer (`runners.adapt.routers.margin`)."""
    set_aside: torch.Tensor | None = None
    """Tokens the head routed otherwise than the base on a near tie, where it did not
    replay the base's routing: left out of the judged outputs."""


def skipped(sess: Session) -> str | None:
    """Why there is no base to compare with, or None."""
    ctx = sess.ctx
    if ctx.base_root is None:
        return (
            "no base tree was handed (a revision on the base branch itself, or a run "
            "without a base): the head is compared only with itself"
        )
    if ctx.base_root.resolve() == ctx.repo_root.resolve():
        return "the base tree is the head's own: the head is compared only with itself"
    return None


def base_arms(sess: Session, p: BaseRule, m: dict[str, Json]) -> BaseArms:
    """The base's arms: run from the base tree (before the head is loaded, so the device
    holds one model at a time), or the ones an earlier run of this claim ran (the
    observer-off control's second run)."""
    ctx = sess.ctx
    assert ctx.base_root is not None
    params = {**ctx.workload_params, **p.base_workload_params}
    # The base's own entry point where its plan names another (a module the head added
    # is not in the base's tree).
    ref = p.base_workload_ref or ctx.workload_ref
    key = "regression-24view base arms " + json.dumps(
        [str(ctx.base_root), ref, params, p.views, p.seq, p.reference_dtype],
        sort_keys=True,
        default=str,
    )
    work = sess.registry.make_tempdir("regression-base-")
    cached = ctx.shared.get(key)
    if isinstance(cached, _Saved):
        m["base_arms_reused"] = True
        return cached.restored(ctx.base_root, work)
    plan: list[Planned] = [
        ("base", ctx.base_root, params),
        ("reference", ctx.base_root, params),
    ]
    told: dict[str, Json] = {
        "warn_only": p.deterministic_warn_only,
        "batch": p.views,
        "seq": p.seq,
        "phase": "forward_nograd",
    }
    specs: dict[str, dict[str, Json]] = {
        "base": {"ref": ref},
        "reference": {"reference": True, "reference_dtype": p.reference_dtype, "ref": ref},
    }
    # CPU arms share nothing and may overlap; on a GPU one after the other.
    mode: Schedule = "side-by-side" if sess.device.type == "cpu" else "in-turn"
    sess.progress(f"24-view forward of the base from {ctx.base_root}")
    deadline = time.monotonic() + p.arm_timeout_s
    arms, _ = run_arms(sess, plan, told, work, specs, deadline, mode)
    saved = _Saved(arms, {})
    for name in arms:
        for what in _FILES:
            if (work / name / what).is_file():
                saved.files[f"{name}/{what}"] = (work / name / what).read_bytes()
    # Kept as bytes, not tensors: what the check allocated is released when it ends
    # (its cleanup proof), and the next run loads its own copy.
    ctx.shared[key] = saved
    return saved.restored(ctx.base_root, work)


_FILES = ("outputs.pt", "routing.pt", "margins.pt")


@dataclass(slots=True)
class _Saved:
    """The base's arms as they reported and the files they saved, between runs."""

    info: dict[str, dict[str, Any]]
    files: dict[str, bytes]

    def restored(self, root: Path, work: Path) -> BaseArms:
        """The arms' tensors loaded for this run (their files under ``work``)."""
        got = BaseArms(root=root, info=self.info)
        for name in self.info:
            got.outputs[name] = self._load(f"{name}/outputs.pt")
            got.routing[name] = self._load(f"{name}/routing.pt")
            got.margins[name] = self._load(f"{name}/margins.pt")
        if got.routing.get("base"):
            got.routing_file = work / "base-routing.pt"
            got.routing_file.write_bytes(self.files["base/routing.pt"])
        return got

    def _load(self, name: str) -> dict[str, torch.Tensor]:
        data = self.files.get(name)
        if data is None:
            return {}
        loaded: dict[str, torch.Tensor] = torch.load(io.BytesIO(data), weights_only=True)
        return loaded


def arms_measured(arms: BaseArms, m: dict[str, Json]) -> None:
    """Each base arm's figures in ``m["base_arms"]``."""
    m["base_root"] = str(arms.root)
    m["base_arms"] = {
        name: {k: info[k] for k in _ARM_KEYS if k in info} for name, info in arms.info.items()
    }


def head_on_base_routing(
    sess: Session, w: Workload, batch: Batch, arms: BaseArms, p: BaseRule, m: dict[str, Json]
) -> dict[str, torch.Tensor] | None:
    """Where the base's arm saw its routers choose: the head's forward once more with the
    base's selections replayed (its declared outputs on the host), its own choices
    counted against the base's; None where there is no routing to replay or the head
    cannot take it (it is then judged on its own routing, its near-tie flips set aside:
    ``arms.set_aside``)."""
    if arms.routing_file is None:
        return None
    info: dict[str, Any] = {}
    hooks = router_hooks(w, info)
    if isinstance(w, DeclaresRouting):
        w.declare_routing(True)
    if p.replay_base_routing:
        replaying = replay(w, str(arms.routing_file), sess.device, info, hooks)
    else:
        replaying = False
        info["routing_replay"] = "not asked (replay_base_routing = false)"
    step = seeded(phase_step(w, batch, grad=False), sess.seed, sess.device)
    try:
        sess.progress("24-view forward of the head on the base's routing")
        out: ForwardOutputs = sess.call("forward (the base's routing)", step)
        own = routing_of(w, hooks, replaying, [out], info)
    finally:
        if hooks is not None:
            hooks.detach()
        if isinstance(w, ReplaysRouting):
            w.replay_routing(None)
        if isinstance(w, DeclaresRouting):
            w.declare_routing(False)
    table: dict[str, Json] = {"head_vs_base": routing.differing(own, arms.routing["base"])}
    m["base_routing"] = {**info, **table}
    if not replaying or info.get("routing_replay") != "replayed":
        table["set_aside"] = _set_aside(own, arms, p)
        m["base_routing"] = {**info, **table}
        return None
    return {k: v.detach().to("cpu", copy=True) for k, v in out.declared().items()}


def _set_aside(own: routing.Routing, arms: BaseArms, p: BaseRule) -> dict[str, Json]:
    """The head's near-tie flips against the base (``arms.set_aside``), with the counts
    the receipt records; why none were set aside where the margins are missing."""
    base, ref = arms.margins.get("base", {}), arms.margins.get("reference", {})
    if not base or not ref:
        arm = "base" if not base else "reference"
        return {
            "tokens_set_aside": 0,
            "reason": f"the base's {arm} arm recorded no router margins: every flip is judged",
        }
    floors = routing.margin_floors(base, ref)
    aside, table = routing.benign_flips(own, arms.routing["base"], base, floors, p.k)
    arms.set_aside = aside if aside is not None and bool(aside.any()) else None
    return {**table, "max_share": p.max_set_aside_share}


def judged(
    head: dict[str, torch.Tensor],
    head_ref: ForwardOutputs | None,
    arms: BaseArms,
    low: str,
    p: BaseRule,
    m: dict[str, Json],
    on: torch.device | None = None,
) -> Verdict | None:
    """The head's declared outputs against the base's by the reference rule: a failed
    or inconclusive verdict, or None when every output is within it. Large outputs are
    summed on ``on``, the check's device, where it is a GPU (`runners.checks.outputs`)."""
    bad = {a: i for a, i in arms.info.items() if i.get("status") != "ok"}
    if bad:
        said = "; ".join(
            f"{a} arm {i.get('status')}: {str(i.get('error') or i.get('log_tail') or '').strip()}"
            for a, i in bad.items()
        )
        m["base_comparison"] = "not judged"
        return Verdict(
            outcome="inconclusive",
            reason=f"the base's no-grad outputs could not be computed ({said}); the base "
            "comparison needs them; what would fix it: a base whose workload runs with these "
            "parameters (base_workload_params), and a setup(device, seed, *, dtype) on kernels "
            "that compute in the reference dtype (runners.protocol, Precision)",
            measurements=m,
        )
    base, ref = arms.outputs.get("base", {}), arms.outputs.get("reference", {})
    # The head's reference outputs stay where they were computed when summed there (a
    # GPU): not to the host and back. Tokens set aside are dropped by a host mask.
    keep = on is not None and on.type == "cuda" and arms.set_aside is None
    theirs = (
        {}
        if head_ref is None
        else {k: v if keep else v.to("cpu") for k, v in head_ref.declared().items()}
    )
    if arms.set_aside is not None:
        kept = _Kept(arms.set_aside, p.views)
        head, base, ref, theirs = (kept.of(x) for x in (head, base, ref, theirs))
        kept.measured(m)
    rows, only = compare(base, head, math.inf, on)
    function = None
    if head_ref is not None and precision.higher("float32", low):
        ref_dtype = str(arms.info["reference"].get("dtype") or "")
        function = precision.Function(
            errors=errors(theirs, ref, on),
            scale=precision.roundoff_ratio(ref_dtype, low),
            atol=precision.function_atol_for(ref_dtype, None),
        )
    shared = {n: t for n, t in head.items() if n in base}
    verdicts = precision.judge(
        errors(shared, ref, on), errors(base, ref, on), {}, p.k, p.atol, function
    )
    by_name = {v.name: v for v in verdicts}
    for r in rows:
        v = by_name.get(str(r["name"]))
        if v is not None:
            j = v.to_json()
            r.update({k: j[k] for k in ("err_candidate", "err_base", "floor", "allowed")})
            r.update(state=j["state"], failed_by=j["failed_by"])
            if v.function_ran:
                r.update(err_function=j["err_function"], function_allowed=j["function_allowed"])
            r.pop("over_threshold", None)
    m["against_base"] = rows  # type: ignore[assignment]
    m["base_comparison"] = "compared"
    return _verdict(verdicts, rows, only, p, m)


def _verdict(
    verdicts: list[precision.TensorVerdict],
    rows: list[dict[str, Json]],
    only: list[str],
    p: BaseRule,
    m: dict[str, Json],
) -> Verdict | None:
    flips = _flips(m)
    aside = _aside(m)
    if only:
        return Verdict(
            outcome="failed",
            reason=f"against the base: the declared outputs differ: {', '.join(only)} in only "
            "one of head and base",
            measurements=m,
        )
    failed = sorted(
        (v for v in verdicts if v.state == "failed"), key=lambda v: v.badness, reverse=True
    )
    if failed:
        max_abs = {str(r["name"]): r.get("max_abs") for r in rows}
        said = "; ".join(_describe(v, max_abs.get(v.name), p) for v in failed)
        worst = failed[0]
        if worst.err_candidate is not None and worst.allowed is not None:
            # The figure that decided the receipt, with its bound (read by every surface
            # that names one figure per receipt).
            m["deciding"] = {
                "key": "against_base_err",
                "name": f"{worst.name} error against the base's reference",
                "value": worst.err_candidate,
                "bound": worst.allowed,
                "unit": "ratio",
                "direction": "max",
            }
        return Verdict(
            outcome="failed",
            reason=f"against the base: {said}{flips}{aside}",
            measurements=m,
        )
    unjudged = [v.name for v in verdicts if v.state == "inconclusive"]
    if unjudged:
        return Verdict(
            outcome="inconclusive",
            reason=f"against the base: {', '.join(unjudged)} have no finite precision floor "
            "(the base's reference is zero or non-finite where the base is not)",
            measurements=m,
        )
    if not verdicts:
        return Verdict(
            outcome="inconclusive",
            reason=f"against the base: no declared outputs to compare{aside}",
            measurements=m,
        )
    over = _over_share(m, p)
    if over:
        return Verdict(outcome="inconclusive", reason=f"against the base: {over}", measurements=m)
    return None


def _describe(v: precision.TensorVerdict, max_abs: Json, p: BaseRule) -> str:
    """``logits: max abs 0.53, err 0.31 vs allowance 2.2e-06 (2.0 x precision floor
    6e-07 + 1e-06)``, with the function part's figures where that part failed."""
    ma = f"max abs {max_abs:.3g}, " if isinstance(max_abs, float) else ""
    err = "non-finite" if v.err_candidate is None else f"{v.err_candidate:.3g}"
    allowed = "n/a" if v.allowed is None else f"{v.allowed:.3g}"
    floor = "n/a" if v.floor is None else f"{v.floor:.3g}"
    out = (
        f"{v.name}: {ma}err {err} vs allowance {allowed} ({p.k} x {v.floor_from} floor "
        f"{floor} + {p.atol})"
    )
    if "function" in v.failed_by:
        f = "non-finite" if v.err_function is None else f"{v.err_function:.3g}"
        fa = "n/a" if v.function_allowed is None else f"{v.function_allowed:.3g}"
        out += f"; in the reference precision err {f} vs allowance {fa}"
    return out


def _flips(m: dict[str, Json]) -> str:
    """What a reason adds where the head routed tokens otherwise than the base and did
    not replay the base's routing."""
    table = m.get("base_routing")
    if not isinstance(table, dict) or table.get("routing_replay") == "replayed":
        return ""
    pair = table.get("head_vs_base")
    n = pair.get("tokens_differing") if isinstance(pair, dict) else None
    if not isinstance(n, int) or not n:
        return ""
    return f" ({n} token(s) routed otherwise than the base, which the head could not replay)"


class _Kept:
    """The declared outputs without the tokens set aside: per-token tensors (leading
    ``[views, seq, ...]`` or ``[tokens]``) lose those tokens, per-view ones (leading
    ``[views]``) the views holding any; anything else (a loss over every token) is not
    judged."""

    def __init__(self, aside: torch.Tensor, views: int) -> None:
        self.aside = aside.reshape(-1).cpu()
        n = int(self.aside.numel())
        self.views = views
        self.view_aside = (
            self.aside.reshape(views, -1).any(dim=1) if views and n % views == 0 else None
        )
        self.dropped: set[str] = set()

    def of(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        n = int(self.aside.numel())
        out: dict[str, torch.Tensor] = {}
        seq = n // self.views if self.view_aside is not None else -1
        for name, t in tensors.items():
            if t.dim() >= 3 and tuple(t.shape[:2]) == (self.views, seq):
                out[name] = t.flatten(0, 1)[~self.aside]
            elif t.dim() >= 1 and t.shape[0] == n:
                out[name] = t[~self.aside]
            elif self.view_aside is not None and t.dim() >= 1 and t.shape[0] == self.views:
                # Also ``[views, seq]`` alone, which a ``[views, hidden]`` row may look like:
                # whole views set aside, never fewer tokens than flipped.
                out[name] = t[~self.view_aside]
            else:
                self.dropped.add(name)
        return out

    def measured(self, m: dict[str, Json]) -> None:
        table = m.get("base_routing")
        if not isinstance(table, dict):
            return
        said = table.get("set_aside")
        if isinstance(said, dict):
            said["not_judged"] = sorted(self.dropped)  # type: ignore[assignment]
            if self.view_aside is not None:
                said["views_set_aside"] = int(self.view_aside.sum())


def _aside(m: dict[str, Json]) -> str:
    """What a reason adds where near-tie flips were set aside."""
    said = _set_aside_table(m)
    n = said.get("tokens_set_aside") if said else None
    if not isinstance(n, int) or not n or said is None:
        return ""
    share = said.get("share_set_aside")
    pct = f"{100 * share:.3g} %" if isinstance(share, float) else "?"
    out = (
        f"; {n} token(s) ({pct}) routed otherwise than the base on a near tie (base margin "
        f"within {said.get('k')} x the precision's margin floor) set aside"
    )
    dropped = said.get("not_judged")
    if isinstance(dropped, list) and dropped:
        out += f", so {', '.join(str(x) for x in dropped)} not judged"
    return out


def _set_aside_table(m: dict[str, Json]) -> dict[str, Json] | None:
    table = m.get("base_routing")
    said = table.get("set_aside") if isinstance(table, dict) else None
    return said if isinstance(said, dict) else None


def _over_share(m: dict[str, Json], p: BaseRule) -> str:
    """Why a comparison that would pass is inconclusive: more than ``max_set_aside_share``
    of the tokens set aside (empty where within it)."""
    said = _set_aside_table(m)
    share = said.get("share_set_aside") if said else None
    if not isinstance(share, float) or share <= p.max_set_aside_share or said is None:
        return ""
    return (
        f"{said.get('tokens_set_aside')} of {said.get('tokens')} tokens ({100 * share:.3g} %) "
        f"were routed otherwise than the base on a near tie, over the "
        f"{100 * p.max_set_aside_share:.3g} % (max_set_aside_share) that may be set aside: "
        "the rest passes, but too little was judged; what would fix it: a workload that "
        "replays the base's routing (runners.protocol.ReplaysRouting)"
    )
