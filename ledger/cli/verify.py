"""`ledger verify`: what the command does, without click.

The click command (`ledger.cli.read.verify`) and the fast start of the offline
case (`ledger.cli.fast`) both build a `VerifyRequest` and call `run_verify`,
so they print, fail and exit alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from ledger.cli._io import echo, emit_json, read_file
from ledger.evidence.errors import EXIT_NEGATIVE, Error, UsageError, VerificationError
from ledger.read.reader import SERVERS_WORD, open_reader

__all__ = ["SERVERS_WORD", "VerifyRequest", "run_verify"]


class VerifyRequest(NamedTuple):
    """The verify command's parameters, named as click names them."""

    target: str
    trust: tuple[Path, ...] = ()
    want_repo: str | None = None
    want_commit: str | None = None
    want_claim: str | None = None
    want_signer: str | None = None
    newer: Path | None = None
    server: str | None = None
    db: str | None = None
    as_json: bool = False
    policy: Path | None = None
    """A C2SP tlog-policy: the checkpoint must carry its witnesses' quorum."""
    fresh: bool = False
    """Require the key's and receipt's status as of the newest checkpoint held."""


def _policy_logs(policy: Path | None) -> list[Any]:
    """A policy's log keys, trust anchors as a --trust PEM of the ledger key is."""
    if policy is None:
        return []
    from ledger.transparency.policy import parse_policy

    return [log.vkey.public for log in parse_policy(read_file(policy)).logs]


def _witnessed_bundle(policy: Path | None, raw: bytes) -> str | None:
    """The bundle's checkpoint against the policy (after the bundle verified)."""
    if policy is None:
        return None
    from ledger.transparency.enforce import witnessed_bundle

    return witnessed_bundle(raw, read_file(policy))


def _quorum(policy: Path | None, raw: bytes) -> tuple[list[str] | None, str | None]:
    """The witnesses that cosigned the bundle's checkpoint (after the policy's quorum
    was checked) and the earliest time they did; (None, None) without a policy."""
    if policy is None:
        return None, None
    from ledger.evidence.limits import load_json
    from ledger.transparency.enforce import quorum_of

    doc = load_json(raw, "bundle")
    names, when = quorum_of(str(doc["checkpoint"]).encode(), read_file(policy))
    return names, when


def _newest(newer: Path | None) -> int | None:
    """The size of the newer checkpoint the verifier holds (consistency checked)."""
    if newer is None:
        return None
    from ledger._internal.checkpoint import parse_checkpoint
    from ledger._internal.witness import parse_newer

    return parse_checkpoint(parse_newer(read_file(newer)).note).size


def _refuse_test_result(target: str, raw: bytes) -> None:
    """A test-result export given for a bundle: said as what it is, with the receipt
    it stands for, where "not a bundle" alone left the reader guessing."""
    import json

    if b'"predicateType"' not in raw:
        return  # a bundle's statement is inside its envelope: no second parse of one
    try:
        doc = json.loads(raw)
    except ValueError:
        return  # the bundle verifier says what is wrong with it
    if not isinstance(doc, dict) or "predicateType" not in doc:
        return  # a bundle has none: verifying one loads no more than it did
    from ledger.read.standard import TEST_RESULT

    if doc["predicateType"] != TEST_RESULT:
        return
    config = (doc.get("predicate") or {}).get("configuration") or []
    digests = [
        c.get("digest", {}).get("sha256")
        for c in config
        if isinstance(c, dict) and str(c.get("name", "")).startswith("ledger receipt")
    ]
    rid = f"sha256:{digests[0]}" if digests and isinstance(digests[0], str) else None
    instead = (
        f"; verify receipt {rid} in its ledger (`ledger verify {rid}`), or offline its "
        f"bundle (`ledger export {rid} -o FILE`, then `ledger verify FILE --trust PEM`)"
        if rid
        else "; verify the receipt's bundle (`ledger export ID -o FILE`) instead"
    )
    raise VerificationError(
        f"{target}: a test-result Statement (`ledger export --format test-result`), not "
        f"a bundle: unsigned and without log proofs, it proves nothing by itself{instead}"
    )


def run_verify(req: VerifyRequest) -> None:
    """Verify, print the report (or one JSON document), and exit 1 through
    SystemExit when the receipt is not the one expected."""
    from ledger.read.render_verification import render_verification

    expect = _expected(req)
    try:
        doc, consistent, witnessed = _verification(req, expect)
    except Error as e:
        if not req.as_json:
            raise
        emit_json(
            {"verified": False, "target": req.target, "reason": e.reason(), "expected": expect}
        )
        raise SystemExit(e.exit_code) from None
    doc["expected"] = expect
    if req.as_json:
        emit_json(doc)
    else:
        echo(render_verification(doc), nl=False)
        if consistent is not None:
            echo(f"log: {consistent}")
        if witnessed is not None:
            echo(f"witnesses: {witnessed}")
    if doc.get("trust") == "server":
        echo(f"ledger: this answer rests on {SERVERS_WORD}", err=True)
    if not doc["verified"]:
        what = "not the receipt expected" if doc.get("mismatches") else "not verified"
        echo(f"ledger: {what}: {doc['reason']}", err=True)
        raise SystemExit(EXIT_NEGATIVE)


def _expected(req: VerifyRequest) -> dict[str, str]:
    """What the receipt must say (--repo, --commit, --claim, --signer given)."""
    return {
        k: v
        for k, v in (
            ("repo", req.want_repo),
            ("commit", req.want_commit),
            ("claim", req.want_claim),
            ("signer", req.want_signer),
        )
        if v
    }


def _verification(
    req: VerifyRequest, expect: dict[str, str]
) -> tuple[dict[str, Any], str | None, str | None]:
    """The verification's document of a bundle FILE or an id, held against what is
    expected; the log's consistency with --checkpoint and the witnesses, if any."""
    from ledger.verify.report import mismatches

    target, trust, newer, server = req.target, req.trust, req.newer, req.server
    path = Path(target)
    looks_like_file = path.suffix == ".json" or "/" in target or path.exists()
    consistent: str | None = None
    witnessed: str | None = None
    report = None
    asked: dict[str, Any] = {}
    artifacts_checked: list[str] = []
    if looks_like_file and not path.is_file():
        raise UsageError(f"{target}: no such file")
    if path.is_file():
        # Offline: the store-free verifier only, so no database code is loaded.
        from ledger.evidence.keys import load_public_pem
        from ledger.verify import verify_bundle

        anchors = [load_public_pem(read_file(Path(t)), str(t)) for t in trust]
        anchors += _policy_logs(req.policy)
        raw = read_file(path)
        _refuse_test_result(target, raw)
        report = verify_bundle(raw, anchors)
        witnessed = _witnessed_bundle(req.policy, raw)
        from ledger.write.artifacts import check_bundle_artifacts

        # Artifacts an `export --artifacts` put inside, against what the receipt names.
        artifacts_checked = check_bundle_artifacts(raw, report.statement)
        if newer is not None:
            from ledger._internal.witness import check_bundle_against

            consistent = check_bundle_against(raw, read_file(newer), anchors)
        from ledger.verify.facts import Requirements

        # Each fact against the newest checkpoint held and what the policy requires.
        names, cosigned_at = _quorum(req.policy, raw)
        report = report.with_facts(
            newest=_newest(newer),
            witnesses=names,
            witnessed_at=cosigned_at,
            required=Requirements(witnesses=req.policy is not None, fresh=req.fresh),
        )
    elif newer is not None:
        raise UsageError("--checkpoint applies to a bundle FILE")
    else:
        # An id: the ledger here verifies it, or the server's bundle is verified
        # here against --trust, or the answer is the server's word and says so.
        from ledger.evidence.keys import load_public_pem

        anchors = [load_public_pem(read_file(Path(t)), str(t)) for t in trust]
        policy = read_file(req.policy) if req.policy is not None else None
        asked = open_reader(req.db, server).verification(target, anchors, policy)
        witnessed = asked.pop("witnesses", None)
    doc = report.to_json() if report is not None else asked
    if artifacts_checked:
        doc["artifacts"] = artifacts_checked
    if consistent is not None:
        doc["log_consistency"] = consistent
    if witnessed is not None:
        doc["witnesses"] = witnessed
    wrong = mismatches(doc, expect)
    if wrong:
        # What could not be established (if anything) stays said first.
        unproven = [] if doc.get("verified", True) else [str(doc.get("reason"))]
        doc["verified"] = False
        doc["mismatches"] = wrong
        doc["reason"] = "; ".join([*unproven, *wrong])
    return doc, consistent, witnessed
