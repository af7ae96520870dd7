"""What a fork server pays once, before serving: torch imported on one thread (a fork
copies only the forking thread), the harness and every check, the workloads' modules and
those a plan or an earlier run names, the workloads with `prepare()` prepared and those
set up twice or more built once (`runners.workloads.prebuilt`); and, after each worker,
the library modules it imported that the server lacked, for the next claim."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runners.fork.forkparent import ALWAYS
from runners.fork.forkready import Ready
from runners.fork.forksafety import refusal, threads, witness

__all__ = ["Stopped", "claim_threads", "import_modules", "learned_modules", "preload"]


def import_modules(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Import each module that is not yet imported; (imported, failed). A module whose
    import would initialise CUDA is not kept from being imported, but then the server
    refuses to fork and every claim falls back to a fresh interpreter."""
    import importlib

    done, failed = [], []
    for name in sorted(set(names)):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            done.append(name)
        except Stopped:
            raise  # the server was told to stop meanwhile: not this module's failure
        except BaseException:  # a module's import may raise anything
            failed.append(name)
    return done, failed


class Stopped(BaseException):
    """The fork server's SIGTERM, raised wherever its main thread is. Its own class, so
    that `import_modules`, which takes anything else a module's import raises for that
    module's failure, lets it through: a stop that came while the server imported what
    a claim had learnt (a second or more for torch's compile stack) was swallowed there,
    and its parent waited out its 10 s grace before killing it."""


_THREADS = 0
"""The intra-op thread count a claim gets back (the server computes on one)."""


def claim_threads() -> int:
    """The intra-op thread count a claim gets back, once `preload` ran (else 0)."""
    return _THREADS


def _single_threaded() -> int:
    """Before torch is imported: the thread count claims are to get back, and
    ``OMP_NUM_THREADS=1`` for this process.

    Importing torch runs a parallel region, which starts GNU OpenMP's pool (one
    thread per CPU less one, idle on a futex). A fork copies only the forking thread:
    the child inherits a pool it does not have (its next parallel region waits forever)
    and whatever lock another thread held. With one OpenMP thread from the start the
    server stays a single thread (`_threads` says so at every fork), and each forked
    worker sizes a pool of its own (`runners.fork.forkserver`'s `_fresh_environment`,
    from `claim_threads`)."""
    asked = os.environ.get("OMP_NUM_THREADS", "")
    os.environ["OMP_NUM_THREADS"] = "1"
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return _physical_cores()


def _physical_cores() -> int:
    """Cores (not hyperthreads) this process may run on: torch's own default count."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = set()
    for cpu in cpus:
        try:
            topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
            cores.add(topo.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def preload(doc: Any) -> Ready:
    """Everything paid once before the first claim: torch on one thread, the harness and
    every check, the workloads' modules, the modules a plan or an earlier run names, the
    workloads prepared (or built once); what was done, as the server's `Ready`."""
    global _THREADS
    t0 = time.monotonic()
    _THREADS = _single_threaded()
    import torch

    # Belt and braces: computing on one thread even where OpenMP ignored the variable
    # (building a model in `prepare` included: torch's random init is serial anyway).
    torch.set_num_threads(1)
    # Either makes every fork refused (each claim then starts a fresh interpreter and
    # pays every import and build again): who did it is named, not guessed.
    cuda_by, threads_by, undo = witness(torch)

    import runners.api
    import runners.rank.serve  # noqa: F401
    from runners.workloads.loader import (
        WorkloadLoadError,
        _import_from,
        parse_ref,
        prebuild_workload,
        prepare_workload,
    )

    if isinstance(doc, list):  # the older form: the workloads only
        doc = {"workloads": doc}
    loaded, failed = [], []
    for root, ref in doc.get("workloads", []):
        try:
            _import_from(Path(root), parse_ref(ref)[0], ref)
            loaded.append(ref)
        except WorkloadLoadError as e:
            # The worker will report it properly; the server just does not preload it.
            failed.append(f"{ref}: {e}")
    learn = bool(doc.get("learn", True))
    imported, not_imported = import_modules([*(ALWAYS if learn else ()), *doc.get("modules", [])])
    from runners.harness.fingerprint import packages_digest

    packages_digest()  # every claim's fingerprint reads it; once here, inherited
    prepared, prebuilt, not_prebuilt = [], [], []
    twice = {json.dumps(x, sort_keys=True) for x in doc.get("prebuild", [])}
    for root, ref, params in doc.get("prepare", []):
        try:
            if prepare_workload(Path(root), ref, params):
                prepared.append(ref)
                continue
        except Exception as e:  # the worker builds it again and reports
            failed.append(f"{ref}: prepare: {type(e).__name__}: {e}")
            continue
        if json.dumps([root, ref, params], sort_keys=True) not in twice:
            continue  # set up once at most: nothing to save
        try:
            why = prebuild_workload(Path(root), ref, params)
        except Exception as e:  # the claim's own setup will say what is wrong
            why = f"setup on CPU: {type(e).__name__}: {e}"
        (not_prebuilt.append(f"{ref}: {why}") if why else prebuilt.append(ref))
    undo()
    return Ready(
        seconds=round(time.monotonic() - t0, 3),
        preloaded=loaded,
        not_preloaded=failed,
        modules=imported,
        modules_failed=not_imported,
        prepared=prepared,
        prebuilt=prebuilt,
        not_prebuilt=not_prebuilt,
        cuda_initialized=bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
        cuda_initialized_by=cuda_by[0] if cuda_by else None,
        threads_started_by=threads_by[:8],
        learn=learn,
        threads=threads(),
        fork_refused=refusal(),
        claim_threads=_THREADS,
    )


def learned_modules(before: set[str]) -> list[str]:
    """Library modules this worker imported that the server lacked (not the checkout's
    own: those are the workload preloads)."""
    out = []
    for name, mod in list(sys.modules.items()):
        if name in before or name == "__main__" or mod is None:
            continue
        where = getattr(mod, "__file__", None) or ""
        if where and where.startswith(_LIBRARY_DIRS):
            out.append(name)
    return sorted(out)


def _library_dirs() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    with contextlib.suppress(AttributeError):
        dirs.update(site.getsitepackages())
    return tuple(sorted(d.rstrip("/") + "/" for d in dirs))


_LIBRARY_DIRS = _library_dirs()
