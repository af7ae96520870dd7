"""The fast start of `ledger verify`: its command line read without click.

A reviewer runs `ledger verify BUNDLE --trust PEM` in a fresh interpreter;
importing click (and building every command's options) costs as much as the
verification. This reader accepts only the plain forms of the verify
command's options, and answers None for anything else (`--help`, an unknown
or repeated option, a value that starts with `-`, an empty word, a --trust or
--checkpoint path that click would refuse), which then goes through click as
before. What it accepts, click reads into the same values
(tests/ledger/cli/test_cli_fast.py holds the two to each other).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ledger.cli.verify import VerifyRequest

__all__ = ["verify_request"]

# The command's options that take a value, and its flags.
_VALUED = (
    "--trust",
    "--repo",
    "--commit",
    "--claim",
    "--signer",
    "--checkpoint",
    "--policy",
    "--server",
    "--db",
)
_FLAGS = ("--json", "--fresh")
_PATHS = ("--trust", "--checkpoint", "--policy")


def _path_click_accepts(value: str) -> bool:
    """click.Path(dir_okay=False) as the command declares it: a path that does not
    exist passes, an existing one must not be a folder and must be readable."""
    try:
        st = os.stat(value)
    except OSError:
        return True
    except ValueError:  # a NUL in the path: click's reading decides
        return False
    return not stat.S_ISDIR(st.st_mode) and os.access(value, os.R_OK)


def verify_request(args: Sequence[str]) -> VerifyRequest | None:
    """The request of a plain `verify ...` command line, or None (click reads it)."""
    if not args or args[0] != "verify":
        return None
    target: str | None = None
    trust: list[Path] = []
    values: dict[str, str] = {}
    flags: set[str] = set()
    rest = list(args[1:])
    while rest:
        word = rest.pop(0)
        if not word:
            return None
        if not word.startswith("-"):
            if target is not None:
                return None
            target = word
            continue
        name, eq, value = word.partition("=")
        if name in _FLAGS and not eq:
            if name in flags:
                return None
            flags.add(name)
            continue
        if name not in _VALUED:
            return None
        if not eq:
            if not rest:
                return None
            value = rest.pop(0)
        if not value or value.startswith("-"):
            return None
        if name in _PATHS and not _path_click_accepts(value):
            return None
        if name == "--trust":
            trust.append(Path(value))
        elif name in values:
            return None
        else:
            values[name] = value
    if target is None:
        return None
    newer = values.get("--checkpoint")
    policy = values.get("--policy")
    return VerifyRequest(
        target=target,
        trust=tuple(trust),
        want_repo=values.get("--repo"),
        want_commit=values.get("--commit"),
        want_claim=values.get("--claim"),
        want_signer=values.get("--signer"),
        newer=None if newer is None else Path(newer),
        server=values.get("--server"),
        db=values.get("--db"),
        as_json="--json" in flags,
        policy=None if policy is None else Path(policy),
        fresh="--fresh" in flags,
    )
