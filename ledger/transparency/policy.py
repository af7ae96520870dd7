"""Trust policies (C2SP tlog-policy): which logs, which witnesses, which quorum.

A checkpoint satisfies a policy when a listed log (its vkey name is the
checkpoint's origin) signed it and the witnesses that cosigned it make the
quorum. ``Policy.check`` refuses with one line naming the missing
cosignatures.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ledger._internal.checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint
from ledger.evidence.errors import CheckpointError, InputError, VerificationError
from ledger.transparency.cosignature import witnesses_of
from ledger.transparency.vkey import LOG_ED25519, WITNESS_ED25519, VKey, parse_vkey

__all__ = ["Group", "Log", "Policy", "Witness", "parse_policy", "witnessed_line"]

_WS = re.compile(r"[ \t]+")
_DECIMAL = re.compile(r"[1-9][0-9]*")
# The spec recommends at least 32 of each; a bound keeps a hostile file cheap.
_MAX_ITEMS = 256


class Log(NamedTuple):
    vkey: VKey
    url: str | None


class Witness(NamedTuple):
    name: str
    vkey: VKey
    url: str | None


class Group(NamedTuple):
    name: str
    threshold: int
    members: tuple[str, ...]


class Policy(NamedTuple):
    logs: tuple[Log, ...]
    witnesses: dict[str, Witness]
    groups: dict[str, Group]
    quorum: str
    """A witness or group name, or "none"."""

    def witnessed(self, name: str, cosigned: set[str]) -> bool:
        """Whether witness or group `name` witnessed, given the witnesses that cosigned."""
        if name == "none":
            return True
        if name in self.witnesses:
            return name in cosigned
        g = self.groups[name]
        return sum(self.witnessed(m, cosigned) for m in g.members) >= g.threshold

    def _leaves(self, name: str) -> list[str]:
        if name in self.witnesses:
            return [name]
        if name == "none":
            return []
        return [w for m in self.groups[name].members for w in self._leaves(m)]

    def log_signer(self, note: bytes) -> tuple[Log, Checkpoint]:
        """The policy's log that signed `note` (its vkey name is the origin)."""
        try:
            cp = parse_checkpoint(note)
        except CheckpointError as e:
            raise VerificationError(f"checkpoint: {e.reason()}") from None
        problem = f"no log of the policy has origin {cp.origin!r}"
        for log in self.logs:
            if log.vkey.name != cp.origin:
                continue
            try:
                return log, verify_checkpoint(note, key_name=cp.origin, public_key=log.vkey.public)
            except CheckpointError as e:
                problem = f"checkpoint: {e.reason()}"
        raise VerificationError(problem)

    def check(self, note: bytes) -> tuple[Checkpoint, set[str]]:
        """The checkpoint and its cosigning witnesses, once a listed log signed it
        and they make the quorum; VerificationError naming what is missing."""
        _, cp = self.log_signer(note)
        cosigned = witnesses_of(cp, (w.vkey for w in self.witnesses.values()))
        named = {w.vkey.name: n for n, w in self.witnesses.items()}
        cosigned = {named[v] for v in cosigned}
        if not self.witnessed(self.quorum, cosigned):
            missing = [w for w in dict.fromkeys(self._leaves(self.quorum)) if w not in cosigned]
            have = ", ".join(sorted(cosigned)) or "none"
            raise VerificationError(
                f"checkpoint at size {cp.size} lacks the witness quorum {self.quorum!r}: "
                f"missing cosignatures from {', '.join(missing)} (cosigned by {have})"
            )
        return cp, cosigned


def _fail(number: int, reason: str) -> InputError:
    return InputError(f"policy line {number}: {reason}")


def parse_policy(data: bytes) -> Policy:
    """Parse a policy file; InputError naming the line for anything the spec refuses."""
    if any((b < 0x20 and b not in (0x09, 0x0A)) or b == 0x7F for b in data):
        raise InputError("policy: control characters other than tab and newline")
    text = data.decode("utf-8", "surrogateescape")
    logs: list[Log] = []
    witnesses: dict[str, Witness] = {}
    groups: dict[str, Group] = {}
    raws: set[bytes] = set()
    quorum: str | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        words = _WS.split(line.strip(" \t"))
        if words == [""] or words[0].startswith("#"):
            continue
        if len(logs) + len(witnesses) + len(groups) > _MAX_ITEMS:
            raise _fail(number, f"more than {_MAX_ITEMS} logs, witnesses and groups")
        kind, args = words[0], words[1:]
        if kind == "log":
            if len(args) not in (1, 2):
                raise _fail(number, "expected: log VKEY [URL]")
            vkey = _vkey(args[0], LOG_ED25519, number)
            if vkey.raw in raws:
                raise _fail(number, "duplicate key")
            raws.add(vkey.raw)
            logs.append(Log(vkey, args[1] if len(args) == 2 else None))
        elif kind == "witness":
            if len(args) not in (2, 3):
                raise _fail(number, "expected: witness NAME VKEY [URL]")
            name = _new_name(args[0], witnesses, groups, number)
            vkey = _vkey(args[1], WITNESS_ED25519, number)
            if vkey.raw in raws:
                raise _fail(number, "duplicate key")
            raws.add(vkey.raw)
            witnesses[name] = Witness(name, vkey, args[2] if len(args) == 3 else None)
        elif kind == "group":
            if len(args) < 3:
                raise _fail(number, "expected: group NAME all|any|K MEMBER...")
            name = _new_name(args[0], witnesses, groups, number)
            members = tuple(args[2:])
            for m in members:
                if m not in witnesses and m not in groups:
                    raise _fail(number, f"{m!r} is not a witness or group defined above")
            if len(set(members)) != len(members):
                raise _fail(number, "a member is listed twice")
            groups[name] = Group(name, _threshold(args[1], len(members), number), members)
        elif kind == "quorum":
            if len(args) != 1:
                raise _fail(number, "expected: quorum NAME")
            if quorum is not None:
                raise _fail(number, "a second quorum line")
            if args[0] != "none" and args[0] not in witnesses and args[0] not in groups:
                raise _fail(number, f"{args[0]!r} is not a witness or group defined above")
            quorum = args[0]
        else:
            raise _fail(number, f"unknown keyword {kind!r}")
    if quorum is None:
        raise InputError("policy: no quorum line")
    return Policy(tuple(logs), witnesses, groups, quorum)


def _vkey(text: str, sig_type: int, number: int) -> VKey:
    try:
        vkey = parse_vkey(text)
    except InputError as e:
        raise _fail(number, e.reason()) from None
    if vkey.sig_type != sig_type:
        raise _fail(number, f"key type 0x{vkey.sig_type:02x}, expected 0x{sig_type:02x}")
    return vkey


def _new_name(
    name: str, witnesses: dict[str, Witness], groups: dict[str, Group], number: int
) -> str:
    if name == "none":
        raise _fail(number, "'none' is reserved")
    if name in witnesses or name in groups:
        raise _fail(number, f"{name!r} is defined twice")
    return name


def _threshold(word: str, n: int, number: int) -> int:
    if word == "all":
        return n
    if word == "any":
        return 1
    if not _DECIMAL.fullmatch(word) or not 1 <= int(word) <= n:
        raise _fail(number, f"threshold {word!r} is not all, any or 1..{n}")
    return int(word)


def witnessed_line(policy: Policy, note: bytes) -> str:
    """One line for a verification report once `note` meets the policy's quorum."""
    cp, cosigned = policy.check(note)
    by = ", ".join(sorted(cosigned)) or "no witness"
    return f"quorum {policy.quorum!r} met at size {cp.size} (cosigned by {by})"
