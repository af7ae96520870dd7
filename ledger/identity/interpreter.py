"""The Python a command runs with, asked in a subprocess: not Ledger's own.

`ledger run -- pytest ...` tests whatever interpreter `python` on the
command's PATH is (a project venv, a conda env), so the receipt's scope must
name that one: its version, torch and NCCL versions and the digest of its
installed distributions, computed by that interpreter exactly as
`ledger.identity.environment` computes them for Ledger's own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

__all__ = ["PROBE", "probe"]

NONE = "none"

# Runs under the command's interpreter, in isolated mode (``-I``): neither the working
# directory (a pull request's checkout, whose ``json.py`` or ``hashlib.py`` would run
# here, outside the sandbox, beside the runner's environment) nor ``PYTHONPATH`` (its
# ``sitecustomize``) is on the path it imports from. The distributions are still read
# where the command would find them, the working directory and ``PYTHONPATH`` first,
# as metadata only (nothing of them runs), so the digest is the one earlier releases
# computed without ``-I``: the same lines as ledger.identity.environment's
# packages_digest, _version and _nccl.
PROBE = r"""
import hashlib, importlib.metadata as md, json, os, platform, sys
where = ["", *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p), *sys.path]
dists = list(md.distributions(path=where))
names = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in dists})
def version(name):
    found = next(md.distributions(name=name, path=where), None)
    return "none" if found is None else found.version
nccl = next((d.version for d in dists
             if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl")), "none")
print(json.dumps({
    "executable": sys.executable,
    "python": platform.python_version(),
    "packages": len(names),
    "packages_digest": hashlib.sha256("\n".join(names).encode()).hexdigest(),
    "torch": version("torch"),
    "nccl": nccl,
}))
"""

_TIMEOUT_S = 60


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    """What `python` (else `python3`) on ``env['PATH']`` is; ``found: false`` when there
    is none or it does not answer."""
    path = env.get("PATH", "")
    exe = shutil.which("python", path=path) or shutil.which("python3", path=path)
    if exe is None:
        return {"found": False, "why": "no python or python3 on the command's PATH"}
    try:
        out = subprocess.run(
            [exe, "-I", "-c", PROBE],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        doc = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        return {"found": False, "path": exe, "why": f"{exe} did not answer: {e}"}
    if not isinstance(doc, dict):
        return {"found": False, "path": exe, "why": f"{exe} did not answer"}
    return {"found": True, "path": exe, **doc}


def scope_of(found: Mapping[str, Any]) -> dict[str, str]:
    """The scope facets the command's interpreter sets."""
    if not found.get("found"):
        return {"python": NONE, "packages_digest": NONE, "torch": NONE, "nccl": NONE}
    return {k: str(found[k]) for k in ("python", "packages_digest", "torch", "nccl")}
