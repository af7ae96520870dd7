"""The documentation's commands are the CLI's: every `ledger ...` line in a code
block of README.md and docs/*.md, and in the CI scripts the docs point to
(scripts/ci/, action.yml), names a command that exists, with flags that command
takes (as `--help` lists them); and the README's list of commands that take
`--server` is the CLI's own. The CI snippets themselves are run by
tests/ledger/cli/test_ci_recipes.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from ledger.cli import cli
from tests.ledger.ci_snippets import DOCS, FENCE, ROOT

SCRIPTS = [*sorted((ROOT / "scripts" / "ci").glob("*.sh")), ROOT / "action.yml"]
_CALL = re.compile(
    r"(?:^\s*(?:\$\s*|-\s+)?|(?:&&|\|\||[|;(`]|run:|script:|args:|sh -c)\s*['\"]?)"
    r"ledger((?:\s+[^\s;&|)`'\"]+)+)"
)


def _lines(text: str, blocks: bool = True) -> list[str]:
    """Logical lines of the code blocks, or of a whole script (backslash continuations
    joined)."""
    out: list[str] = []
    for _, block in FENCE.findall(text) if blocks else [("", text)]:
        out += re.sub(r"\\\n\s*", " ", block).splitlines()
    return out


def _command(words: list[str]) -> tuple[click.Command, list[str], str] | None:
    cmd: click.Command = cli
    path = ["ledger"]
    while isinstance(cmd, click.Group) and words and words[0] in cmd.commands:
        cmd = cmd.commands[words.pop(0)]
        path.append(cmd.name or "")
    if cmd is cli:
        return None
    return cmd, words, " ".join(path)


def _flags(cmd: click.Command) -> set[str]:
    return {
        o for p in cmd.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
    } | {
        "-h",
        "--help",
    }


def _calls() -> list[tuple[str, str]]:
    calls = []
    for doc in [*DOCS, *SCRIPTS]:
        for line in _lines(doc.read_text(), blocks=doc.suffix == ".md"):
            # Two commands side by side in columns are two calls.
            code = re.sub(r"(^|\s)#.*", "", line)  # a shell comment is prose
            for part in re.split(r"\s{3,}", code):
                for m in _CALL.finditer(part):
                    calls.append((f"{doc.relative_to(ROOT)}: {part.strip()}", m.group(1)))
    return calls


CALLS = _calls()


def test_the_docs_have_commands() -> None:
    assert len(CALLS) > 30
    in_scripts = {args.split()[0] for where, args in CALLS if where.startswith("scripts/ci/")}
    assert in_scripts >= {"qualify", "push", "status"}


@pytest.mark.parametrize(("where", "args"), CALLS, ids=[w[:90] for w, _ in CALLS])
def test_documented_flags_exist(where: str, args: str) -> None:
    try:
        words = shlex.split(args, comments=True)
    except ValueError:
        words = args.split()
    found = _command(words)
    if found is None:
        # `ledger` as a word in prose-like code (a path, a package name): no call.
        assert (
            not words or not re.fullmatch(r"[a-z][a-z-]+", words[0]) or words[0] in ("ledger",)
        ), f"{where}: no command {words[0]!r}"
        return
    cmd, rest, name = found
    flags = {w.strip("[]").split("=")[0] for w in rest if w.strip("[").startswith("-")}
    unknown = sorted(f for f in flags if f not in _flags(cmd) and f != "-")
    assert not unknown, f"{where}: `{name}` takes no {', '.join(unknown)}"


def _server_commands() -> set[str]:
    out: set[str] = set()

    def walk(cmd: click.Command, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            for n, c in cmd.commands.items():
                walk(c, [*path, n])
        elif "--server" in _flags(cmd):
            out.add(" ".join(path))

    walk(cli, [])
    return out


def test_readme_lists_the_commands_that_take_server() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"These commands take `--server URL`: ([^.]+)\.", text)
    assert m, "README: the sentence listing the commands that take --server"
    listed = {c.strip().strip("`") for c in m.group(1).replace(" and ", ", ").split(",")}
    assert listed == _server_commands()


def test_deploy_mounts_the_key_secret_so_the_runner_accepts_it(tmp_path: Path) -> None:
    """docs/deploy.md's Kubernetes Job mounts the runner key 0400, written in decimal
    (256): YAML 1.2 reads `0400` as 400 (= 0620). The runner loads a key of that mode
    and refuses Kubernetes' default 0644."""
    import os

    from ledger.evidence.errors import UsageError
    from ledger.evidence.keys import KeyDir

    text = (ROOT / "docs" / "deploy.md").read_text()
    secrets = re.findall(r"secret: \{([^}]*)\}", text)
    modes = [re.search(r"defaultMode: (\d+)\b", s) for s in secrets]
    assert secrets and all(m is not None and m.group(1) == str(0o400) for m in modes), secrets
    keys = KeyDir(tmp_path / "keys")
    keys.create("runner")
    f = keys.file("runner")
    os.chmod(f, 0o400)
    assert keys.load("runner").name == "runner"
    os.chmod(f, 0o644)
    with pytest.raises(UsageError, match="readable by others"):
        keys.load("runner")


def test_architecture_names_each_module_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    firsts: list[str] = []
    for line in text.splitlines():
        if line.startswith("| `"):
            firsts += re.findall(r"`([^`]+)`", line.split("|")[1])
    dupes = sorted({n for n in firsts if firsts.count(n) > 1})
    assert not dupes, f"docs/architecture.md lists {dupes} twice"
    # The modules of ledger/'s top level, and those that moved from it into the rooms.
    rooms = ("evidence", "identity", "remote", "write", "read")
    modules = sorted(
        p.relative_to(ROOT / "ledger").as_posix()
        for p in [
            *(ROOT / "ledger").glob("*.py"),
            *(q for room in rooms for q in (ROOT / "ledger" / room).glob("*.py")),
        ]
        if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(modules) > 30
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"
