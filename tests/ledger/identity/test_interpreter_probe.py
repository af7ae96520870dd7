"""`ledger run` asks the command's interpreter what it is, outside the sandbox: nothing
of the checkout may run there, and the answer stays the one earlier releases signed.

The probe once ran ``python -c`` in the caller's working directory, a pull request's
checkout in CI: a ``hashlib.py`` (or ``json.py``, ``platform.py``) committed there was
imported by the probe instead of the standard library's, and a ``sitecustomize.py`` on
``PYTHONPATH`` ran at start, both beside the runner's environment and its tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.identity.interpreter import probe, scope_of

# The probe as an earlier release ran it (``python -c``, no ``-I``): its digest is
# the scope receipts already carry.
EARLIER = r"""
import hashlib, importlib.metadata as md, json, platform, sys
dists = list(md.distributions())
names = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in dists})
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "none"
nccl = next((d.version for d in dists
             if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl")), "none")
print(json.dumps({
    "python": platform.python_version(),
    "packages_digest": hashlib.sha256("\n".join(names).encode()).hexdigest(),
    "torch": version("torch"),
    "nccl": nccl,
}))
"""


def _dist(folder: Path, name: str, version: str) -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _env(pythonpath: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(pythonpath)}


def test_the_probe_runs_nothing_of_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout, pp, marker = tmp_path / "checkout", tmp_path / "pp", tmp_path / "ran"
    checkout.mkdir()
    pp.mkdir()
    planted = f"open({str(marker)!r}, 'a').write(__name__ + ' ')\n"
    for name in ("hashlib", "json", "platform"):
        (checkout / f"{name}.py").write_text(planted)
    (pp / "sitecustomize.py").write_text(planted)
    monkeypatch.chdir(checkout)
    found = probe(_env(pp))
    assert found["found"], found
    assert not marker.exists(), marker.read_text()
    assert len(found["packages_digest"]) == 64


def test_the_probe_gives_the_digest_earlier_releases_signed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Distributions in the working directory and on PYTHONPATH count, as they did.
    checkout, pp = tmp_path / "checkout", tmp_path / "pp"
    _dist(checkout, "in-the-checkout", "1.0")
    _dist(pp, "on-the-path", "2.0")
    monkeypatch.chdir(checkout)
    env = _env(pp)
    exe = Path(sys.executable)
    earlier = json.loads(
        subprocess.run(
            [str(exe), "-c", EARLIER], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    now = scope_of(probe(env))
    assert now == earlier
    # The planted distributions were read (as metadata): they are in the digest.
    bare = scope_of(probe({**env, "PYTHONPATH": ""}))
    assert bare["packages_digest"] != now["packages_digest"]
    assert hashlib.sha256(b"").hexdigest() != now["packages_digest"]
