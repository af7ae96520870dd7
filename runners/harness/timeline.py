"""Where a claim's time goes outside its check: wall-clock stamps in the claim process.

The fork server stamps ``forked`` (the child exists) and ``go`` (its client placed it
and said start); `runners.rank.serve` stamps ``serving`` (the request read), and
`runners.api.run_claim` ``device_ready`` (the device resolved: torch's lazy CUDA
init) and ``fingerprinted``; the CUDA context itself is made as the check's harness
starts (``harness_phase_times``). The check's own
``started_ns`` / ``finished_ns`` follow. The parent adds what it saw
(`runners.claim.isolated`: ``launched``, ``exited``, ``proved``), and the receipt carries
them all as offsets from ``launched`` (``claim_timeline_ns``), so that the time a
claim spends before and after its check is read from evidence, not guessed.
Stamps are ``time.time_ns()``: the parent and the claim process share the host's
clock.
"""

from __future__ import annotations

import time

MEASUREMENT = "claim_timeline_ns"
"""The receipt's measurement holding the offsets."""

_STAMPS: dict[str, int] = {}


def reset() -> None:
    """A new claim process (forked from a server that may hold a claim's stamps)."""
    _STAMPS.clear()


def mark(event: str) -> None:
    _STAMPS[event] = time.time_ns()


def stamps() -> dict[str, int]:
    return dict(_STAMPS)


def offsets(stamps: dict[str, int], origin: int) -> dict[str, int]:
    """Each stamp as nanoseconds after ``origin`` (negative: before it), in time order."""
    return {k: v - origin for k, v in sorted(stamps.items(), key=lambda kv: kv[1])}


def placed(reported: object, parent: dict[str, int], check: tuple[int, int]) -> dict[str, int]:
    """A result's timeline: the claim process's own stamps (``reported``; whatever is
    not a name and an integer is dropped: the parent does not trust the child), the
    check's start and end, and the parent's stamps, as offsets from ``launched``."""
    got: dict[str, int] = {}
    if isinstance(reported, dict):
        got = {
            str(k)[:40]: v
            for k, v in list(reported.items())[:16]
            if isinstance(v, int) and not isinstance(v, bool)
        }
    got.update({"check_started": check[0], "check_finished": check[1]}, **parent)
    # A stamp days away from the launch is no stamp of this claim, and an integer past
    # 2**53 cannot be signed (RFC 8785): dropped, whoever wrote it.
    return {k: v for k, v in offsets(got, parent["launched"]).items() if abs(v) < _DAY_NS}


_DAY_NS = 86_400 * 10**9
