"""The monitor's report: an in-toto Statement about the log it read, signed
(DSSE, Ed25519) by the monitor's key, so a reviewer checks who said it and
about which state of the log."""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.evidence import dsse
from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import VerificationError
from ledger.evidence.keys import LocalKey, key_id
from ledger.evidence.kinds import STATEMENT_TYPE
from ledger.monitor.watch import Scan

__all__ = ["MONITOR_PREDICATE", "check_report", "sign_report"]

MONITOR_PREDICATE = "https://ledger.dev/predicates/monitor-report/v1"


def sign_report(
    scan: Scan, origin: str, root: bytes, multiple: float, monitored_at: str, key: LocalKey
) -> bytes:
    """The signed report (DSSE envelope JSON) of one scan of the log `origin`,
    whose Merkle root at the scan's end is `root`."""
    stmt = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"{origin}@{scan.end}", "digest": {"sha256": root.hex()}}],
        "predicateType": MONITOR_PREDICATE,
        "predicate": {
            "log": origin,
            "from": scan.start,
            "to": scan.end,
            "monitoredAt": monitored_at,
            "rateMultiple": multiple,
            "journals": [{"keyid": k, "statements": n} for k, n in sorted(scan.journals.items())],
            "findings": [f.to_json() for f in scan.findings],
        },
    }
    return dsse.sign(canonical_bytes(stmt), key).model_dump_json().encode()


def check_report(raw: bytes, trust: list[Ed25519PublicKey]) -> dict[str, Any]:
    """The report's statement once a trusted monitor key's signature holds."""
    env = dsse.parse_envelope(raw)
    payload, _ = dsse.verify(env, {key_id(k): k for k in trust})
    doc: Any = json.loads(payload)
    if not isinstance(doc, dict) or doc.get("predicateType") != MONITOR_PREDICATE:
        raise VerificationError("not a monitor report")
    return doc
