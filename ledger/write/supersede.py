"""`ledger supersede ID --reason TEXT`: a receipt that replaces one logged receipt.

It inherits the superseded receipt's claim, check, scope and source, so it
counts in exactly the place the old one did, and it says before signing what
it will and will not lift: a counterexample is lifted only when the new
receipt is signed by the counterexample's own signer, or once an independent
reviewer concurs with it (until then every surface says "supersession
pending review"); it qualifies nothing by itself (it carries no
measurements and no cleanup proof) and lifts no other receipt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from ledger import __version__
from ledger.evidence.errors import InputError, first_validation_error
from ledger.evidence.keys import LocalKey
from ledger.evidence.models import QualificationStatement, Runner, Supersedes
from ledger.qualification.supersession import SUPERSESSION_PENDING
from ledger.write.journal import sign
from ledger.write.record import Recorder

__all__ = ["Supersession", "contradiction", "plan_supersession", "supersede"]


@dataclass(frozen=True, slots=True)
class Supersession:
    """The receipt about to be signed, and what it will and will not do."""

    statement: QualificationStatement
    will: tuple[str, ...]
    will_not: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    """Where the reason contradicts what the ledger says of the receipt (its baseline
    label): said first, and the supersession still recorded (`contradiction`)."""

    def describe(self, tense: str = "will") -> str:
        """What it does, as `tense` says it: `will` before signing, `would` for a
        dry run, `did` once recorded."""
        lines = [f"warning: {w}" for w in self.warnings]
        lines += [f"it {tense}:", *(f"  - {w}" for w in self.will), f"it {tense} not:"]
        lines += [f"  - {w}" for w in self.will_not]
        return "\n".join(lines) + "\n"


def plan_supersession(
    shown: dict[str, Any],
    key: LocalKey,
    reason: str,
    outcome: Literal["passed", "failed"] = "passed",
) -> Supersession:
    """From `ledger show --json`'s document of the superseded receipt."""
    if shown.get("kind") != "receipt":
        raise InputError(
            f"{shown.get('id')} is a {shown.get('kind')}: only receipts are superseded"
        )
    if not reason.strip():
        raise InputError("a supersession needs a --reason")
    try:
        old = QualificationStatement.model_validate(shown["statement"])
    except ValidationError as e:
        raise InputError(f"superseded receipt: {first_validation_error(e)}") from None
    rid, sid = str(shown["id"]), str(shown["id"]).removeprefix("sha256:")[:12]
    p = old.predicate
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    predicate = p.model_copy(
        update={
            "outcome": outcome,
            "reason": None if outcome == "passed" else reason,
            "measurements": {},
            "cleanup": None,
            "artifacts": [],
            "runner": Runner(started=now, finished=now, ledger_version=__version__),
            "supersedes": [Supersedes(id=rid, reason=reason)],
        }
    )
    stmt = old.model_copy(update={"predicate": predicate})
    # Validate the copy as a whole, as ingest will.
    stmt = QualificationStatement.model_validate(stmt.model_dump(mode="json", by_alias=True))
    scope = ", ".join(f"{k}={v}" for k, v in p.scope.items()) or "(any)"
    where = f"claim {p.claim} at scope {scope}, commit {p.source.commit[:12]}"
    own = shown.get("signer", {}).get("keyid") == key.keyid
    counterexample = p.outcome == "failed"
    will: list[str] = []
    if counterexample and own:
        will.append(f"lift counterexample {sid} ({where}): you signed it")
    elif counterexample:
        will.append(
            f"name counterexample {sid} ({where}) as superseded; you did not sign it, so it"
            f" stands ({SUPERSESSION_PENDING}) until an independent reviewer concurs with"
            " the new receipt"
        )
    else:
        will.append(f"retire {p.outcome} receipt {sid} ({where}) from the evidence")
    will.append(f"record a {outcome} receipt with the reason {reason!r}")
    will_not = [
        f"qualify {p.claim}: the new receipt carries no measurements and no cleanup proof",
        "lift any other receipt, nor count outside the superseded receipt's claim, scope"
        " and revision",
    ]
    said = contradiction(shown.get("attribution"), reason, outcome)
    return Supersession(stmt, tuple(will), tuple(will_not), (said,) if said else ())


# Words of a reason that lay a failure at the host's or chance's door (not the code's).
_NOT_THE_CODE = frozenset(
    {
        "flaky",
        "flake",
        "flakey",
        "host",
        "infra",
        "infrastructure",
        "hardware",
        "gpu",
        "device",
        "node",
        "transient",
        "intermittent",
        "driver",
        "network",
        "noise",
        "noisy",
        "fluke",
    }
)


def contradiction(label: Any, reason: str, outcome: str) -> str | None:
    """Where a reason lifting a failure blames the host or chance while the baseline
    says the pull request introduced it (the base passes on the same device, by the
    same runner): one line saying so, else None. A warning, not a refusal: the words
    of a reason are a person's, and the supersession's authority rules still decide
    what it lifts."""
    if not isinstance(label, dict) or outcome != "passed" or not label.get("text"):
        return None
    words = set(re.findall(r"[a-z]+", reason.lower()))
    said = f"the reason {reason!r} contradicts the baseline, which says: {label['text']}"
    if label.get("label") == "introduced" and words & _NOT_THE_CODE:
        return said
    return None


def supersede(recorder: Recorder, key: LocalKey, planned: Supersession) -> str:
    """Sign and record the planned supersession; returns the new receipt's id."""
    [rec] = recorder.record([sign(planned.statement, key)])
    return rec.id
