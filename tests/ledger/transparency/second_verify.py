"""Run under the second implementation's interpreter (aics-tlog, Python >= 3.12), not
by pytest: check a ledger receipt's C2SP tlog-proof with aics-tlog's signed-note,
checkpoint, cosignature/v1, witness-quorum and RFC 9162 inclusion verifiers.

aics-tlog has no reader of the tlog-proof container itself, so its few lines
(header, `extra`, `index`, the hashes, a blank line, the note) are split here;
every check of a signature, a quorum or a hash is aics-tlog's. The leaf is the
ledger's rule, `"<index>\\n<extra>\\n" || body`, hashed by aics-tlog's leaf_hash.

    python second_verify.py PROOF BODY LOG_VKEY QUORUM WITNESS_VKEY...

prints one JSON object: {"ok", "witnesses", "size", "error"}.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from aics_tlog import (
    WitnessPolicy,
    leaf_hash,
    parse_note,
    parse_vkey,
    verify_checkpoint,
    verify_inclusion,
)


def main(proof_path: str, body_path: str, log_vkey: str, quorum: str, *witnesses: str) -> int:
    data = Path(proof_path).read_bytes()
    head, _, note_bytes = data.partition(b"\n\n")
    lines = head.decode("ascii").split("\n")
    assert lines.pop(0) == "c2sp.org/tlog-proof@v1", "not a tlog-proof"
    extra = (
        base64.b64decode(lines.pop(0)[len("extra ") :]) if lines[0].startswith("extra ") else None
    )
    index = int(lines.pop(0).removeprefix("index "))
    path = [base64.b64decode(line) for line in lines]
    policy = WitnessPolicy(quorum=int(quorum), witnesses=tuple(parse_vkey(w) for w in witnesses))
    log_key = parse_vkey(log_vkey)
    result = verify_checkpoint(
        parse_note(note_bytes), log_key, policy=policy, expected_origin=log_key.name
    )
    out = {"ok": result.ok, "witnesses": result.witnesses, "size": result.size}
    out["error"] = result.error
    if result.ok:
        body = Path(body_path).read_bytes()
        leaf = body if extra is None else b"%d\n" % index + extra + b"\n" + body
        assert result.size is not None and result.root is not None
        if not verify_inclusion(leaf_hash(leaf), index, result.size, path, result.root):
            out["ok"], out["error"] = False, "inclusion proof does not verify"
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
