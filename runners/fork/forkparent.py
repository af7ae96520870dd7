"""The parent's side of the fork server (`runners.fork.forkserver`): launch servers, wait
for them, hand out the client command line, stop them.

Imports no torch: `ledger qualify` launches its servers with it before it imports the
runners itself, so that the servers' imports and its own run at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners.contract.forkwire import client_argv
from runners.fork.forkready import Ready

__all__ = [
    "ALWAYS",
    "READY",
    "ForkServer",
    "Launched",
    "Prepared",
    "Spec",
    "Starting",
    "client_argv",
]

READY = "forkserver ready"

ALWAYS = ("torch._dynamo",)
"""Imported by every check anyway (the determinism set-up, the live-tensor tracker):
seconds per claim when each worker pays it."""

Prepared = tuple[str, str, Mapping[str, Any]]
"""(checkout root, workload entry point, workload parameters) to build and prepare."""
Wrap = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
"""(command line, environment) -> the same, started inside a sandbox."""


class ForkServer:
    """The parent's handle: the server process and the command line of a client."""

    def __init__(self, proc: subprocess.Popen[str], sock: Path, ready: Ready) -> None:
        self.proc = proc
        self.sock = sock
        self.ready = ready
        """What the server reported once preloaded (modules, seconds, CUDA state)."""

    @classmethod
    def launch(
        cls,
        preload: list[tuple[str, str]],
        env: dict[str, str],
        *,
        modules: Sequence[str] = (),
        prepare: Sequence[Prepared] = (),
        prebuild: Sequence[Prepared] = (),
        wrap: Wrap | None = None,
        sock_dir: Path | None = None,
        learn: bool = True,
        confine: Mapping[str, Any] | None = None,
    ) -> Starting:
        """Launch a server that imports the ``(root, "module:attr")`` workloads of
        ``preload`` and the ``modules``, and builds and prepares the ``prepare``
        workloads (those that have a ``prepare()``). ``wrap`` turns its command line and
        environment into the sandboxed ones (the server imports the pull request's modules,
        and every claim process it forks inherits its sandbox); ``sock_dir`` is where its
        socket goes (a folder the sandbox can write). ``learn=False`` (for measuring what
        preloading saves) imports nothing beyond the workloads: not `ALWAYS`, not what
        claims imported. Returns at once (`Starting.wait` for the ready server):
        servers launched one after the other import and prepare at the same time (a
        pull request's base and head trees). ``confine`` (``{"run_dir": ...}``, where the
        server is sandboxed) makes each claim process the only writer of its own folder
        in the run's (`runners.fork.confine`)."""
        sock = Path(tempfile.mkdtemp(prefix="ledger-fork-", dir=sock_dir)) / "s"
        env = {**env, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        argv = [sys.executable, "-m", "runners.fork.forkserver", str(sock)]
        if wrap is not None:
            argv, env = wrap(argv, env)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdin is not None
        doc = {
            "workloads": [list(x) for x in preload],
            "modules": list(modules),
            "prepare": [[r, ref, dict(p)] for r, ref, p in prepare],
            "prebuild": [[r, ref, dict(p)] for r, ref, p in prebuild],
            "learn": learn,
            "confine": dict(confine or {}),
        }
        proc.stdin.write(json.dumps(doc))
        proc.stdin.close()
        return Starting(proc, sock)

    def argv(self, module: str, request: Path, result: Path) -> list[str]:
        """The client command line that runs ``python -m module request result`` forked."""
        return client_argv(self.sock, module, request, result)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.sock.unlink()
            self.sock.parent.rmdir()


class Starting:
    """A server launched and still importing: `wait` for it to be ready."""

    def __init__(self, proc: subprocess.Popen[str], sock: Path) -> None:
        self.proc = proc
        self.sock = sock

    def wait(self) -> ForkServer:
        """The server once it reports ready; RuntimeError (the process killed) if it
        exits or says anything else first."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(READY):
            self.kill()
            raise RuntimeError(f"fork server did not start: {line.strip() or 'no output'}")
        return ForkServer(self.proc, self.sock, Ready.from_json(json.loads(line[len(READY) :])))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass(frozen=True)
class Spec:
    """What one fork server preloads and prepares (`ForkServer.launch`'s arguments)."""

    preload: list[tuple[str, str]]
    modules: Sequence[str] = ()
    prepare: Sequence[Prepared] = ()
    prebuild: Sequence[Prepared] = ()
    """Of ``prepare``, those without ``prepare()`` the server builds once itself
    (`runners.workloads.prebuilt`)."""

    @classmethod
    def of(
        cls,
        root: Path,
        workloads: Iterable[tuple[str, Mapping[str, Any]]],
        modules: Sequence[str] = (),
    ) -> Spec:
        """The server of the tree at ``root``: each ``(entry point, parameters)`` workload's
        module imported, and each built and prepared once (an empty entry point: none)."""
        listed = [(ref, dict(params)) for ref, params in workloads if ref]
        counts = Counter((ref, json.dumps(p, sort_keys=True)) for ref, p in listed)
        prepare = {(ref, json.dumps(p, sort_keys=True)): (str(root), ref, p) for ref, p in listed}
        refs = sorted({ref for ref, _ in prepare})
        # Building once pays only where the server will set the workload up twice or more
        # (a workload listed once per setup it will make).
        twice = [prepare[k] for k, n in counts.items() if n >= 2]
        return cls([(str(root), ref) for ref in refs], list(modules), list(prepare.values()), twice)


class Launched:
    """Fork servers launched together and still importing: `wait` for them, `close`
    them (launch early, wait when the first claim needs them)."""

    def __init__(self, starting: list[Starting | None]) -> None:
        self.starting = starting
        self.servers: list[ForkServer | None] | None = None

    @classmethod
    def all(
        cls,
        specs: Sequence[Spec],
        env: dict[str, str],
        *,
        wrap: Wrap | None = None,
        sock_dir: Path | None = None,
        confine: Mapping[str, Any] | None = None,
    ) -> Launched:
        """One server per spec, all launched now; none when ``LEDGER_FORK_SERVER=0``."""
        if os.environ.get("LEDGER_FORK_SERVER", "1") == "0":
            return cls([None] * len(specs))
        starting: list[Starting | None] = []
        for spec in specs:
            try:
                starting.append(
                    ForkServer.launch(
                        spec.preload,
                        env,
                        modules=spec.modules,
                        prepare=spec.prepare,
                        prebuild=spec.prebuild,
                        wrap=wrap,
                        sock_dir=sock_dir,
                        confine=confine,
                    )
                )
            except OSError:
                starting.append(None)
        return cls(starting)

    def wait(self) -> list[ForkServer | None]:
        """Each server once ready; None for one that could not start (callers spawn
        interpreters)."""
        if self.servers is None:
            servers: list[ForkServer | None] = []
            for pending in self.starting:
                try:
                    servers.append(pending.wait() if pending is not None else None)
                except (OSError, RuntimeError):
                    servers.append(None)
            self.servers = servers
        return self.servers

    def close(self) -> None:
        for i, pending in enumerate(self.starting):
            server = self.servers[i] if self.servers is not None else None
            if server is not None:
                server.close()
            elif pending is not None:
                pending.kill()
                with contextlib.suppress(OSError):
                    pending.sock.parent.rmdir()
