"""Whose failure, weighed only on the base receipts the head's runner vouches for: every
such receipt on the same device counts (not only the newest), and another runner key's
receipt for the base never flips the label. Real signed statements (the factories')."""

from __future__ import annotations

from typing import Any

from ledger.qualification.attribution import attribute
from ledger.qualification.evidence import ReceiptEvidence, short_id
from tests.ledger.factories import statement

BASE = "b" * 40
HEAD = "c" * 40
SCOPE = {"device_kind": "cpu"}
CLAIM = "admission.no-oom-after-admit"


def _receipt(
    seq: int, commit: str, outcome: str, signer: str, by: str | None = None
) -> ReceiptEvidence:
    over: dict[str, Any] = {
        "source": {"repo": "example", "commit": commit, "tree": "2" * 40, "dirty": False}
        | ({"base": BASE} if commit == HEAD else {}),
        "outcome": outcome,
        "runner": {
            "host": "gpu-host",
            "started": "2026-11-30T00:00:00Z",
            "finished": "2026-11-30T00:00:01Z",
            "ledger_version": "0.1.0",
        },
    }
    if outcome != "passed":
        over["reason"] = "peak 9 GiB > admitted 8 GiB"
    return ReceiptEvidence(
        id="sha256:" + f"{seq:02d}" * 32,
        seq=seq,
        statement=statement(**over),
        signer=signer,
        signer_role="runner",
        signer_registered_by=by,
    )


def _label(base: list[ReceiptEvidence], head_by: str | None = None) -> Any:
    head = [_receipt(10, HEAD, "failed", "key-a", head_by)]
    got = attribute(CLAIM, "admission", SCOPE, head, base)
    assert got is not None
    return got


def test_another_runner_keys_failed_base_receipt_does_not_flip_the_label() -> None:
    # The head's runner judged the base: it passes. Another runner key then signs a
    # newer failed receipt of the base on the same host's CPU.
    ours = _receipt(2, BASE, "passed", "key-a")
    forged = _receipt(3, BASE, "failed", "key-b")
    a = _label([ours, forged])
    assert a.label == "introduced", a.text
    assert a.base_receipt == ours.id and a.base_receipts == (ours.id,)
    assert short_id(forged.id) not in a.text  # the forged receipt is not evidence here
    # Alone, it is no base receipt at all: no label is taken from it.
    assert _label([forged]).label == "no-base"


def test_a_key_the_same_token_holder_registered_speaks_for_the_runner() -> None:
    # A runner that rotated its key: both registered by the same token holder.
    rotated = _receipt(3, BASE, "failed", "key-new", by="gpu-host-token")
    assert _label([rotated], head_by="gpu-host-token").label == "base-too"
    # Another token holder's key does not.
    other = _receipt(3, BASE, "failed", "key-x", by="someone-else")
    assert _label([other], head_by="gpu-host-token").label == "no-base"


def test_every_base_receipt_on_the_device_is_weighed_not_only_the_newest() -> None:
    # The base passed, then failed, on the same device, both by the head's key: the
    # base is not settled there, and the pull request is blamed for nothing.
    passed = _receipt(2, BASE, "passed", "key-a")
    failed = _receipt(3, BASE, "failed", "key-a")
    a = _label([passed, failed])
    assert a.label == "base-unjudged", a.text
    assert "both passes" in a.text and a.base_receipts == (passed.id, failed.id)
    # Two failures of the base there: already on the base, both named.
    again = _receipt(4, BASE, "failed", "key-a")
    b = _label([failed, again])
    assert b.label == "base-too" and b.base_receipt == again.id
    assert f"receipts {short_id(failed.id)}, {short_id(again.id)}" in b.text
