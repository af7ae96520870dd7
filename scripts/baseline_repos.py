"""Two example repositories whose PR 1 fails admission on a GPU, for the baseline's
evidence (scripts/device_baseline.sh): in ``introduced`` the PR's head plants the
defect (the base passes), in ``base-too`` the base already has it (the PR changes
only its README). The defect: each block's forward holds a 1 GiB scratch buffer
that the estimator never predicts, so on a GPU the measured peak exceeds the
prediction (on a CPU the untouched pages cost nothing: admission passes there).

    python3 scripts/baseline_repos.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import git

from scripts.example_repo import AUTHOR, MAIN, PR_REF, make_example_repo

_FORWARD = (
    "    def forward(self, x: Tensor, batch: int, seq: int) -> Tensor:\n"
    "        return self._moe(self._attention(x, batch, seq))\n"
)
_DEFECT = (
    "    def forward(self, x: Tensor, batch: int, seq: int) -> Tensor:\n"
    "        scratch = torch.empty(1 << 30, dtype=torch.uint8, device=x.device)\n"
    "        out = self._moe(self._attention(x, batch, seq))\n"
    "        del scratch\n"
    "        return out\n"
)


def _commit(repo: git.Repo, paths: list[str], message: str) -> str:
    repo.index.add(paths)
    return str(repo.index.commit(message, author=AUTHOR, committer=AUTHOR).hexsha)


def _plant(root: Path) -> None:
    wl = root / "model" / "workload.py"
    text = wl.read_text()
    if text.count(_FORWARD) != 1:
        raise SystemExit("model/workload.py no longer has the block forward to plant into")
    wl.write_text(text.replace(_FORWARD, _DEFECT))


def introduced(root: Path) -> None:
    """main as made; the PR's head adds the defect on top of its own commit."""
    ex = make_example_repo(root, with_remote=False)
    repo = git.Repo(root)
    repo.git.checkout(ex.pr_head)
    _plant(root)
    head = _commit(repo, ["model/workload.py"], "Scratch buffer in each block's forward\n")
    repo.git.update_ref(PR_REF, head)
    repo.git.checkout(MAIN)


def base_too(root: Path) -> None:
    """The defect on main; the PR, branched from it, changes only its README."""
    make_example_repo(root, with_remote=False)
    repo = git.Repo(root)
    repo.git.checkout(MAIN)
    _plant(root)
    base = _commit(repo, ["model/workload.py"], "Scratch buffer in each block's forward\n")
    repo.git.checkout("-b", "readme", base)
    (root / "README.md").write_text((root / "README.md").read_text() + "\nA note.\n")
    head = _commit(repo, ["README.md"], "README: a note\n")
    repo.git.update_ref(PR_REF, head)
    repo.git.checkout(MAIN)


def main() -> int:
    out = Path(sys.argv[1])
    introduced(out / "introduced")
    base_too(out / "base-too")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
