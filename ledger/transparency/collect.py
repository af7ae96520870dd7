"""The log's side of C2SP tlog-witness: submit a checkpoint to each witness a
policy names (with a URL), with a consistency proof from the size that
witness last cosigned, and keep the cosignatures that verify.

Each witness is asked on its own, with a bounded timeout: one that is down,
slow or refusing delays nothing but its own cosignature.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from ledger._internal import merkle
from ledger._internal.checkpoint import parse_checkpoint
from ledger.evidence.errors import CheckpointError, NotFoundError
from ledger.store.store import Store
from ledger.transparency.checkpoints import verify_note
from ledger.transparency.cosignature import cosigned_by
from ledger.transparency.policy import Policy, Witness
from ledger.transparency.witness import SIZE_TYPE

__all__ = ["FORK_STATUSES", "Submitted", "cosign", "cosigned_note", "quorum_refused"]

# One witness answers one small request; more than this is a witness down.
TIMEOUT_S = 10.0
# A 409 names the witness's size; one retry from it, then give up until next time.
_ATTEMPTS = 2
_MAX_ANSWER = 64 * 1024
_MAX_PARALLEL = 16


class Submitted(NamedTuple):
    """What one witness answered: its policy name, whether it cosigned, and why not.

    `refused`: the witness answered and said no (a 4xx, or a 200 without a valid
    cosignature), as opposed to one that was unreachable or failing (5xx), which
    may cosign when asked again. `status`: the HTTP status of its last answer."""

    witness: str
    cosigned: bool
    detail: str
    refused: bool = False
    status: int | None = None


# A witness answers these when the log does not extend what it cosigned before:
# 409 for another root at its stored size (tlog-witness v1.0) or a size beyond the
# checkpoint, 422 for a consistency proof that fails (and, in v1.1, another root).
FORK_STATUSES = (409, 422)


def cosigned_note(store: Store, size: int) -> bytes:
    """The checkpoint at `size` with every cosignature kept for it."""
    row = store.checkpoint(size)
    if row is None:
        raise NotFoundError(f"no checkpoint at size {size}")
    return (row.note + "".join(store.cosignatures(size))).encode()


def _post(url: str, body: bytes, timeout: float) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "text/plain; charset=utf-8")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status), r.headers.get("Content-Type", ""), r.read(_MAX_ANSWER)
    except urllib.error.HTTPError as e:
        return int(e.code), e.headers.get("Content-Type", ""), e.read(_MAX_ANSWER)


def request_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    """An add-checkpoint request body: `old N`, the proof lines, a blank line, the note."""
    lines = [b"old %d" % old, *(base64.b64encode(h) for h in proof)]
    return b"".join(line + b"\n" for line in lines) + b"\n" + note


def _submit(store: Store, w: Witness, note: bytes, leaves: list[bytes], timeout: float) -> str:
    """The cosignature line `w` returned for `note`; raises _Refused with the reason."""
    cp = parse_checkpoint(note)
    old = min(store.witnessed_size(w.vkey.text()), cp.size)
    assert w.url is not None
    url = w.url.rstrip("/") + "/add-checkpoint"
    for _ in range(_ATTEMPTS):
        proof = merkle.consistency_proof(old, cp.size, leaves) if 0 < old < cp.size else []
        try:
            status, ctype, answer = _post(url, request_body(old, proof, note), timeout)
        except (urllib.error.URLError, OSError) as e:
            raise _Refused(f"unreachable: {getattr(e, 'reason', e)}") from None
        if status == 409 and ctype.split(";")[0].strip() == SIZE_TYPE:
            try:
                held = int(answer.decode("ascii").strip())
            except ValueError:
                raise _Refused("409 with a malformed size", 409) from None
            if held > cp.size:
                raise _Refused(f"HTTP 409: the witness holds size {held}, beyond this one", 409)
            old = held
            continue
        if status != 200:
            reason = answer.decode("utf-8", "replace").strip().splitlines()[:1]
            raise _Refused(f"HTTP {status}{': ' + reason[0] if reason else ''}", status)
        for line in answer.decode("utf-8", "replace").splitlines(keepends=True):
            if not line.startswith("— ") or not line.endswith("\n"):
                continue
            try:
                with_line = parse_checkpoint(note + line.encode())
            except CheckpointError:
                continue
            if cosigned_by(with_line, w.vkey) is not None:
                return line
        raise _Refused("no valid cosignature by its key in the answer", 200)
    raise _Refused(f"the witness's size kept changing (last {old})")


class _Refused(Exception):
    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status

    @property
    def final(self) -> bool:
        """The witness answered no; asking again as things stand gets no cosignature
        (a 5xx or 429 is the witness's own trouble, and passes)."""
        return self.status is not None and self.status != 429 and self.status < 500


def cosign(
    store: Store, policy: Policy, size: int | None = None, *, timeout: float = TIMEOUT_S
) -> list[Submitted]:
    """Ask every witness of `policy` with a URL to cosign the checkpoint at `size`
    (default: the newest); keep each valid cosignature; one result per witness."""
    row = store.latest_checkpoint() if size is None else store.checkpoint(size)
    if row is None:
        raise NotFoundError("no checkpoint to cosign; run `ledger log checkpoint`")
    note = row.note.encode()
    cp = verify_note(store, note)
    have = parse_checkpoint(cosigned_note(store, cp.size))
    asked = []
    results: dict[str, Submitted] = {}
    for name, w in policy.witnesses.items():
        if w.url is None:
            continue
        if cosigned_by(have, w.vkey) is not None:
            results[name] = Submitted(name, True, "cosigned before")
        else:
            asked.append((name, w))
    if asked:
        leaves = store.leaf_hashes(upto=cp.size)

        def ask(name: str, w: Witness) -> Submitted:
            try:
                line = _submit(store, w, note, leaves, timeout)
            except _Refused as e:
                return Submitted(name, False, str(e), e.final, e.status)
            store.add_cosignature(cp.size, w.vkey.text(), line)
            return Submitted(name, True, "cosigned")

        # All at once: a slow witness holds up no other's cosignature.
        with ThreadPoolExecutor(max_workers=min(len(asked), _MAX_PARALLEL)) as pool:
            for r in pool.map(lambda nw: ask(*nw), asked):
                results[r.witness] = r
    return [results[n] for n in policy.witnesses if n in results]


def quorum_refused(policy: Policy, size: int, results: list[Submitted]) -> str | None:
    """One line naming the witnesses that refused, once their refusals leave the
    policy's quorum out of reach whatever the others (unreachable ones included)
    do; None while the quorum is met or may still be. A 409 or 422 is said to
    suggest a fork: the witness holds a checkpoint this log does not extend."""
    cosigned = {r.witness for r in results if r.cosigned}
    if policy.witnessed(policy.quorum, cosigned):
        return None
    refused = [r for r in results if r.refused]
    if policy.witnessed(policy.quorum, set(policy.witnesses) - {r.witness for r in refused}):
        return None
    named = ", ".join(f"{r.witness} ({r.detail})" for r in refused)
    line = f"the witnesses refused the quorum {policy.quorum!r} at size {size}: {named}"
    if any(r.status in FORK_STATUSES for r in refused):
        line += (
            "; a 409 or 422 suggests a fork: the witness holds a checkpoint of this "
            "log that this one does not extend"
        )
    return line
