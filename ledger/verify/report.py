"""The verification report: one shape whether a receipt was verified from its
id in a ledger or from an exported bundle offline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ledger.evidence.keys import KeyInfo
from ledger.verify.envelope import Verified
from ledger.verify.facts import Fact, Registry, Requirements, establish

__all__ = ["LogState", "VerificationReport", "mismatches", "review_item"]


# Not dataclasses: offline verification starts without `dataclasses`.
class LogState:
    """Where the entry is in the log, and what its inclusion was proven against."""

    __slots__ = ("inclusion", "index", "origin", "size", "time", "time_from")

    def __init__(
        self,
        *,
        index: int,
        size: int,
        origin: str | None,
        inclusion: str,
        time: str | None = None,
    ) -> None:
        self.index = index
        self.size = size
        """Size of the tree the inclusion was proven against."""
        self.origin = origin
        self.inclusion = inclusion
        """What the inclusion was proven against, in words."""
        self.time = time
        """When the checkpoint existed by: its note's `timestamp` line, or the earliest
        cosignature of the witness quorum; None where neither says."""
        self.time_from: str | None = None if time is None else "checkpoint"

    def at(self, time: str, source: str) -> LogState:
        """This state with the checkpoint's time as `source` (`witnesses`) says it."""
        out = LogState(
            index=self.index,
            size=self.size,
            origin=self.origin,
            inclusion=self.inclusion,
            time=time,
        )
        out.time_from = source
        return out


class VerificationReport(NamedTuple):
    id: str
    kind: str
    signer: str
    """Key id of the signature that verified."""
    signer_name: str
    signer_role: str
    anchor: str
    """Which trusted key, or which ledger, the verification rests on."""
    log: LogState
    statement: dict[str, Any]
    reviews: list[dict[str, Any]]
    """Reviews logged up to the proven size, vouched for by the anchor.
    Each is proven to be in the log; that the list is complete is not."""
    unanchored_reviews: list[dict[str, Any]]
    """Reviews in a log no trusted key vouches for: shown, never counted."""
    registry: Registry | None = None
    """The key registry the verification was given (`ledger.verify.facts`)."""
    signer_seq: int | None = None
    """The log position of the signer's key entry."""
    facts: tuple[Fact, ...] = ()
    """Each fact established or not, with what the policy requires (`with_facts`)."""

    def with_facts(
        self,
        *,
        newest: int | None = None,
        witnesses: list[str] | None = None,
        witnessed_at: str | None = None,
        required: Requirements | None = None,
    ) -> VerificationReport:
        """This report with its facts stated against the newest checkpoint the verifier
        holds (`newest`: its size), the witnesses that cosigned, and the policy."""
        if self.registry is None:
            return self
        base = self
        if witnessed_at is not None:
            # The time a reviewer can trust is the witnesses' own, in their cosignatures.
            base = self._replace(log=self.log.at(witnessed_at, "witnesses"))
        facts = establish(
            signer={
                "keyid": self.signer,
                "name": self.signer_name,
                "role": self.signer_role,
                "registered_at": self.signer_seq,
            },
            entry=base.log.index,
            checkpoint=base.checkpoint(),
            registry=self.registry,
            newest=newest,
            witnesses=witnesses,
            required=required or Requirements(),
        )
        return base._replace(facts=facts)

    def checkpoint(self) -> dict[str, Any]:
        """The checkpoint the inclusion was proven against: size, origin, time and
        whose word the time is (`checkpoint`: its note's; `witnesses`: cosigned)."""
        return {
            "size": self.log.size,
            "origin": self.log.origin,
            "time": self.log.time,
            "time_from": self.log.time_from,
        }

    @property
    def passed(self) -> bool:
        """Every fact the policy requires is established."""
        return all(f.established for f in self.facts if f.required)

    def unestablished(self) -> list[str]:
        """What the policy requires and the verification could not establish, in words."""
        return [f.text for f in self.facts if f.required and not f.established]

    def steps(self) -> list[str]:
        """Each verification step that was performed, in words."""
        return [
            "payload read strictly: canonical RFC 8785 form, no duplicate keys, strict types",
            f"id {self.id[:19]} is the sha256 of the signed payload",
            "every DSSE signature verifies by a registered, unrevoked key",
            f"signer {self.signer_name} has role {self.signer_role}, which may sign a {self.kind}",
            f"log inclusion of entry {self.log.index}: {self.log.inclusion}",
            f"trust rests on {self.anchor}",
            f"{len(self.reviews)} review(s) verified the same way",
        ]

    def to_json(self) -> dict[str, Any]:
        p = self.statement.get("predicate", {})
        src = p.get("source") or {}
        doc = {
            "verified": self.passed,
            "id": self.id,
            "kind": self.kind,
            "subject": {
                "repo": src.get("repo"),
                "commit": src.get("commit"),
                "tree": src.get("tree"),
                "pr": src.get("pr"),
            },
            "claim": p.get("claim"),
            "outcome": p.get("outcome"),
            "scope": p.get("scope"),
            # The host's word on the sandbox the code ran in (its self-test), where the
            # receipt carries one: receipts of earlier releases do not.
            "sandbox": sandbox_line(p),
            "signer": {"keyid": self.signer, "name": self.signer_name, "role": self.signer_role},
            "anchor": self.anchor,
            "log": {
                "index": self.log.index,
                "size": self.log.size,
                "origin": self.log.origin,
                "inclusion": self.log.inclusion,
            },
            "checkpoint": self.checkpoint(),
            "reviews": self.reviews,
            "unanchored_reviews": self.unanchored_reviews,
            "steps": self.steps(),
        }
        if self.facts:
            # Added fields only: a reader of the earlier report finds every field it had.
            doc["facts"] = {f.name: f.to_json() for f in self.facts}
            doc["established"] = [f.text for f in self.facts if f.established]
            doc["not_established"] = [f.text for f in self.facts if not f.established]
            if not self.passed:
                doc["reason"] = "; ".join(self.unestablished())
        return doc


def sandbox_line(predicate: Mapping[str, Any]) -> str | None:
    """``bwrap, self-test 8 of 8 refused, ...`` (the sandbox's self-test, as the host
    signed it), ``none`` for an unsandboxed run, or None where the receipt says neither."""
    runner = predicate.get("runner") or {}
    env = runner.get("environment") or {} if isinstance(runner, dict) else {}
    said = env.get("sandbox_selftest") if isinstance(env, dict) else None
    if isinstance(said, str) and said:
        return said
    scope = predicate.get("scope") or {}
    return (
        "none (unsandboxed)" if isinstance(scope, dict) and scope.get("sandbox") == "none" else None
    )


def review_item(rv: Verified, keys: Mapping[str, KeyInfo]) -> dict[str, Any]:
    assert rv.kind == "review"
    p = rv.document["predicate"]
    info = keys.get(rv.signer)
    return {
        "id": rv.id,
        "verdict": p["verdict"],
        "note": p.get("note", ""),  # the model's default
        "reviewed": p["reviewed"],
        "signer": {"keyid": rv.signer, "name": info.name if info else None},
    }


def mismatches(doc: dict[str, Any], expect: dict[str, str]) -> list[str]:
    """Where a verified receipt differs from what the user expects (`--repo`,
    `--commit`, `--claim`, `--signer`), each in words; empty when it matches."""
    out = []
    subj = doc.get("subject") or {}
    if "repo" in expect:
        from ledger.identity.repoid import canonical_repo

        if canonical_repo(str(subj.get("repo") or "")) != canonical_repo(expect["repo"]):
            out.append(f"repo is {subj.get('repo')}, expected {canonical_repo(expect['repo'])}")
    commit = str(subj.get("commit") or "")
    if "commit" in expect and not (
        len(expect["commit"]) >= 7 and commit.startswith(expect["commit"].lower())
    ):
        out.append(f"commit is {commit[:12]}, expected {expect['commit']}")
    if "claim" in expect and doc.get("claim") != expect["claim"]:
        out.append(f"claim is {doc.get('claim')}, expected {expect['claim']}")
    if "signer" in expect:
        s = doc.get("signer") or {}
        want = expect["signer"]
        if want != s.get("name") and not (
            len(want) >= 12 and str(s.get("keyid", "")).startswith(want)
        ):
            out.append(f"signed by {s.get('name')} ({str(s.get('keyid'))[:12]}), expected {want}")
    return out
