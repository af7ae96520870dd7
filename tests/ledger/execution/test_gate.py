"""The gate every receipt of a run waits at (`ledger.execution.gate`): the doctor's refusal
is raised to whoever asks, each time, and polling never waits."""

from __future__ import annotations

import threading

import pytest

from ledger.evidence.errors import UsageError
from ledger.execution.gate import Gate


def test_polling_an_unjudged_gate_returns_at_once_and_waiting_meets_the_refusal() -> None:
    gate = Gate()
    gate.poll()  # not judged yet: nothing to raise, no wait
    seen: list[BaseException] = []

    def wait() -> None:
        try:
            gate()
        except UsageError as e:
            seen.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    gate.judged(UsageError("refused before any receipt was recorded: 1 required claim"))
    waiter.join()
    assert [str(e) for e in seen] == ["refused before any receipt was recorded: 1 required claim"]
    for ask in (gate.poll, gate):  # each time, polled or waited for
        with pytest.raises(UsageError):
            ask()


def test_a_gate_judged_without_a_refusal_lets_every_receipt_through() -> None:
    gate = Gate()
    gate.judged()
    gate()
    gate.poll()
