"""Source identity read from a real git repository: commit, tree, parents,
merge-base, PR head, dirty flag, package identity.

Identity is handed the plan that says what a package is (`revision_of`); it
never loads one: finding and reading the governing plan is
`ledger.plans.governing`'s, which builds a revision's whole identity
(`identify`) for a new statement and for a status question alike.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import git

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import UsageError
from ledger.evidence.models import PackageIdentity
from ledger.identity.repoid import canonical_repo
from ledger.identity.revision import Revision

__all__ = [
    "PlanShape",
    "base_commit",
    "base_tip",
    "default_branch",
    "fetch_refs",
    "glob_regex",
    "head_commit",
    "open_repo",
    "package_identity",
    "repo_name",
    "revision_of",
    "root_id",
]


class PackageShape(Protocol):
    """What a plan's `[package]` says (`ledger.qualification.plan.PackageSpec`)."""

    @property
    def paths(self) -> Sequence[str]: ...
    @property
    def lock(self) -> Sequence[str]: ...
    @property
    def distributions(self) -> Sequence[str]: ...


class ProjectShape(Protocol):
    """What a plan's `[project]` says (`ledger.qualification.plan.ProjectSpec`)."""

    @property
    def repo(self) -> str: ...


class PlanShape(Protocol):
    """What identity reads of the plan it is handed (`ledger.qualification.plan.Plan`):
    what the package is, and the repository id a checkout without a remote goes by."""

    @property
    def package(self) -> PackageShape | None: ...
    @property
    def project(self) -> ProjectShape | None: ...


PR_REFS = ("refs/pull/{n}/head", "refs/merge-requests/{n}/head")


def open_repo(path: str | Path | None) -> git.Repo:
    where = Path(path or ".").resolve()
    try:
        return git.Repo(where, search_parent_directories=path is None)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(f"{where} is not a git repository") from None


def _remote(repo: git.Repo) -> git.Remote | None:
    """The remote that speaks for the repository: origin, else the only/first one."""
    remotes = list(repo.remotes)
    return next((r for r in remotes if r.name == "origin"), remotes[0] if remotes else None)


FETCH_TIMEOUT_S = 120
"""A fetch that has not finished by then is stopped: a hung remote fails the
question instead of holding it forever."""


def repo_name(repo: git.Repo, plan: PlanShape | None = None) -> str:
    """The repository's canonical id (see `ledger.identity.repoid`): its remote's URL
    normalised, else the plan's `[project] repo`, else its root commit. Never
    the folder name: two unrelated checkouts called `repo` are not one
    repository, and one repository cloned into two folders is."""
    remote = _remote(repo)
    if remote is not None:
        return canonical_repo(remote.url, Path(repo.working_tree_dir or repo.git_dir))
    if plan is not None and plan.project is not None:
        return plan.project.repo
    return root_id(repo)


def root_id(repo: git.Repo) -> str:
    """`root-commit/<sha>`: the id of a repository without a remote (its first
    root commit, the same in every clone; several roots: the smallest)."""
    try:
        roots = str(repo.git.rev_list("--max-parents=0", "HEAD")).split()
    except git.GitCommandError:
        raise UsageError("the repository has no commit to identify it by") from None
    return f"root-commit/{min(roots)}"


def fetch_refs(
    repo: git.Repo,
    remote: git.Remote,
    refspecs: Sequence[str],
    *,
    timeout_s: int | None = None,
) -> str | None:
    """Fetch refspecs; None when done, else git's one-line reason. Without
    ``timeout_s``, `FETCH_TIMEOUT_S` as it reads at the call (not at import)."""
    if timeout_s is None:
        timeout_s = FETCH_TIMEOUT_S
    try:
        # `--` ends the options: a remote *named* `--upload-pack=CMD` is a name,
        # never an option that runs a command.
        repo.git.fetch(
            "--no-tags",
            "--quiet",
            "--",
            remote.name,
            *refspecs,
            kill_after_timeout=timeout_s,
        )
    except git.GitCommandError as e:
        lines = [x.strip() for x in str(e.stderr or e).splitlines() if x.strip()]
        return (lines[0] if lines else str(e)).removeprefix("stderr: ").strip("'")
    return None


def _pr_commit(repo: git.Repo, pr: int, offline: bool) -> tuple[git.Commit, str]:
    """The PR's head and how it was read. Asked of the remote every time:
    a force-push there must never go unseen behind a stale local ref."""
    remote = _remote(repo)
    if remote is None or offline:
        why = "--offline: not fetched" if remote is not None else "no remote"
        for pattern in PR_REFS:
            ref = pattern.format(n=pr)
            try:
                return repo.commit(ref), f"judged the local ref {ref} ({why})"
            except (git.BadName, ValueError):
                pass
        raise UsageError(f"unknown PR {pr}: no refs/pull/{pr}/head locally ({why})")
    reasons = []
    for pattern in PR_REFS:
        ref = pattern.format(n=pr)
        problem = fetch_refs(repo, remote, [f"+{ref}:{ref}"])
        if problem is None:
            return repo.commit(ref), f"fetched {ref} from {remote.name} just now"
        reasons.append(problem)
    if all("couldn't find remote ref" in r for r in reasons):
        raise UsageError(f"unknown PR {pr}: {remote.name} has no refs/pull/{pr}/head")
    raise UsageError(f"fetching PR {pr} from {remote.name} failed: {reasons[0]}")


def _default_branch(repo: git.Repo) -> str:
    remote = _remote(repo)
    if remote is not None:
        try:
            head = repo.git.symbolic_ref(f"refs/remotes/{remote.name}/HEAD")
            return str(head).removeprefix(f"refs/remotes/{remote.name}/")
        except git.GitCommandError:
            pass
    return "main"


def default_branch(repo: git.Repo) -> str:
    """The branch whose plan governs a PR when none is named (`identify`'s default)."""
    return _default_branch(repo)


def base_tip(repo: git.Repo, branch: str, offline: bool) -> git.Commit:
    """The base branch's commit: the remote's (fetched unless offline), else local."""
    remote = _remote(repo)
    names = [f"refs/heads/{branch}"]
    if remote is not None:
        tracking = f"refs/remotes/{remote.name}/{branch}"
        if not offline:
            problem = fetch_refs(repo, remote, [f"+refs/heads/{branch}:{tracking}"])
            if problem is not None and "couldn't find remote ref" not in problem:
                raise UsageError(f"fetching base branch {branch} failed: {problem}")
        names.insert(0, tracking)
    for name in names:
        try:
            return repo.commit(name)
        except (git.BadName, ValueError):
            continue
    raise UsageError(f"base branch {branch!r} not found (pass --base BRANCH)")


def base_commit(repo: git.Repo, base: str | None, offline: bool) -> str:
    """The base branch's commit whose plan governs a PR (`identify`'s choice)."""
    return base_tip(repo, base or _default_branch(repo), offline).hexsha


def _base(repo: git.Repo, commit: git.Commit, branch: str | None) -> str | None:
    """The merge-base of ``commit`` with the base branch: ``branch`` where the run names
    one (`--base`), else the remote's default branch (then main, then master). A
    named branch that cannot be found has no merge-base here: never another branch's,
    which would lay a failure at the wrong commit's door."""
    remote = _remote(repo)
    wanted = [branch] if branch else list(dict.fromkeys([_default_branch(repo), "main", "master"]))
    names = []
    for b in wanted:
        if remote is not None:
            names.append(f"refs/remotes/{remote.name}/{b}")
        names.append(f"refs/heads/{b}")
    for name in names:
        try:
            other = repo.commit(name)
        except (git.BadName, ValueError):
            continue
        bases = repo.merge_base(commit, other)
        if bases and isinstance(bases[0], git.Commit):
            return bases[0].hexsha
    return None


def head_commit(
    repo: git.Repo, rev: str | None, pr: int | None, offline: bool
) -> tuple[git.Commit, str]:
    """The commit --rev REV or --pr N (its current head) names, and a note saying which."""
    if (rev is None) == (pr is None):
        raise UsageError("give exactly one of --rev or --pr")
    if pr is not None:
        return _pr_commit(repo, pr, offline)
    try:
        c = repo.commit(rev)
    except (git.BadName, ValueError, KeyError):
        # KeyError: a `REV:path` naming no blob (e.g. HEAD:../../etc/passwd).
        raise UsageError(f"unknown revision {rev!r}") from None
    return c, f"commit {c.hexsha[:12]} ({rev})"


def revision_of(
    repo: git.Repo,
    commit: git.Commit,
    plan: PlanShape | None,
    *,
    pr: int | None = None,
    for_statement: bool = False,
    base_branch: str | None = None,
    definition: str | None = None,
) -> Revision:
    """The identity of `commit` under the plan it is handed (None: no plan), which the
    caller loaded (`ledger.plans.governing.identify`): the package identity is the one
    that plan defines, the repository id its `[project] repo` where no remote names
    it. `for_statement` adds what only a new statement needs (merge-base with
    ``base_branch``, else the default branch; dirty flag): each costs a git process,
    and queries never use them. `definition`: the digest of the workload definition
    the caller resolved for it (`ledger.qualification.workload_source`), a part of the
    package identity where the plan defines a package."""
    spec = plan.package if plan is not None else None
    paths = tuple(spec.paths) if spec is not None else ()
    package = (
        package_identity(
            commit, paths, lock=spec.lock, distributions=spec.distributions, workload=definition
        )
        if paths and spec is not None
        else None
    )
    parts = (package.parts or {}) if package else {}
    # The dirty flag speaks of the work tree, so it only applies when the work
    # tree is the revision being attested.
    dirty = False
    at_head = not repo.bare and repo.head.is_valid() and repo.head.commit.hexsha == commit.hexsha
    if for_statement and at_head:
        dirty = repo.is_dirty(index=True, working_tree=True, untracked_files=True)
    return Revision(
        repo=repo_name(repo, plan),
        commit=commit.hexsha,
        tree=commit.tree.hexsha,
        package_digest=package.digest if package else None,
        pr=pr,
        package_paths=paths,
        package_parts=tuple(sorted(parts.items())),
        prior_package_digest=_prior(parts),
        parents=tuple(p.hexsha for p in commit.parents),
        base=_base(repo, commit, base_branch) if for_statement else None,
        dirty=dirty,
    )


def _prior(parts: dict[str, str]) -> str | None:
    """The digest receipts recorded before the workload definition joined the package
    identity name, where it has joined (None: the digest is that one already)."""
    from ledger.identity.environment_identity import WORKLOAD_PART, prior_digest

    return prior_digest(parts) if WORKLOAD_PART in parts else None


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Git-style glob: `**/` spans zero or more folders, `*` and `?` stay in one."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _matches(path: str, globs: Sequence[str]) -> bool:
    return any(glob_regex(g).match(path) for g in globs)


def _digest(pairs: Iterable[tuple[str, str]]) -> str:
    return hashlib.sha256(canonical_bytes(sorted([p, b] for p, b in pairs))).hexdigest()


def package_identity(
    commit: git.Commit,
    globs: Sequence[str],
    *,
    lock: Sequence[str] = (),
    distributions: Sequence[str] = (),
    workload: str | None = None,
) -> PackageIdentity:
    """sha256 over the sorted (path, git blob id) of the files the globs select; with
    lock files or distributions, over those parts too (`ledger.identity.environment_identity`);
    with `workload` (the digest of the workload definition the plan resolves to: where
    a ready adapter interprets the plan's parameters, they are the code under test), over
    that part too. Without lock files, distributions or a workload definition the digest
    is the files' alone, as it always was."""
    pairs = [
        (str(item.path), item.hexsha)
        for item in commit.tree.traverse()
        if isinstance(item, git.Blob) and _matches(str(item.path), globs)
    ]
    files = _digest(pairs)
    if not lock and not distributions and workload is None:
        return PackageIdentity(paths=list(globs), digest=files)
    from ledger.identity.environment_identity import WORKLOAD_PART, identity_parts, parts_digest

    parts = {"files": files, **identity_parts(commit, lock, distributions)}
    if workload is not None:
        parts[WORKLOAD_PART] = workload
    return PackageIdentity(paths=list(globs), digest=parts_digest(parts), parts=parts)
