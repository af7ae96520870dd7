"""The client checks the server: `status --server URL` with `--trust` or `--policy`.

A server's status answer is not believed. The client holds the log up to the newest
checkpoint the ledger key signed (and, with a policy, its witnesses cosigned), synced
from the last checkpoint it saw (`read/log_cache.py`, over the monitor's reading of a
served log, `monitor/remote.py`), gathers the question's evidence from those entries as
the server gathers it from its store, and has the one judge (`qualification/judge.py`)
decide. The server's answer is refused, with a one-line reason (`VerificationError`,
exit 1), where a claim's state, the receipts it rests on or the rules it cites differ
from that decision, where a blocker's label does, where it leaves out a counterexample
the entries hold, or where its checkpoint is not an extension of the last one seen
here (a forked log); an entry whose signature does not verify is refused by the sync.

What the entries do not decide is taken from the answer and said to be the server's
word: the GPUs its fleet quarantines (a claim whose state it puts down to a quarantined
GPU, only where the plan asks for the quarantine), what its fleet counts on a device
(a blocker's device-only label), the notes it adds beyond the asker's own (receipts
under another repository id), and the key registry as of its store (the entries here
give it as of the checkpoint).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.evidence.errors import VerificationError
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision
from ledger.monitor.remote import checked_note
from ledger.qualification.evidence import ReceiptEvidence, ReviewEvidence, short_id
from ledger.qualification.judge import Gathered, judge
from ledger.qualification.report import StatusReport
from ledger.qualification.rules import QUARANTINE
from ledger.read.evidence import gathered, selection
from ledger.read.log_cache import LogCache
from ledger.read.open_copies import borrow, give_back
from ledger.read.query import proved
from ledger.read.question import Question

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ledger.evidence.entry import LoggedEntry
    from ledger.evidence.keys import KeyInfo
    from ledger.plans.governing import Identity
    from ledger.transparency.policy import Policy

__all__ = ["SERVERS_WORD", "Checked", "check_status", "differs"]

SERVERS_WORD = "the server's word, not recomputed here"


@dataclass(frozen=True, slots=True)
class Checked:
    """How an answer was checked: against which checkpoint, what the sync cost, and
    what is the server's word."""

    origin: str
    size: int
    root: str
    fetched: int
    witnessed: bool
    servers_word: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "checkpoint": {"size": self.size, "root": self.root},
            "fetched": self.fetched,
            "witnessed": self.witnessed,
            "servers_word": list(self.servers_word),
        }

    def lines(self) -> list[str]:
        """What a person reads of it, beside the answer's other notes."""
        by = "the ledger key and its witnesses" if self.witnessed else "the ledger key"
        out = [
            f"checked here: recomputed from the log up to checkpoint {self.size} "
            f"(signed by {by}; {self.fetched} new entries fetched)"
        ]
        return out + [f"{w}: {SERVERS_WORD}" for w in self.servers_word]


def check_status(
    url: str,
    ident: Identity,
    claims: Sequence[str],
    scope: Mapping[str, str | int],
    ask: Callable[[], dict[str, Any]],
    trust: Sequence[Ed25519PublicKey],
    policy: Policy | None,
    where: Path | None = None,
) -> dict[str, Any]:
    """The server's answer to the question (`ident`, `claims`, `scope`), once the log up
    to its checkpoint decides the same; with `checked` (how) and its lines added to
    `judged`. `VerificationError` otherwise.

    A warm check (a copy of the server's log held here) is one round trip, as believing
    the answer is: the server sends its newest checkpoint and the entries since the last
    one seen with the answer (`?since=N`), and this host then checks and writes them and
    has the judge decide. Asked of a server of an earlier release, or with no copy held,
    the answer is `ask()`, asked while a worker syncs the log and the judge decides."""
    hint = LogCache.remembered(url, where)
    cache = borrow(hint, where) if hint is not None else None
    held = cache.held() if cache is not None else None
    if cache is None or held is None or hint is None:
        if cache is not None:
            give_back(cache)
        cp, answer, fetched, report = _overlapped(
            url, ident, claims, scope, ask, trust, policy, where
        )
    else:
        try:
            answer, log = _with_log(url, Question.of(ident, claims, scope), held.size)
            cp = None if log is None else checked_note(log[0], list(trust), policy)
        except BaseException:
            give_back(cache)
            raise
        if log is None or cp is None:  # a server of an earlier release
            give_back(cache)
            cp, _, fetched, report = _overlapped(
                url, ident, claims, scope, lambda: answer, trust, policy, where
            )
        elif cp.origin != hint:  # another log than the one held under this name
            give_back(cache)
            fetched, report = _decided(url, cp, None, None, where, ident, claims, scope)
        else:
            fetched, report = _decided(url, cp, cache, log[1], where, ident, claims, scope)
    said = _servers_word(ident, answer, report)
    quarantine = ident.plan is not None and ident.plan.quarantine_above is not None
    why = differs(report, answer, quarantine=quarantine)
    if why is not None:
        raise VerificationError(
            f"the server's status answer is refused: {why} (recomputed from its log up to "
            f"checkpoint {cp.size})"
        )
    checked = Checked(cp.origin, cp.size, cp.root.hex(), fetched, policy is not None, tuple(said))
    out = dict(answer)
    out["checked"] = checked.to_json()
    out["judged"] = [*answer.get("judged", []), *checked.lines()]
    return out


def _with_log(
    url: str, question: Question, since: int
) -> tuple[dict[str, Any], tuple[bytes, list[LoggedEntry]] | None]:
    """The server's answer, and the log it sent with it (its newest checkpoint note and
    the entries from `since` up to it); None for the log where the server sent none (an
    earlier release)."""
    from ledger.monitor.remote import entries_from
    from ledger.remote.client import fetch_status

    doc = fetch_status(url, question.to_json(), since=since)
    log = doc.pop("log", None)
    note = log.get("checkpoint") if isinstance(log, dict) else None
    if not isinstance(log, dict) or not isinstance(note, str):
        return doc, None
    return doc, (note.encode(), entries_from(log.get("entries"), since))


def _overlapped(
    url: str,
    ident: Identity,
    claims: Sequence[str],
    scope: Mapping[str, str | int],
    ask: Callable[[], dict[str, Any]],
    trust: Sequence[Ed25519PublicKey],
    policy: Policy | None,
    where: Path | None,
) -> tuple[Any, dict[str, Any], int, StatusReport]:
    """The checkpoint asked apart, the log synced and the judge's decision on a worker,
    while this thread asks the answer (`ask`) once the checkpoint holds."""
    from concurrent.futures import ThreadPoolExecutor

    from ledger.monitor.remote import verified_checkpoint

    with ThreadPoolExecutor(1) as pool:
        # Started now, while the checkpoint is fetched: starting a thread waits for the
        # scheduler, a cost of its own on a loaded host.
        pool.submit(lambda: None)
        cp = verified_checkpoint(url, list(trust), policy)
        decided = pool.submit(_decided, url, cp, None, None, where, ident, claims, scope)
        try:
            answer = ask()
        finally:
            fetched, report = decided.result()
    return cp, answer, fetched, report


def _decided(
    url: str,
    cp: Any,
    cache: LogCache | None,
    early: list[LoggedEntry] | None,
    where: Path | None,
    ident: Identity,
    claims: Sequence[str],
    scope: Mapping[str, str | int],
) -> tuple[int, StatusReport]:
    """The log brought up to `cp` and the judge's decision on it; with how many entries
    were fetched."""
    synced, fetched = _synced(url, cp, cache, early, where)
    try:
        return fetched, recompute(synced, ident, claims, scope)
    finally:
        give_back(synced)


def _synced(
    url: str,
    cp: Any,
    cache: LogCache | None,
    early: list[LoggedEntry] | None,
    where: Path | None,
) -> tuple[LogCache, int]:
    """The log held here (`cache`, else the copy of the log the checkpoint names),
    brought up to the checkpoint, `early` (the entries since the last one seen, where
    they came with it) taken first; with how many entries were fetched."""
    from ledger.monitor.remote import fetch_entries

    if cache is None:
        cache, early = borrow(cp.origin, where), None
    held = cache.held()

    def fetch(start: int, end: int) -> list[LoggedEntry]:
        got: list[LoggedEntry] = []
        if early is not None and held is not None and start == held.size:
            got = [e for e in early if e.seq < end]
        if start + len(got) < end:
            got += fetch_entries(url, start + len(got), end)
        return got

    try:
        fetched = cache.sync(cp.size, cp.root, fetch)
    except BaseException:
        give_back(cache)
        raise
    LogCache.remember(url, cp.origin, where)
    return cache, fetched


def recompute(
    cache: LogCache,
    ident: Identity,
    claims: Sequence[str],
    scope: Mapping[str, str | int],
) -> StatusReport:
    """The answer the one judge gives on the log held here, gathered as the server
    gathers it from its store (`read/query.py` `gather`)."""
    import dataclasses

    repo = _current(cache, canonical_repo(ident.revision.repo))
    ident = dataclasses.replace(ident, revision=dataclasses.replace(ident.revision, repo=repo))
    keys = cache.keys()
    receipts, reviews, unreadable = _evidence(cache, keys, ident.revision, None)

    def base(commits: Sequence[str], blocking: Sequence[str]) -> list[ReceiptEvidence]:
        out: list[ReceiptEvidence] = []
        for commit in commits:
            at = Revision(repo=repo, commit=commit, tree="")
            out += _evidence(cache, keys, at, list(blocking))[0]
        return out

    return judge(
        Gathered(
            plan=ident.plan,
            revision=proved(ident, receipts),
            receipts=receipts,
            reviews=reviews,
            claims=list(claims) if claims else None,
            scope=dict(scope),
            notes=ident.notes,
            problems=ident.problems,
            unreadable=tuple(unreadable),
            base=base,
        )
    )


def _current(cache: LogCache, repo: str) -> str:
    """The id `repo`'s receipts count under now, through the log's alias entries (as
    the server's `_current` follows them in its store)."""
    links = dict(cache.links())
    seen = {repo}
    while repo in links and links[repo] not in seen:
        repo = links[repo]
        seen.add(repo)
    return repo


def _evidence(
    cache: LogCache,
    keys: Mapping[str, KeyInfo],
    revision: Revision,
    claims: Sequence[str] | None,
) -> tuple[list[ReceiptEvidence], list[ReviewEvidence], list[str]]:
    """As `read/evidence.py` `read_evidence` reads it from a store: the same selection
    of the log's entries and the same gathering."""
    entries = cache.receipts(
        [revision.repo, *cache.aliases_of(revision.repo)], **selection(revision, claims)
    )
    ev = gathered(entries, keys, cache.reviews, cache.revocations)
    return ev.receipts, ev.reviews, ev.unreadable


def _servers_word(ident: Identity, answer: Mapping[str, Any], report: StatusReport) -> list[str]:
    out = []
    added = [n for n in answer.get("judged") or [] if n not in report.notes]
    if added:
        # How the server identified the subject and its plan, and receipts it holds under
        # another repository id: its own reading of its store, not recomputed here.
        out.append(f"the notes it adds ({len(added)})")
    if ident.plan is not None and ident.plan.quarantine_above is not None:
        out.append("the GPUs the fleet quarantines")
    if any(
        isinstance(b, Mapping) and (b.get("attribution") or {}).get("label") == "device-only"
        for b in (answer.get("verdict") or {}).get("blockers") or []
    ):
        out.append("what the fleet counts on a device")
    out.append("the key registry as of the server's store (the log's is as of the checkpoint)")
    return out


def _row_key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        str(row.get("claim")),
        str(row.get("scope_role")),
        json.dumps(row.get("scope") or {}, sort_keys=True),
    )


def differs(
    report: StatusReport, answer: Mapping[str, Any], *, quarantine: bool = False
) -> str | None:
    """Where the server's answer departs from the judge's on the log, in one line;
    None where it does not. `quarantine`: the plan asks for the fleet's quarantine, so
    a row the server puts down to it is its word (without it, such a reason is one
    more difference)."""
    mine = {_row_key(r.to_json()): r.to_json() for r in report.claims}
    rows = answer.get("claims")
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        return "it carries no claims list"
    theirs = {_row_key(r): r for r in rows}
    failed = {r.id for r in report.evidence if r.predicate.outcome == "failed"}
    for key, row in mine.items():
        claim, role = key[0], key[1]
        other = theirs.get(key)
        if other is None:
            return f"it leaves out claim {claim} at its {role} scope"
        named = set(other.get("receipts") or [])
        dropped = [
            r
            for r in row["receipts"]
            if r in failed
            and r not in named
            and not (quarantine and _quarantined(other, short_id(r)))
        ]
        if dropped:
            return f"it leaves out counterexample {short_id(dropped[0])} of claim {claim}"
        if quarantine and _quarantined(other):
            continue  # its state rests on the fleet's quarantine: the server's word
        if other.get("state") != row["state"]:
            return (
                f"claim {claim} ({role} scope) is {other.get('state')} in it, "
                f"{row['state']} on the log"
            )
        if named != set(row["receipts"]):
            return f"claim {claim} ({role} scope) rests on other receipts than the log's"
        if _rules(other) != _rules(row):
            return (
                f"claim {claim} ({role} scope) gives other rules in it "
                f"({', '.join(_rules(other)) or 'none'}) than on the log ({', '.join(_rules(row))})"
            )
    extra = sorted(set(theirs) - set(mine))
    if extra:
        return f"it names claim {extra[0][0]} at a {extra[0][1]} scope the log does not bear"
    if quarantine and any(_quarantined(r) for r in rows):
        return None
    labels = {a.claim: a.label for a in report.baselines}
    for b in (answer.get("verdict") or {}).get("blockers") or []:
        label = (b.get("attribution") or {}).get("label") if isinstance(b, Mapping) else None
        # A device-only label rests on what the fleet counts: the server's word.
        if label is not None and label != "device-only" and label != labels.get(b.get("claim")):
            return (
                f"blocker {b.get('claim')} is labelled {label} in it, "
                f"{labels.get(b.get('claim')) or 'unlabelled'} on the log"
            )
    if bool(answer.get("qualified")) != report.qualified:
        return f"it says qualified={bool(answer.get('qualified'))}, the log {report.qualified}"
    code = (answer.get("verdict") or {}).get("exit_code")
    want = report.verdict.exit_code if report.verdict is not None else None
    if code is not None and code != want:
        return f"its exit code is {code}, the log's {want}"
    return None


def _rules(row: Mapping[str, Any]) -> list[str]:
    """The rules a row's reasons cite (`rule: text`; the texts may name times)."""
    return sorted({str(x).split(":", 1)[0] for x in row.get("reasons") or []})


def _quarantined(row: Mapping[str, Any], receipt: str = "") -> bool:
    """Whether the server puts the row's state (or, given its short id, one receipt's
    leaving it) down to a GPU its fleet quarantines."""
    return any(
        str(r).startswith(f"{QUARANTINE}:") and receipt in str(r) for r in row.get("reasons") or []
    )
