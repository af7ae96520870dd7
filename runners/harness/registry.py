"""Resource-ownership registry whose releases are proven by observation.

A check registers what it creates (child processes and their groups,
torch.distributed groups, temporary directories, ballast and other tensors)
and the registry releases them at the end, newest first, each proven by its
own observation. It also looks for what the workload created without
registering: new descendant processes (scanned in /proc) and new entries in
the check's private temporary root (``tempfile.tempdir`` and ``TMPDIR`` point
there while the registry is open, so other programs' files in /tmp are not
mistaken for leaks). Leaks are released too, but they make the proof
incomplete. Finally memory must be back to its baseline within a tolerance
(`runners.harness.proofs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import re
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from runners.contract.result import CleanupProof, ReleasedResource
from runners.harness.collect import collect
from runners.harness.probe import CpuProbe, CudaProbe, MemoryProbe, MemorySample
from runners.harness.processes import descendants, proc_table, stop_group, stop_pid, stop_popen
from runners.harness.proofs import CUDA_TOLERANCE_BYTES, memory_proofs


def _user() -> str:
    # The same name torch's default_cache_dir() derives, with its fallback.
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


# --- the registry ---------------------------------------------------------------------


@dataclass(eq=False)
class Owned:
    """A registered resource; `release` runs at most once."""

    kind: str
    id: str
    _release: Callable[[], list[ReleasedResource]]
    proofs: list[ReleasedResource] = field(default_factory=list)
    released: bool = False
    payload: Any = None
    """The object the registry holds for it (a tensor, a Popen)."""


class ResourceRegistry:
    """Context manager; ``proof`` is set when it closes (also on KeyboardInterrupt)."""

    def __init__(
        self,
        *,
        probe: MemoryProbe | None = None,
        tolerance_bytes: int | None = None,
        timeout_s: float = 10.0,
        scan_children: bool = True,
        private_tempdir: bool = True,
    ) -> None:
        self.probe = probe
        if tolerance_bytes is None:
            tolerance_bytes = CUDA_TOLERANCE_BYTES if isinstance(probe, CudaProbe) else 0
        self.tolerance_bytes = tolerance_bytes
        self.timeout_s = timeout_s
        self.scan_children = scan_children
        self.private_tempdir = private_tempdir
        self._owned: list[Owned] = []
        self._seq = 0
        self._done: list[ReleasedResource] = []
        self._children0: set[int] = set()
        self._temp_root: Path | None = None
        self._saved_tempdir: tuple[str | None, str | None] = (None, None)
        self._mem0: MemorySample | None = None
        self._retro0 = 0
        self._open = False
        self.proof: CleanupProof | None = None

    # -- lifecycle --

    def __enter__(self) -> ResourceRegistry:
        self._open = True
        if self.scan_children:
            self._children0 = set(descendants(os.getpid()))
        if self.private_tempdir:
            # torch resolves its compile cache under gettempdir() on first use and pins
            # the path in this variable; pin it outside the private root first, or the
            # cache would be created (and deleted) inside it and read as the check's leak.
            os.environ.setdefault(
                "TORCHINDUCTOR_CACHE_DIR",
                os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}"),
            )
            root = Path(tempfile.mkdtemp(prefix="ledger-check-"))
            self._temp_root = root
            self._saved_tempdir = (tempfile.tempdir, os.environ.get("TMPDIR"))
            tempfile.tempdir = str(root)
            os.environ["TMPDIR"] = str(root)
        if self.probe is not None:
            self.probe.release_cached()
            self._mem0 = self.probe.sample()
            if isinstance(self.probe, CpuProbe):
                self._retro0 = self.probe.tracker.retroactive_bytes
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proof is None:
            self.release()

    @property
    def temp_root(self) -> Path:
        """The private temporary root (tempfile.gettempdir() while open)."""
        if self._temp_root is None:
            raise RuntimeError("registry has no private temp root")
        return self._temp_root

    def _add(self, owned: Owned) -> Owned:
        if not self._open or self.proof is not None:
            raise RuntimeError("resource registered outside an open registry")
        self._owned.append(owned)
        return owned

    # -- registration --

    def own_popen(self, popen: subprocess.Popen[Any], *, group: bool) -> Owned:
        """A child process (``group``: it leads its own process group, pgid == pid)."""
        pid = popen.pid
        timeout = self.timeout_s

        def release() -> list[ReleasedResource]:
            gone, why = stop_popen(popen, timeout_s=timeout)
            out = [ReleasedResource(kind="process", id=str(pid), released=gone, proof=why)]
            if group:
                g_gone, g_why = stop_group(pid, timeout_s=timeout)
                out.append(
                    ReleasedResource(
                        kind="process-group", id=str(pid), released=g_gone, proof=g_why
                    )
                )
            return out

        return self._add(Owned(kind="process", id=str(pid), _release=release, payload=popen))

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new session (its own process group) and own it."""
        popen: subprocess.Popen[bytes] = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.own_popen(popen, group=True)
        return popen

    def own_dist_group(self, group: Any = None, *, name: str = "world") -> Owned:
        """A torch.distributed process group (None: the default/world group)."""
        import torch.distributed as dist

        def release() -> list[ReleasedResource]:
            if group is None:
                if dist.is_initialized():
                    dist.destroy_process_group()
                gone = not dist.is_initialized()
                why = f"torch.distributed.is_initialized() is {not gone}"
            else:
                with contextlib.suppress(Exception):
                    dist.destroy_process_group(group)
                pg_map = getattr(dist.distributed_c10d._world, "pg_map", {})
                gone = group not in pg_map
                why = f"group {'absent from' if gone else 'still in'} the world's pg_map"
            return [ReleasedResource(kind="dist-group", id=name, released=gone, proof=why)]

        return self._add(Owned(kind="dist-group", id=name, _release=release))

    def own_tempdir(self, path: Path) -> Owned:
        p = Path(path)

        def release() -> list[ReleasedResource]:
            shutil.rmtree(p, ignore_errors=True)
            gone = not os.path.exists(p)
            why = f"os.path.exists({str(p)!r}) is {not gone}"
            return [ReleasedResource(kind="tempdir", id=str(p), released=gone, proof=why)]

        return self._add(Owned(kind="tempdir", id=str(p), _release=release))

    def make_tempdir(self, prefix: str = "ledger-") -> Path:
        """Create and own a temporary directory."""
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self.own_tempdir(path)
        return path

    def own_tensor(self, kind: str, tensor: torch.Tensor, *, name: str = "") -> Owned:
        """A tensor the check allocated (``ballast``, ``gpu-allocation``). The registry
        holds the reference: read it as ``owned.payload`` and keep no other."""
        ref = weakref.ref(tensor.untyped_storage())
        nbytes = int(tensor.untyped_storage().nbytes())
        self._seq += 1
        ident = f"{name or kind}#{self._seq}:{tensor.device}:{nbytes}B"
        owned_box: list[Owned] = []

        def release() -> list[ReleasedResource]:
            owned_box[0].payload = None
            if ref() is not None:
                collect()  # a reference cycle may be all that keeps it
            if ref() is not None:
                collect(final=True)  # ... or one among objects frozen before the claim
            gone = ref() is None
            why = (
                f"weakref to its {nbytes}-byte storage is dead after the registry's reference "
                "was dropped"
                if gone
                else f"weakref to its {nbytes}-byte storage is alive: another reference holds it"
            )
            return [ReleasedResource(kind=kind, id=ident, released=gone, proof=why)]

        owned = self._add(Owned(kind=kind, id=ident, _release=release, payload=tensor))
        owned_box.append(owned)
        return owned

    # -- release --

    def release_now(self, owned: Owned) -> list[ReleasedResource]:
        """Release one resource early; its proofs join the final proof."""
        if owned.released:
            return owned.proofs
        owned.released = True
        try:
            owned.proofs = owned._release()
        except Exception as e:
            owned.proofs = [
                ReleasedResource(
                    kind=owned.kind,
                    id=owned.id,
                    released=False,
                    proof=f"release raised {type(e).__name__}: {e}",
                )
            ]
        self._done.extend(owned.proofs)
        return owned.proofs

    def _registered_pids(self) -> set[int]:
        out: set[int] = set()
        for o in self._owned:
            if o.kind == "process" and o.id.isdigit():
                out.add(int(o.id))
        return out

    def _leaked_processes(self) -> list[ReleasedResource]:
        if not self.scan_children:
            return []
        table = proc_table()
        if table is None:
            return [
                ReleasedResource(
                    kind="process",
                    id="*",
                    released=False,
                    proof="no /proc: unregistered child processes cannot be observed",
                )
            ]
        found = descendants(os.getpid(), table)
        leaked = sorted(set(found) - self._children0 - self._registered_pids())
        out: list[ReleasedResource] = []
        for pid in leaked:
            info = found[pid]
            gone, why = stop_pid(pid, timeout_s=self.timeout_s)
            out.append(
                ReleasedResource(
                    kind="process",
                    id=str(pid),
                    released=False,
                    proof=(
                        f"LEAK: not registered; descendant pid {pid} ({info.comm}, ppid "
                        f"{info.ppid}, state {info.state}) appeared during the check; the "
                        f"registry then stopped it: {why}" + ("" if gone else " (still present)")
                    ),
                )
            )
        return out

    def _leaked_temp(self) -> list[ReleasedResource]:
        root = self._temp_root
        if root is None:
            return []
        registered = {Path(o.id) for o in self._owned if o.kind == "tempdir"}
        out: list[ReleasedResource] = []
        try:
            entries = sorted(root.iterdir())
        except OSError:
            entries = []
        for entry in entries:
            if entry in registered:
                continue
            kind = "tempdir" if entry.is_dir() else "tempfile"
            out.append(
                ReleasedResource(
                    kind=kind,
                    id=str(entry),
                    released=False,
                    proof=(
                        f"LEAK: not registered; {entry} was created in the check's temp root "
                        "and left behind (removed with the root)"
                    ),
                )
            )
        return out

    def _close_temp_root(self) -> list[ReleasedResource]:
        root = self._temp_root
        if root is None:
            return []
        old_tempdir, old_env = self._saved_tempdir
        tempfile.tempdir = old_tempdir
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        shutil.rmtree(root, ignore_errors=True)
        gone = not os.path.exists(root)
        return [
            ReleasedResource(
                kind="tempdir",
                id=str(root),
                released=gone,
                proof=f"private temp root; os.path.exists({str(root)!r}) is {not gone}",
            )
        ]

    def _memory(self) -> list[ReleasedResource]:
        probe, mem0 = self.probe, self._mem0
        if probe is None or mem0 is None:
            return []
        probe.release_cached(final=True)
        mem1 = probe.sample()
        if isinstance(probe, CpuProbe):
            # Storages first seen during the check existed before it: not the check's.
            retro = probe.tracker.retroactive_bytes - self._retro0
            mem1 = dataclasses.replace(mem1, allocated_bytes=mem1.allocated_bytes - retro)
        return memory_proofs(probe, mem0, mem1, tolerance_bytes=self.tolerance_bytes)

    def release(self) -> CleanupProof:
        """Release everything, newest first; scan for leaks; check memory."""
        if self.proof is not None:
            return self.proof
        leaks: list[ReleasedResource] = []
        tail: list[ReleasedResource] = []
        try:
            for owned in reversed(self._owned):
                self.release_now(owned)
            leaks = self._leaked_processes() + self._leaked_temp()
        finally:
            # Even when interrupted, the process-wide temp settings are restored.
            tail = self._close_temp_root()
            self._open = False
        resources = [*self._done, *leaks, *tail, *self._memory()]
        complete = all(r.released for r in resources) and not leaks
        self.proof = CleanupProof(
            complete=complete, resources=resources, tolerance_bytes=self.tolerance_bytes
        )
        return self.proof
