"""The built-in estimator's calibrations kept across sandboxed runs of one tree.

A claim calibrates the built-in estimator on its device and keeps the fit as a file
named by its key under ``$LEDGER_CALIBRATION_DIR`` (`runners.adapt.calibrate`: the
key covers the workload's digest, the device and the method's version). The sandbox
passes no ``LEDGER_*`` variable, its HOME is a scratch folder removed with the run and
its /tmp is private, so inside it that file was lost with the run and every sandboxed
run measured again.

Here the run hands its sandbox a folder of its own (``calibration`` in the run's
folder, which the sandbox may write, named to it by that variable), filled before the
fork servers start with what earlier sandboxed runs of the same git tree kept, and
takes back what the run wrote there once its servers have stopped. What a sandbox
writes is the code under test's word, so a fit is kept by the tree whose claims wrote
it and handed only to runs of that tree: another tree's code never chooses a fit this
one reads (its files are read beneath the folder, never through a link, within a size
limit, and only names a key can have). Inside, the claim still reads a file only where
its own words agree with its name and with the workload, device and package it
measures now.

Standard library only: the parent hands the folder in before it imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ledger.outputs.beneath import Folder, Refused

__all__ = ["CACHE_VAR", "hand_in", "store", "take_back"]

CACHE_VAR = "LEDGER_CALIBRATION_DIR"
"""Where calibrations are kept (`runners.adapt.calibrate` reads the same name)."""
FOLDER = "calibration"
"""The run's calibration folder, in the run's folder."""
MAX_BYTES = 1024 * 1024
"""A calibration file a sandbox wrote: more than this is not kept."""
MAX_FILES = 256
"""Files taken back from one run: a run cannot fill the host's folder."""
_NAME = re.compile(r"^[0-9a-f]{64}\.json$")


def store(env: Mapping[str, str] = os.environ) -> Path:
    """The host's calibration folder: ``$LEDGER_CALIBRATION_DIR``, else the user's cache
    (``$XDG_CACHE_HOME/ledger/calibration``), as `runners.adapt.calibrate` finds it."""
    if env.get(CACHE_VAR):
        return Path(env[CACHE_VAR])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "ledger" / "calibration"


def _kept(tree: str, env: Mapping[str, str]) -> Path:
    """The folder of what sandboxed runs of ``tree`` kept (by a digest of its id)."""
    return store(env) / "trees" / hashlib.sha256(tree.encode()).hexdigest()[:32]


def hand_in(run_dir: Path, tree: str, env: Mapping[str, str] = os.environ) -> Path:
    """The run's own calibration folder, made in ``run_dir`` and filled with what earlier
    sandboxed runs of ``tree`` kept; the sandbox is told its path."""
    folder = run_dir / FOLDER
    folder.mkdir(exist_ok=True)
    store_folder = _kept(tree, env)
    _copy(store_folder.parent, store_folder.name, folder)
    return folder


def take_back(run_dir: Path, tree: str, env: Mapping[str, str] = os.environ) -> int:
    """Keep for later runs of ``tree`` what the run wrote in its calibration folder; the
    count of files kept. Read beneath ``run_dir`` (the sandbox may write in it, never
    replace it): no link is followed, the folder's own name included."""
    return _copy(run_dir, FOLDER, _kept(tree, env))


def _copy(root: Path, rel: str, dst: Path) -> int:
    """Copy the calibration files of folder ``rel`` below ``root`` (their names, regular
    files within the limit, read beneath ``root``) into ``dst``, each by a rename; the
    count copied."""
    done = 0
    with contextlib.suppress(OSError, Refused), Folder(root) as folder:
        for name, _ in folder.listing(rel)[:MAX_FILES]:
            if not _NAME.match(name):
                continue
            try:
                data = folder.read(f"{rel}/{name}", MAX_BYTES)
            except (OSError, Refused):
                continue
            dst.mkdir(parents=True, exist_ok=True)
            tmp = dst / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            tmp.replace(dst / name)
            done += 1
    return done
