"""What a sandbox takes from its host: the environment it is passed (the runtime's
variables and the plan's, never `LEDGER_*` or a secret-looking name), the
interpreter's paths it binds, the GPU device nodes, and where the ledger's secrets
can lie (hidden wherever they fall inside a bound folder). `ledger.sandbox` turns
these into a policy.

Standard library only.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["gpu_devices", "interpreter_needs", "interpreter_paths", "passed_env", "secret_paths"]

# The variables a training process needs from its host (locale, the CUDA and NCCL
# stacks, thread counts), by exact name or by prefix ending in "_".
_PASSED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_",
    "TZ",
    "TERM",
    "USER",
    "LOGNAME",
    "LD_LIBRARY_PATH",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "TORCH_",
    "PYTORCH_",
    "CUBLAS_",
    "CUDNN_",
    "TRITON_",
    "GLOO_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONFAULTHANDLER",
    "PYTHONWARNINGS",
)
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|(^|_)KEYS?($|_)|AUTH", re.I)
_NEVER = "LEDGER_"


def _passes(name: str) -> bool:
    return any(name == p or (p.endswith("_") and name.startswith(p)) for p in _PASSED)


def passed_env(
    environ: Mapping[str, str], allowed: Iterable[str] = (), *, python_path: Sequence[str] = ()
) -> dict[str, str]:
    """The environment inside: the runtime's variables, the plan's `allowed` names,
    never `LEDGER_*` or a name that looks like a secret unless the plan names it
    (`LEDGER_*` not even then); ``PYTHONPATH`` is ``python_path``, built by the caller
    from what it binds, never inherited."""
    named = set(allowed)
    out = {
        k: v
        for k, v in environ.items()
        if not k.startswith(_NEVER) and (k in named or (_passes(k) and not _SECRET.search(k)))
    }
    if python_path:
        out["PYTHONPATH"] = os.pathsep.join(python_path)
    return out


def secret_paths(environ: Mapping[str, str], extra: Iterable[str | Path] = ()) -> list[str]:
    """Where the ledger's secrets and state can be: every absolute path a `LEDGER_*`
    variable names (a file's folder), the default key, outbox, database and
    artifact locations, and ``extra`` (e.g. ``--db``'s folder), and the home
    folder and /tmp as a whole. None of them is bound; each is covered where it
    lies inside a folder that is."""
    home = environ.get("HOME") or str(Path.home())
    data = environ.get("XDG_DATA_HOME") or f"{home}/.local/share"
    config = environ.get("XDG_CONFIG_HOME") or f"{home}/.config"
    found = [f"{config}/ledger", f"{data}/ledger", home, "/tmp", "/etc/shadow", "/etc/ssh"]
    for name, value in environ.items():
        if name.startswith(_NEVER):
            value = value.removeprefix("sqlite:///")
            if value.startswith("/"):
                # A file's whole folder (a database has its journal and artifacts beside it).
                is_file = os.path.isfile(value) or name == "LEDGER_DB"
                found.append(os.path.dirname(value) if is_file else value)
    found += [str(x) for x in extra]
    out: list[str] = []
    for p in found:
        real = os.path.realpath(p)
        for q in (p, real):
            if q not in out and q != "/":
                out.append(q)
    return out


def interpreter_paths(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(paths to bind read-only, PYTHONPATH) so that the child imports what this
    interpreter imports: the prefixes, every `sys.path` entry, this project's
    packages (first on the path), and the caller's PYTHONPATH entries."""
    here = str(Path(__file__).resolve().parents[2])
    py_path = [here]
    for entry in environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in py_path:
            py_path.append(os.path.abspath(entry))
    binds = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    binds += [os.path.realpath(sys.executable), *(p for p in sys.path if p), *py_path]
    seen: list[str] = []
    for b in binds:
        for q in (os.path.abspath(b), os.path.realpath(b)):
            if q not in seen and os.path.exists(q) and q != "/":
                seen.append(q)
    return seen, py_path


def interpreter_needs() -> list[str]:
    """What the sandboxed interpreter cannot start without: its binary, its standard
    library and the codecs it loads first (the launcher checks the sandbox's uid can
    read them, and names the one it cannot)."""
    stdlib = os.path.dirname(os.__file__)
    return [os.path.realpath(sys.executable), stdlib, os.path.join(stdlib, "encodings")]


def gpu_devices() -> tuple[str, ...]:
    """The NVIDIA device nodes, so CUDA and NCCL work inside."""
    dev = Path("/dev")
    found = sorted(str(p) for p in dev.glob("nvidia*"))
    if (dev / "dri").is_dir():
        found.append("/dev/dri")
    return tuple(found)
