"""How many processes one forked claim may hold beside the others of its sandbox: a
pids cgroup of its own below the sandbox's (`ledger.sandbox.pids`).

Claims forked from the fork server share its sandbox, and so its one pids cgroup:
without more, one claim that forks until refused takes every process the claims
beside it (on devices of their own, or sharing one) had left. Where the sandbox has a
pids cgroup, the host side makes a child of it per claim, ``pids.max`` an equal share
of the sandbox's for each claim that may run at once, and the fork client (as root,
outside the sandbox) moves the claim's process into it before the claim is told to go
(`runners.fork.forkclient`): everything the claim starts is counted there, and the
sandbox's own limit still bounds all of them together; what the claim starts forked
from a fork server (gradient-compare's arms) is placed there too
(`ledger.sandbox.claimplace`). Where the sandbox has none (no pids controller, not
root) there is no limit per claim either, and the receipt says so.

The claim process proves its limit from inside before its code runs
(`ledger.sandbox.selftest.claim_pids`): it finds itself counted in the cgroup the host
made for it, whose ``pids.max`` the host reads; the receipt says what it found
(``sandbox_claim_pids_proof``), "not proved" where it was not so.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ledger.sandbox import pids
from ledger.sandbox.launcher import CLAIM_PIDS_PREFIX

__all__ = ["NOT_PROVED", "NO_CLAIM_LIMIT", "ClaimPids", "claim_facts", "sandbox_folder"]

NO_CLAIM_LIMIT = "none per claim (the sandbox has no pids cgroup of its own to divide)"
"""The receipt's ``sandbox_claim_pids`` where a forked claim has no limit of its own."""

NOT_PROVED = "not proved"
"""How ``sandbox_claim_pids_proof`` begins where the claim did not find its limit."""


def sandbox_folder(pid: int) -> Path | None:
    """The pids cgroup of the sandbox that process ``pid`` is in (one of Ledger's), as
    the host sees it; None where it is in none."""
    return pids.sandbox_of(pids.folder_of(pid))


@dataclass(frozen=True, slots=True)
class ClaimPids:
    """One claim's pids cgroup below its sandbox's: made empty, entered by the claim's
    process before it starts, removed once the claim ended."""

    path: Path
    most: int
    sandbox_most: int
    share: int
    note: Path
    """Where the claim's client writes what the claim found of its limit from inside
    (`ledger.sandbox.claimplace.record`): in a folder of this process's own."""

    @classmethod
    def make(cls, server_pid: int, share: int) -> ClaimPids | None:
        """A child of the pids cgroup the fork server ``server_pid`` is in, with a
        ``1/share`` part of its ``pids.max``; None where the server is in no sandbox
        pids cgroup of Ledger's, or none can be made below it."""
        box = sandbox_folder(server_pid)
        if box is None:
            return None
        try:
            text = (box / "pids.max").read_text().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None  # "max": the sandbox itself has no limit to divide
        total, share = int(text), max(1, share)
        most = max(1, total // share)
        path = box / f"{CLAIM_PIDS_PREFIX}{secrets.token_hex(4)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(most))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        note = Path(tempfile.mkdtemp(prefix="ledger-claim-pids-")) / "proof.json"
        return cls(path, most, total, share, note)

    def fact(self) -> str:
        """The receipt's ``sandbox_claim_pids``."""
        return (
            f"pids.max {self.most} per claim (a child of the sandbox's pids cgroup,"
            f" whose {self.sandbox_most} bound the claims together; {self.share} at once)"
        )

    def proof(self) -> str:
        """The receipt's ``sandbox_claim_pids_proof``: what the claim process found of
        its limit from inside, before its code ran, and what was placed with it."""
        try:
            doc = json.loads(self.note.read_text())
        except (OSError, ValueError):
            doc = {}
        if not isinstance(doc, dict) or not doc:
            return f"{NOT_PROVED}: the claim process said nothing of its pids cgroup"
        inside, most = str(doc.get("inside") or ""), str(doc.get("max") or "")
        if inside.rsplit("/", 1)[-1] != self.path.name:
            why = doc.get("refused") or f"counted in pids cgroup {inside or 'none'}"
            return f"{NOT_PROVED}: {why} (not {self.path.name}); it ran none of its code forked"
        if most != str(self.most):
            return f"{NOT_PROVED}: pids.max of {self.path.name} reads {most or 'nothing'}"
        placed = int(doc.get("placed") or 0)
        arms = f"; {placed} process(es) it started forked from a fork server placed there too"
        return (
            f"proved from inside before its code ran: the claim process was counted in"
            f" pids cgroup {self.path.name}, pids.max {most} as the host read it"
            + (arms if placed else "")
        )

    def close(self) -> None:
        """Remove it; one that still holds a process (not reaped yet) is removed with
        its sandbox's (`ledger.sandbox.launcher.remove_claims`)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
        shutil.rmtree(self.note.parent, ignore_errors=True)


def claim_facts(
    facts: dict[str, str], forked: bool, afresh: bool, claim_pids: ClaimPids | None
) -> dict[str, str]:
    """A claim's sandbox ``facts`` with its own process limit: for a claim forked from a
    fork server (``forked``), the limit (or that it had none) and its proof; a claim
    the fork server refused, started ``afresh`` in a sandbox of its own, names no
    limit per claim (its sandbox's holds it), only why its own did not hold. No
    sandbox facts (unsandboxed), none of these either."""
    out = dict(facts)
    if not out:
        return out
    if forked and not afresh:
        out["sandbox_claim_pids"] = NO_CLAIM_LIMIT if claim_pids is None else claim_pids.fact()
    if forked and claim_pids is not None:
        proof = claim_pids.proof()
        if not afresh or proof.startswith(NOT_PROVED):
            out["sandbox_claim_pids_proof"] = proof
    return out
