"""What a check hands back to the ledger: plain data, no torch.

The ledger turns each `CheckResult` into one signed receipt (qualification
predicate v1). Bytes and nanoseconds are exact integers; ratios (rel-L2,
cosine, measured/predicted) may be floats.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, NoReturn, Self, get_args

from runners.contract.names import Observer, Outcome

__all__ = [
    "Artifact",
    "CheckResult",
    "CleanupProof",
    "Frozen",
    "Json",
    "Observer",
    "Outcome",
    "ReleasedResource",
    "ResultError",
    "Stamped",
    "check_result",
    "infra_error",
    "result_from_dict",
    "untrusted",
]

Scalar = int | float | str | bool | None
Json = Scalar | list["Json"] | dict[str, "Json"]


@dataclass(kw_only=True, slots=True, frozen=True)
class ReleasedResource:
    """One owned resource and how its release was observed."""

    kind: str
    """process | process-group | dist-group | tempdir | gpu-memory | ballast | ..."""
    id: str
    """pid, path, group name, device uuid: whatever names it uniquely."""
    released: bool
    """True when the observation below showed it gone / back to baseline."""
    proof: str
    """The observation, in one sentence (e.g. 'os.kill(pid, 0) raised ProcessLookupError')."""


@dataclass(kw_only=True, slots=True, frozen=True)
class CleanupProof:
    complete: bool
    resources: list[ReleasedResource] = field(default_factory=list)
    tolerance_bytes: int = 0
    """Allowed drift of outside-pool / NVML per-process memory versus baseline."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Artifact:
    name: str
    path: str
    """Local file path; the ledger hashes and stores it content-addressed."""
    media_type: str = "application/octet-stream"


@dataclass(kw_only=True, slots=True)
class CheckResult:
    claim: str
    """Claim name from the plan, e.g. 'admission.no-oom-after-admit'."""
    check: str
    """Check name, e.g. 'admission', 'regression-24view', 'observer-off-control'."""
    check_version: str
    params: dict[str, Json]
    scope: dict[str, str | int]
    """Flat facets: device_kind, gpu_model, gpu_count, gpu_memory_bytes, driver, cuda, torch,
    nccl, dtype, workload, workload_digest, ..."""
    outcome: Outcome
    reason: str | None
    """Required for anything but 'passed'."""
    measurements: dict[str, Json]
    observer: Observer
    cleanup: CleanupProof
    artifacts: list[Artifact] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    host: str = ""
    started_ns: int = 0
    """UTC wall clock, ns since the epoch."""
    finished_ns: int = 0


class Frozen(dict[str, Any]):
    """A dict no one can change once made: a stamped result's scope, parameters and
    measurements. Still a dict (JSON, `dataclasses.asdict` and ``isinstance`` read it as
    one); every in-place change raises `TypeError`, a copy is a new `Frozen`."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("a stamped result is not changed in place: make a new one")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> tuple[type[Self], tuple[dict[str, Any]]]:
        return type(self), (dict(self),)


@dataclass(kw_only=True, frozen=True, slots=True)
class Stamped:
    """A claim's result once the host stamped its facts on it (`runners.claim.authors`):
    what its receipt says, as `CheckResult` names it. Made once, by the host, and never
    changed: frozen, its scope, parameters and measurements `Frozen`, its lists tuples.
    A later judgement (a GPU fault, `ledger.fleet.faults.judge`) makes a new one."""

    claim: str
    check: str
    check_version: str
    params: Mapping[str, Json]
    scope: Mapping[str, str | int]
    outcome: Outcome
    reason: str | None
    measurements: Mapping[str, Json]
    observer: Observer
    cleanup: CleanupProof
    artifacts: tuple[Artifact, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    host: str = ""
    started_ns: int = 0
    finished_ns: int = 0

    def __post_init__(self) -> None:
        for name in ("params", "scope", "measurements"):
            got = getattr(self, name)
            if not isinstance(got, Frozen):
                object.__setattr__(self, name, Frozen(got))
        object.__setattr__(self, "artifacts", tuple(self.artifacts))
        object.__setattr__(self, "gpu_uuids", tuple(self.gpu_uuids))


def infra_error(
    *,
    claim: str,
    check: str,
    version: str,
    params: Mapping[str, Json],
    reason: str,
    scope: Mapping[str, str | int],
    observer: Observer = "off",
    cleanup: CleanupProof | None = None,
    gpu_uuids: tuple[str, ...] | list[str] = (),
    host: str = "",
    started_ns: int,
    finished_ns: int,
) -> CheckResult:
    """A result for a check that could not produce evidence either way.

    ``cleanup`` None: nothing was acquired, so nothing is left to prove released.
    """
    return CheckResult(
        claim=claim,
        check=check,
        check_version=version,
        params=dict(params),
        scope=dict(scope),
        outcome="infra-error",
        reason=reason,
        measurements={},
        observer=observer,
        cleanup=CleanupProof(complete=True, resources=[]) if cleanup is None else cleanup,
        gpu_uuids=list(gpu_uuids),
        host=host,
        started_ns=started_ns,
        finished_ns=finished_ns,
    )


class ResultError(ValueError):
    """A result document that is not exactly a `CheckResult` (the claim process's word
    is data to check, never trusted as it comes)."""


def _fail(where: str, what: str) -> NoReturn:
    raise ResultError(f"{where}: {what}")


def untrusted(text: str, limit: int = 300) -> str:
    """``text`` from the code under test, quoted as such: every unprintable character
    shown as an escape (never sent to a terminal or a page), at most ``limit`` long."""
    shown = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )
    return repr(shown[:limit] + ("..." if len(shown) > limit else ""))


_MAX_NAME = 256
_INT64 = 1 << 63
_PHASE_KEY = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_MAX_PHASE_NS = 7 * 24 * 3600 * 10**9
"""A phase or clock stamp a claim reports: no phase lasts a week (its timeout ends it)."""
_MAX_STAMP_NS = 1 << 62

CHILD_FACETS = frozenset(
    {
        # Read again by the parent, which overrides them (`runners.claim.authors`).
        "device_kind",
        "gpu_model",
        "gpu_count",
        "gpu_memory_bytes",
        "driver",
        "cuda",
        "torch",
        "nccl",
        "python",
        "packages_digest",
        # Set by the plan, or the harness's reading of the workload it names.
        "workload",
        "workload_digest",
        "dtype",
        "world_size",
        "backend",
    }
)
"""The scope facets a claim's result may carry; any other is a malformed report (the
runner's own facets, ``sandbox``, ``network``, ``profile``, are set after it)."""


def _name(v: Any, where: str, limit: int = _MAX_NAME) -> None:
    """A name the receipt shows: a printable string (no control, no bidi override)."""
    if not isinstance(v, str):
        _fail(where, "must be a string")
    if not v.isprintable():
        _fail(where, f"{untrusted(v, 80)} is not printable")
    if len(v) > limit:
        _fail(where, f"longer than {limit} characters")


_EXACT_KEY = re.compile(r"(^|_)(bytes|ns)$")
"""Figures named in bytes or nanoseconds are exact integers (the statement's rule,
`ledger.evidence.shape.inexact_figure`): checked here, so that a claim's float there
fails the claim instead of leaving a statement that cannot be built."""


def _json(v: Any, where: str, depth: int = 0) -> None:
    if depth > 64:
        _fail(where, "nested too deeply")
    if isinstance(v, float) and not math.isfinite(v):
        _fail(where, f"{v} is not a JSON number")
    if isinstance(v, int) and not isinstance(v, bool) and not -_INT64 <= v < _INT64:
        _fail(where, "out of the signed 64-bit range")
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                _fail(where, "keys must be strings")
            _name(k, f"{where} key", 128)
            if _EXACT_KEY.search(k) and isinstance(x, float):
                _fail(f"{where}.{k}", "must be an exact integer (bytes and ns are never floats)")
            _json(x, f"{where}.{k}", depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _json(x, f"{where}[{i}]", depth + 1)
    elif not isinstance(v, Scalar):
        _fail(where, f"not JSON: {type(v).__name__}")


def _fields(d: Any, cls: type, where: str) -> None:
    if not isinstance(d, dict):
        _fail(where, "must be an object")
    names = {f.name for f in fields(cls)}
    required = {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    }
    extra, missing = sorted(set(d) - names), sorted(required - set(d))
    if extra:
        _fail(where, f"unknown keys {extra}")
    if missing:
        _fail(where, f"missing keys {missing}")


def _is(v: Any, t: type | tuple[type, ...]) -> bool:
    # bool is an int: never accepted where an integer is meant.
    return isinstance(v, t) and not (isinstance(v, bool) and bool not in _tuple(t))


def _tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _check(d: Mapping[str, Any], types: Mapping[str, type | tuple[type, ...]], where: str) -> None:
    for name, t in types.items():
        if name in d and not _is(d[name], t):
            _fail(f"{where}.{name}", f"must be {' or '.join(x.__name__ for x in _tuple(t))}")


def _inside(path: str, folder: Path, where: str) -> None:
    """An artifact the parent will read names a path inside the artifact folder (never
    one the child chose elsewhere). Checked by its text only: what lies there (a link,
    a FIFO, a hard link, too many bytes) is decided when the parent opens it beneath
    the folder, and named in the receipt as refused (`ledger.execution.receipts`)."""
    p = Path(path)
    if not p.is_absolute() or ".." in p.parts:
        _fail(where, "must be an absolute path without '..'")
    inside = [r for r in (folder, folder.resolve()) if p.is_relative_to(r) and p != r]
    if not inside:
        _fail(where, f"{path} is not a file inside the artifact folder {folder}")


def _reported(m: dict[str, Any]) -> None:
    """The figures the harness reports in a known shape (read by the parent and the
    surfaces): phase times and clock stamps as non-negative integers of nanoseconds
    under plain names, the process's own peak as a byte count."""
    for key, most in (("harness_phase_times", _MAX_PHASE_NS), ("claim_timeline_ns", _MAX_STAMP_NS)):
        if key not in m:
            continue
        got = m[key]
        if not isinstance(got, dict):
            _fail(f"result.measurements.{key}", "must be an object")
        for k, v in got.items():
            where = f"result.measurements.{key}"
            if not _PHASE_KEY.match(k):
                _fail(where, f"{untrusted(k, 80)} is not a phase name")
            if not _is(v, int) or not 0 <= v <= most:
                _fail(f"{where}.{k}", f"{untrusted(str(v), 40)} is out of range")
    peak = m.get("process_peak_bytes")
    if peak is not None and (not _is(peak, int) or not 0 <= peak < _INT64):
        _fail("result.measurements.process_peak_bytes", "must be a byte count")


def check_result(d: Any, *, artifact_dir: Path | None = None) -> CheckResult:
    """`result_from_dict` after checking that ``d`` is exactly a result document: the
    keys, the types, JSON values, an outcome and observer the ledger knows, and (with
    ``artifact_dir``) every artifact's path inside that folder. `ResultError`
    names the first field that is not."""
    _fields(d, CheckResult, "result")
    _check(
        d,
        {
            "claim": str,
            "check": str,
            "check_version": str,
            "params": dict,
            "scope": dict,
            "reason": (str, type(None)),
            "measurements": dict,
            "artifacts": list,
            "gpu_uuids": list,
            "host": str,
            "started_ns": int,
            "finished_ns": int,
        },
        "result",
    )
    if d["outcome"] not in get_args(Outcome):
        _fail("result.outcome", f"must be one of {', '.join(get_args(Outcome))}")
    if d["observer"] not in get_args(Observer):
        _fail("result.observer", "must be on or off")
    for name in ("claim", "check", "check_version"):
        _name(d[name], f"result.{name}")
        if not d[name]:
            _fail(f"result.{name}", "must not be empty")
    if d["outcome"] != "passed" and not (d["reason"] or "").strip():
        _fail("result.reason", f"outcome {d['outcome']} needs a reason")
    _name(d.get("host", ""), "result.host", 253)
    _json(d["params"], "result.params")
    _json(d["measurements"], "result.measurements")
    _reported(d["measurements"])
    for k, v in d["scope"].items():
        if k not in CHILD_FACETS:
            _fail("result.scope", f"unknown facet {untrusted(str(k), 80)}")
        if not (_is(v, (str, int))):
            _fail(f"result.scope.{k}", "must be a string or an integer")
        if isinstance(v, str):
            _name(v, f"result.scope.{k}")
        elif not 0 <= v < _INT64:
            _fail(f"result.scope.{k}", "out of range")
    for i, u in enumerate(d.get("gpu_uuids", [])):
        _name(u, f"result.gpu_uuids[{i}]", 96)
    c = d["cleanup"]
    _fields(c, CleanupProof, "result.cleanup")
    _check(c, {"complete": bool, "resources": list, "tolerance_bytes": int}, "result.cleanup")
    for i, r in enumerate(c.get("resources", [])):
        where = f"result.cleanup.resources[{i}]"
        _fields(r, ReleasedResource, where)
        _check(r, {"kind": str, "id": str, "released": bool, "proof": str}, where)
        _name(r["kind"], f"{where}.kind", 64)
        _name(r["id"], f"{where}.id", 4096)
        if not r["kind"] or not r["id"]:
            _fail(where, "kind and id must not be empty")
    if c["complete"] and not all(r["released"] for r in c.get("resources", [])):
        _fail("result.cleanup.complete", "true while a resource is not released")
    for i, a in enumerate(d.get("artifacts", [])):
        where = f"result.artifacts[{i}]"
        _fields(a, Artifact, where)
        _check(a, {"name": str, "path": str, "media_type": str}, where)
        _name(a["name"], f"{where}.name")
        if not a["name"]:
            _fail(f"{where}.name", "must not be empty")
        _name(a.get("media_type", ""), f"{where}.media_type")
        if artifact_dir is not None:
            _inside(a["path"], artifact_dir, f"{where}.path")
    return result_from_dict(d)


def result_from_dict(d: Mapping[str, Any]) -> CheckResult:
    """The inverse of `dataclasses.asdict` on a `CheckResult` (after a JSON round trip)."""
    c = d["cleanup"]
    return CheckResult(
        **{
            **d,
            "cleanup": CleanupProof(
                complete=c["complete"],
                resources=[ReleasedResource(**r) for r in c["resources"]],
                tolerance_bytes=c["tolerance_bytes"],
            ),
            "artifacts": [Artifact(**a) for a in d["artifacts"]],
        }
    )
