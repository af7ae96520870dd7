"""What every receipt of a run waits for before it is recorded: the doctor's judgement of
the plan (`ledger.execution.preflight`), a refusal raised wherever it is asked."""

from __future__ import annotations

import threading

__all__ = ["Gate"]


class Gate:
    """What every receipt of the run waits for: the probe's judgement. Calling it
    returns once the plan may be recorded, or raises the refusal (each time)."""

    def __init__(self) -> None:
        self._judged = threading.Event()
        self._refusal: BaseException | None = None

    def judged(self, refusal: BaseException | None = None) -> None:
        self._refusal = refusal
        self._judged.set()

    def __call__(self) -> None:
        self._judged.wait()
        self.poll()

    def is_judged(self) -> bool:
        """Whether the probe has judged (with or without a refusal): never waits."""
        return self._judged.is_set()

    def poll(self) -> None:
        """Without waiting: raises the refusal once the probe has refused, so the claims
        started meanwhile stop then rather than when one of them finishes."""
        if self._judged.is_set() and self._refusal is not None:
            raise self._refusal
