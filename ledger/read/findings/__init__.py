"""What a receipt's check found: its deciding figures, per check kind, read from the
predicate alone.

Each kind says in one or two sentences the figure that decided its outcome
against the bound it was judged by, and gives a small table of the rows behind
it (a counterexample marked ✘, a refusal ⊘). The receipt page and `ledger show`
render the same `Findings`, so both say the same thing. A receipt whose kind is
unknown here, or that records none of its kind's figures (an infra-error before
any measurement), says in one line what it records instead: never nothing.
Imported receipts say that the figures are what the importer read, not what
Ledger measured.

One module per family of kinds (`admission`, `backward`, `numerics`, `runtime`,
`imported`), the model they share in `model`, the terminal table in `terminal`;
here, the dispatch by check name and what a receipt says where no kind decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger.read.findings.admission import admission
from ledger.read.findings.backward import full_prefix
from ledger.read.findings.imported import events, intoto, junit
from ledger.read.findings.model import _ROWS, COUNTEREXAMPLE, REFUSED, Findings, Table, _num
from ledger.read.findings.numerics import gradient, regression
from ledger.read.findings.runtime import cleanup, command, mesh, observer
from ledger.read.findings.terminal import table_lines
from ledger.read.humanize import iec, number, value

__all__ = ["COUNTEREXAMPLE", "REFUSED", "Findings", "Table", "findings", "table_lines"]


def findings(predicate: dict[str, Any]) -> Findings:
    """The deciding figures of one receipt's predicate."""
    check = str((predicate.get("check") or {}).get("name") or "")
    m = predicate.get("measurements") or {}
    params = (predicate.get("check") or {}).get("parameters") or {}
    kind = _KINDS.get(check)
    found = None
    if kind is not None and isinstance(m, dict):
        found = kind(m, params, predicate)
    return found or _recorded(check, m, predicate)


def _by(check: str) -> str:
    """Who read a receipt's figures: Ledger's own check, an importer, `ledger run`'s
    watch over a command, or (`ledger attest`) the harness that signed them."""
    if check.startswith("import-"):
        return "importer"
    if check == "command":
        return "command"
    return "check" if check in _KINDS else "harness"


def _recorded(check: str, m: Any, p: dict[str, Any]) -> Findings:
    """What a receipt records where it holds no figure its kind decides by (another
    harness's attested result, an infra-error before any measurement): its own scalars,
    and its measured/predicted where it names both."""
    scalars = [
        (k, v)
        for k, v in (m.items() if isinstance(m, dict) else [])
        if not isinstance(v, dict | list)
    ]
    name = check or "?"
    if not scalars:
        said = ", with the reason recorded above" if p.get("reason") else ""
        return Findings(
            (
                f"The check {name} records no measured figures: its outcome, "
                f"{p.get('outcome', '?')}, is all it says{said}.",
            ),
            by=_by(name),
        )
    table = Table(("figure", "value"), tuple((k, value(k, v)) for k, v in scalars[:_ROWS]))
    more = max(0, len(scalars) - _ROWS)
    pred, meas = m.get("predicted_bytes"), m.get("measured_bytes")
    if _num(pred) and _num(meas) and pred > 0:
        ratio = meas / pred
        lead = (
            f"The check {name} recorded measured {iec(meas)} against predicted {iec(pred)}, "
            f"measured/predicted {number(ratio)} (as its signer recorded them)."
        )
        return Findings((lead,), Table(table.columns, table.rows, (), more), ratio > 1, _by(name))
    lead = (
        f"The check {name} has no deciding figure Ledger knows; the first of its "
        f"{len(m)} recorded measurement{'s' if len(m) != 1 else ''} are beneath."
    )
    return Findings((lead,), Table(table.columns, table.rows, (), more), by=_by(name))


_Kind = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], Findings | None]
_KINDS: dict[str, _Kind] = {
    "admission": admission,
    "full-prefix-backward": full_prefix,
    "regression-24view": regression,
    "gradient-compare": gradient,
    "mesh-handoff": mesh,
    "observer-off-control": observer,
    "cleanup": cleanup,
    "command": command,
    "import-junit": junit,
    "import-in-toto": intoto,
    "import-admission-events": events,
}
