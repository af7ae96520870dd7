"""A plan entry's body: which plan governs a revision of a repository, and the git
objects from the base commit to the plan's blob that prove it is the one committed
there. Logged on the ledger's host like key entries (the checkpoint signs the log)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import Error, RefusedError
from ledger.plans.objects import GitObject, object_id, raw_objects, walk
from ledger.qualification.plan import Plan, parse_plan

__all__ = [
    "PLAN_ROLE",
    "PlanEvidence",
    "RecordedPlan",
    "asserted",
    "collect",
    "plan_body",
    "read_plan_entry",
]


@dataclass(frozen=True, slots=True)
class PlanEvidence:
    """The governing plan as committed: the base commit whose tree holds it, its path,
    its blob id and the objects that prove the path."""

    base: str
    path: str
    blob: str
    objects: tuple[GitObject, ...]

    @property
    def asserted(self) -> bool:
        """Asserted by the ledger's operator (`ledger plan assert`): no commit proves it."""
        return not self.base

    @property
    def text(self) -> str:
        """Where it comes from, as an answer says it."""
        if self.asserted:
            return (
                f"{self.path} (blob {self.blob[:12]}) asserted by the ledger's operator, "
                "not proved by git objects"
            )
        return f"{self.path} committed at base {self.base[:12]} (blob {self.blob[:12]})"


def asserted(text: bytes, path: str) -> PlanEvidence:
    """A plan file's bytes as the operator asserts them (no commit to prove them by)."""
    return PlanEvidence("", path, object_id("blob", text), (("blob", text),))


def collect(repo: Any, base: str, path: str) -> PlanEvidence:
    """The evidence for the plan at `path` in commit `base` of `repo`."""
    objects = tuple(raw_objects(repo, base, path))
    blob, _ = walk(objects, base, path)
    return PlanEvidence(base, path, blob, objects)


PLAN_ROLE = "plans"
"""The token role whose holder may say which plan governs (`ledger.service.auth`):
the job that runs on the base branch after a merge, never a pull request's."""


def plan_body(
    repo: str,
    pr: int | None,
    commit: str,
    ev: PlanEvidence,
    recorded_by: str | None = None,
    *,
    branch: str | None = None,
    role: str | None = None,
) -> bytes:
    """The entry: `ev` governs `commit` (PR `pr`'s head, or a revision; with `branch`
    and no `pr`, the base branch's tip) of `repo`; `recorded_by`: the token holder who
    sent it to a server (absent on the ledger's host) and `role`, the role it was
    recorded under. Fields left out when absent, so an earlier entry keeps its id."""
    extra: dict[str, Any] = {} if recorded_by is None else {"recorded_by": recorded_by}
    if branch is not None:
        extra["branch"] = branch
    if role is not None:
        extra["recorded_as"] = role
    return canonical_bytes(
        {
            **extra,
            "kind": "plan",
            "repo": repo,
            "pr": pr,
            "commit": commit,
            "base": ev.base,
            "path": ev.path,
            "blob": ev.blob,
            "objects": [{"type": k, "data": base64.b64encode(b).decode()} for k, b in ev.objects],
        }
    )


@dataclass(frozen=True, slots=True)
class RecordedPlan:
    """A plan entry read back and proved: its objects recompute to `base` and `blob`."""

    seq: int
    entry_id: str
    repo: str
    pr: int | None
    commit: str
    evidence: PlanEvidence
    plan: Plan
    recorded_by: str | None = None
    """The token holder who recorded it through a server (the reader relies on them
    for which base governs; the objects still prove the plan is the one committed there)."""
    branch: str | None = None
    """The base branch whose plan it is (entries of earlier releases name none)."""
    recorded_as: str | None = None
    """The role the token holder recorded it under (`PLAN_ROLE`; earlier entries sent
    through a server were recorded under a runner token and name none)."""

    @property
    def authorised(self) -> bool:
        """Recorded on the ledger's host, or by a token holder with the plan role: a
        runner token (a pull request's job, running the pull request's code) never
        says which plan governs."""
        return self.recorded_by is None or self.recorded_as == PLAN_ROLE

    @property
    def key(self) -> str:
        """The commit the plan speaks for: the base commit that proves it, or (asserted)
        the commit it was asserted for. Two plans for one key are a conflict."""
        return self.evidence.base or self.commit

    @property
    def text(self) -> str:
        by = (
            f" by token holder {self.recorded_by} ({self.recorded_as or 'runner'} role)"
            if self.recorded_by
            else ""
        )
        on = f" for branch {self.branch}" if self.branch else ""
        return f"{self.evidence.text}{on}, recorded in the ledger{by} (entry {self.seq})"


def read_plan_entry(seq: int, entry_id: str, doc: Any) -> RecordedPlan:
    """A plan entry's body checked: its fields, its objects' ids and the path from the
    base commit to the blob. RefusedError with the first thing that does not hold."""
    if not isinstance(doc, dict) or doc.get("kind") != "plan":
        raise RefusedError("not a plan entry")
    repo, pr, commit = doc.get("repo"), doc.get("pr"), doc.get("commit")
    base, path, blob = doc.get("base"), doc.get("path"), doc.get("blob")
    if not all(isinstance(v, str) for v in (repo, commit, base, path, blob)) or not (
        pr is None or (isinstance(pr, int) and not isinstance(pr, bool))
    ):
        raise RefusedError("plan entry: repo, commit, base, path, blob or pr malformed")
    repo, commit, base, path, blob = str(repo), str(commit), str(base), str(path), str(blob)
    objects: list[GitObject] = []
    raw = doc.get("objects")
    if not isinstance(raw, list):
        raise RefusedError("plan entry: objects must be a list")
    for o in raw:
        try:
            kind, data = o["type"], base64.b64decode(o["data"], validate=True)
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise RefusedError("plan entry: an object is malformed") from None
        if kind not in ("commit", "tree", "blob"):
            raise RefusedError(f"plan entry: object type {kind!r}")
        objects.append((kind, data))
    if not base:
        # Asserted by the operator: the blob is the plan; nothing proves where it was committed.
        got = [b for k, b in objects if k == "blob" and object_id(k, b) == blob]
        if not got:
            raise RefusedError(f"plan entry: blob {blob[:12]} is not among its objects")
        proved, text = blob, got[0]
    else:
        proved, text = walk(objects, base, path)
    if proved != blob:
        raise RefusedError(f"plan entry: the path leads to blob {proved[:12]}, not {blob[:12]}")
    try:
        plan = parse_plan(text.decode("utf-8"), f"{path} at {base[:12]}")
    except (UnicodeDecodeError, Error) as e:
        why = e.reason() if isinstance(e, Error) else "not UTF-8"
        raise RefusedError(f"plan entry: the plan does not read: {why}") from None
    by, branch, role = doc.get("recorded_by"), doc.get("branch"), doc.get("recorded_as")
    if by is not None and not isinstance(by, str):
        raise RefusedError("plan entry: recorded_by must be a name")
    if branch is not None and (not isinstance(branch, str) or not branch):
        raise RefusedError("plan entry: branch must be a branch name")
    if role is not None and not isinstance(role, str):
        raise RefusedError("plan entry: recorded_as must be a role")
    ev = PlanEvidence(base, path, blob, tuple(objects))
    return RecordedPlan(seq, entry_id, repo, pr, commit, ev, plan, by, branch, role)
