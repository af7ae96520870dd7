"""Who wrote each fact of a claim's result, decided by the parent once the claim ended.

A receipt is signed by the host, and a claim's result document is written by a
process that imported the pull request's code: whatever it says is the code's
word. So each fact has one author:

- *observed by the host* from outside the sandbox, here: the host name, the
  claim's GPU UUIDs, model, count and memory (NVML), the driver, the
  interpreter's python, torch and CUDA build, NCCL, the packages digest
  (`observe`);
- *set by the plan or the harness's reading of it*: ``workload``,
  ``workload_digest``, ``dtype``, ``world_size``, ``backend`` (taken from the
  result after `runners.contract.result.check_result` bounded them; the parent cannot
  import the workload to read its digest itself);
- *reported by the code under test*: the check's own figures, phase times,
  module lists, kept in the measurements, bounded and validated.

`stamped` sets the host's facts (`HostFacts`: what it observed, and the runner's
own facets: the sandbox, the network, the profile) over whatever the result said,
once, in one place, into a frozen `runners.contract.result.Stamped` (a claim that said
otherwise has its words kept, as reported, under ``reported_facts``), and makes
the claim's own ``infra-error`` a ``failed``: only the parent's evidence (a device
fault read through NVML, `ledger.fleet.faults.judge`; a fork refused before the
claim started; the host's disk full before it started) makes an infrastructure
error. Imports no torch at module import (the parent has it loaded already).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runners.contract.request import ClaimRequest
from runners.contract.result import CheckResult, Json, Stamped, untrusted

__all__ = [
    "HOST_FACETS",
    "PLAN_FACETS",
    "REPORTED_FACTS",
    "HostFacts",
    "Observed",
    "observe",
    "observed",
    "packages_digest",
    "stamp",
    "stamped",
]

HOST_FACETS = (
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
)
"""Scope facets the host observes itself (`observe`)."""

PLAN_FACETS = ("workload", "workload_digest", "dtype", "world_size", "backend")
"""Scope facets set by the plan or the harness's reading of the workload it names."""

REPORTED_FACTS = "reported_facts"
"""The measurement naming the host facts a claim said otherwise than the host saw."""

NONE = "none"


@dataclass(frozen=True, slots=True)
class Observed:
    """What the host saw of a claim's environment, from outside its sandbox."""

    host: str
    gpu_uuids: tuple[str, ...]
    scope: dict[str, str | int]


@functools.cache
def _digest(paths: tuple[str, ...]) -> str:
    lines = sorted(
        {
            f"{(d.metadata['Name'] or '').lower()}=={d.version}"
            for d in importlib.metadata.distributions(path=list(paths))
        }
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _under(path: str, roots: Sequence[Path]) -> bool:
    p = Path(path).resolve()
    return any(p == r or p.is_relative_to(r) for r in roots)


def _start_path() -> list[str]:
    """The standard library and site-packages of this interpreter: the path a fresh
    interpreter of it starts with, less its script's folder and ``PYTHONPATH``."""
    import site
    import sysconfig

    std = [sysconfig.get_path(k) for k in ("stdlib", "platstdlib")]
    dynload = os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")
    return [*std, dynload, *site.getsitepackages()]


def packages_digest(outside: Sequence[Path] = ()) -> str:
    """The digest `runners.harness.fingerprint.packages_digest` computes in the claim
    process, computed here over the same path: this project's packages (first on the
    claim's ``PYTHONPATH``) and this interpreter's path, less any entry below a tree
    under qualification (``outside``: a tree's ``*.dist-info`` would be the code's
    word) and less the working directory."""
    import runners

    here = str(Path(runners.__file__).resolve().parent.parent)
    roots = [Path(r).resolve() for r in outside]
    # The path a claim process of this interpreter starts with, not this process's
    # sys.path: what a long-lived parent added to its own (a workload's folder, a
    # test's) is on no claim's path.
    entries = [here, *os.environ.get("PYTHONPATH", "").split(os.pathsep), *_start_path()]
    seen: list[str] = []
    for e in entries:
        if not e or not os.path.isdir(e):
            continue
        a = os.path.abspath(e)
        if a not in seen and not _under(a, roots):
            seen.append(a)
    return _digest(tuple(seen))


def _visible(env: Mapping[str, str]) -> list[tuple[str, str, int]]:
    """The devices a claim with ``env`` sees, in its index order (NVML's order where
    ``CUDA_VISIBLE_DEVICES`` is unset)."""
    found = _devices()
    chosen = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if chosen is None:
        return found
    out: list[tuple[str, str, int]] = []
    for item in (x.strip() for x in chosen.split(",")):
        if item.isdigit():
            if int(item) < len(found):
                out.append(found[int(item)])
            continue
        match = [
            d for d in found if d[0].removeprefix("GPU-").startswith(item.removeprefix("GPU-"))
        ]
        if not item or len(match) != 1:
            break  # CUDA stops at the first entry it cannot use
        out.append(match[0])
    return out


_cuda_lock = threading.Lock()


@functools.cache
def _cuda_devices() -> dict[str, tuple[str, int]]:
    """Name and total memory of each GPU by UUID, as the CUDA driver gives them to torch
    (``cudaDeviceProp.name`` and ``totalGlobalMem`` are ``cuDeviceGetName`` and
    ``cuDeviceTotalMem``), read with ``cuInit`` alone: no context is created, so the
    parent holds no GPU memory and NVML's view of the claim's processes is untouched.
    NVML's total counts memory the driver reserves, so a claim process's figure (what
    earlier receipts carry) is this one. Empty where the driver cannot be read here."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {}
    out: dict[str, tuple[str, int]] = {}
    count = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {}
    get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or getattr(lib, "cuDeviceGetUuid", None)
    if get_uuid is None:
        return {}
    for i in range(count.value):
        dev = ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        total = ctypes.c_size_t()
        raw = (ctypes.c_ubyte * 16)()
        if (
            lib.cuDeviceGet(ctypes.byref(dev), i) != 0
            or lib.cuDeviceGetName(name, 256, dev) != 0
            or lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev) != 0
            or get_uuid(raw, dev) != 0
        ):
            return {}
        h = bytes(raw).hex()
        uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        out[uuid] = (name.value.decode(errors="replace"), int(total.value))
    return out


def _devices() -> list[tuple[str, str, int]]:
    """(UUID, name, total memory) of each GPU here: NVML's list, else the CUDA
    driver's (where NVML cannot be read, the GPUs are still this host's to name)."""
    from runners.harness import nvml

    found = nvml.devices()
    if found:
        return found
    with _cuda_lock:
        return [(u, name, total) for u, (name, total) in _cuda_devices().items()]


def _as_torch_sees(gpus: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Each GPU's name and total memory as the CUDA driver reports them (where it can
    be read here), NVML's otherwise."""
    with _cuda_lock:
        cuda = _cuda_devices()
    return [(u, *cuda.get(u, (name, total))) for u, name, total in gpus]


def _nccl() -> str:
    import torch

    try:
        ver = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    except Exception:
        return NONE
    parts = ver if isinstance(ver, tuple) else (ver,)
    return ".".join(str(p) for p in parts)


def observe(
    device: str,
    gpu_uuids: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    outside: Sequence[Path] = (),
    ranks: int | None = None,
) -> Observed:
    """The host's facts about a claim on ``device`` (cpu, cuda, auto), on ``gpu_uuids``
    (its own GPUs; None: the ones its ``env`` makes visible), read through NVML and this
    interpreter, never from the claim. ``ranks``: the claim's ranks, one GPU each, when
    they ran as a group (its receipt is about that many GPUs)."""
    import torch

    from runners.harness import nvml

    common: dict[str, str | int] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "packages_digest": packages_digest(outside),
    }
    if device == "cpu" or torch.version.cuda is None:
        # A torch without a CUDA build runs every claim on the CPU ("auto"), or none
        # at all ("cuda"), whatever GPUs the host has.
        gpus: list[tuple[str, str, int]] = []
    elif gpu_uuids:
        by = {nvml.normalise_uuid(d[0]): d for d in _devices()}
        gpus = [by[u] for u in map(nvml.normalise_uuid, gpu_uuids) if u in by]
    else:
        gpus = _visible(env or {})
    host = socket.gethostname()
    if not gpus:
        # No GPU seen here: the CPU's facets, with the CUDA build torch carries (shown
        # as "CUDA build X, no device"), and "cuda" as the device kind where the plan
        # asked for one.
        scope: dict[str, str | int] = {
            "device_kind": "cuda" if device == "cuda" else "cpu",
            "gpu_model": NONE,
            "gpu_count": 0,
            "gpu_memory_bytes": 0,
            "driver": NONE,
            "cuda": str(torch.version.cuda or NONE),
            "nccl": NONE,
            **common,
        }
        return Observed(host, (), scope)
    gpus = _as_torch_sees(gpus)
    uuids = tuple(nvml.normalise_uuid(d[0]) for d in gpus)
    scope = {
        "device_kind": "cuda",
        "gpu_model": gpus[0][1],
        "gpu_count": ranks if ranks is not None else len(gpus),
        "gpu_memory_bytes": gpus[0][2],
        "driver": nvml.driver_version() or "unknown",
        "cuda": str(torch.version.cuda or "unknown"),
        "nccl": _nccl(),
        **common,
    }
    return Observed(host, uuids, scope)


_INFRA_SAID = (
    "the claim process reported an infrastructure error, which only the host's own "
    "evidence establishes (a device fault it reads through NVML): "
)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Everything the host says of one claim's run, from outside it: what it observed
    (`observe`), the sandbox the claim ran under, whether it had a network, the
    profile that sized it, its ranks' number where they ran as a group, and when the
    host launched it and saw it exit. Stamped over its results once (`stamped`)."""

    seen: Observed
    sandbox: str
    """The receipts' ``sandbox`` facet: the mode the claim ran under (``none``)."""
    network: bool
    profile: str | None = None
    world_size: int | None = None
    """The ranks of a grouped claim: the ``world_size`` facet, whatever the claim said."""
    window: tuple[int, int] | None = None
    """When the host launched the claim and saw it exit (ns since the epoch); a
    claim's start and finish outside it are replaced by those."""
    claims_word: bool = True
    """The results are what the claim process wrote; False: the host's own, for a
    claim that never started (its outcome and reason stand as the host wrote them)."""

    @property
    def scope(self) -> dict[str, str | int]:
        """The facets the host alone sets: its observations and the runner's own."""
        out: dict[str, str | int] = {
            **self.seen.scope,
            "sandbox": self.sandbox,
            "network": "on" if self.network else "off",
        }
        if self.profile is not None:
            out["profile"] = self.profile
        return out


def stamped(results: Sequence[CheckResult], host: HostFacts) -> list[Stamped]:
    """Each result with the host's facts stamped over it, once, as a `Stamped` value no
    one changes after: the host's facts and scope as the host observed them, the plan's
    facets as the result gave them, the runner's facets (sandbox, network, profile);
    the claim's own ``infra-error`` a ``failed``. Where the claim said otherwise of a
    host fact, its words stay in the measurements under `REPORTED_FACTS`, as
    reported. A result stamped already is refused (`TypeError`): no fact is set twice."""
    return [_stamped(r, host) for r in results]


def observed(request: ClaimRequest) -> Observed:
    """The host's facts about ``request``'s claim, read from outside it (`observe`)."""
    return observe(
        request.run.device,
        request.gpu_uuids,
        env=request.env,
        outside=[Path(str(p)) for p in request.code()],
        ranks=request.run.world_size if request.grouped and request.run.device != "cpu" else None,
    )


def stamp(
    request: ClaimRequest,
    results: Sequence[CheckResult],
    sandbox: str,
    window: tuple[int, int] | None = None,
    *,
    claims_word: bool = True,
) -> list[Stamped]:
    """``request``'s results with the host's facts stamped on them, once (`stamped`):
    its observation, the ``sandbox`` facet, the claim's network and profile;
    ``window`` when the host launched the claim and saw it exit; ``claims_word`` False
    for the host's own results of a claim that never started."""
    c = request.run
    return stamped(
        results,
        HostFacts(
            seen=observed(request),
            sandbox=sandbox,
            network=c.network,
            profile=c.profile,
            world_size=c.world_size if request.grouped else None,
            window=window,
            claims_word=claims_word,
        ),
    )


def _stamped(r: CheckResult, host: HostFacts) -> Stamped:
    if isinstance(r, Stamped):
        raise TypeError(f"{r.claim}: its result was stamped already (the host's facts once)")
    seen, window = host.seen, host.window
    said: dict[str, Json] = {}
    started, finished = r.started_ns, r.finished_ns
    if window is not None and not (window[0] <= started <= finished <= window[1]):
        said["started_ns"], said["finished_ns"] = started, finished
        started, finished = window
    for k in HOST_FACETS:
        if k in r.scope and r.scope[k] != seen.scope[k]:
            said[k] = r.scope[k]
    if r.host and r.host != seen.host:
        said["host"] = r.host
    if r.gpu_uuids and tuple(r.gpu_uuids) != seen.gpu_uuids:
        said["gpu_uuids"] = list[Json](r.gpu_uuids)
    plan = {k: r.scope[k] for k in PLAN_FACETS if k in r.scope}
    if host.world_size is not None and "world_size" in plan:
        plan["world_size"] = host.world_size
    # The observed facets, then the plan's, then the runner's: the order receipts
    # have always listed them in.
    scope = {**seen.scope, **plan, **host.scope}
    measurements = dict(r.measurements)
    if said:
        measurements[REPORTED_FACTS] = said
    outcome, reason = r.outcome, r.reason
    if outcome == "infra-error" and host.claims_word:
        if seen.scope["device_kind"] == "cuda" and not seen.gpu_uuids:
            # The host's own reading: a CUDA claim, and no GPU it could run on here.
            reason = (
                "the host has no GPU for a CUDA claim (none through NVML, or a torch "
                "without a CUDA build); the claim process said: "
                f"{untrusted(reason or 'no reason given', 2000)}"
            )
        else:
            outcome = "failed"
            reason = _INFRA_SAID + untrusted(reason or "no reason given", 2000)
    return Stamped(
        claim=r.claim,
        check=r.check,
        check_version=r.check_version,
        params=r.params,
        scope=scope,
        outcome=outcome,
        reason=reason,
        measurements=measurements,
        observer=r.observer,
        cleanup=r.cleanup,
        artifacts=tuple(r.artifacts),
        gpu_uuids=seen.gpu_uuids,
        host=seen.host,
        started_ns=started,
        finished_ns=finished,
    )
