"""An independent check of a C2SP tlog-proof, for tests only: RFC 6962 by its
recursive definition, signed notes, vkeys, cosignature/v1 and a tlog-policy
quorum, written from the specs and sharing no code with the product."""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

DASH = "\u2014 "


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def root_from_path(m: int, n: int, leaf: bytes, path: list[bytes]) -> bytes:
    """RFC 6962 2.1.1: the root of a tree of n leaves, leaf m, from PATH(m, D[n])
    (leaf side first, so the node nearest the root is the last)."""
    if n == 1:
        assert not path, "path too long"
        return leaf
    assert path, "path too short"
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return h(b"\x01" + root_from_path(m, k, leaf, path[:-1]) + path[-1])
    return h(b"\x01" + path[-1] + root_from_path(m - k, n - k, leaf, path[:-1]))


@dataclass
class Key:
    name: str
    kind: int
    key: bytes

    @property
    def kid(self) -> bytes:
        return h(self.name.encode() + b"\n" + bytes([self.kind]) + self.key)[:4]


def vkey(text: str) -> Key:
    name, kid, rest = text.split("+", 2)
    blob = base64.b64decode(rest)
    k = Key(name, blob[0], blob[1:])
    assert k.kid.hex() == kid
    return k


@dataclass
class Note:
    text: bytes
    sigs: list[tuple[str, bytes]] = field(default_factory=list)


def note(data: bytes) -> Note:
    s = data.decode()
    cut = s.rindex("\n\n")
    body, lines = s[: cut + 1], s[cut + 2 :]
    assert lines.endswith("\n")
    sigs = []
    for line in lines[:-1].split("\n"):
        assert line.startswith(DASH)
        name, b64 = line[len(DASH) :].split(" ")
        sigs.append((name, base64.b64decode(b64)))
    return Note(body.encode(), sigs)


def signed(n: Note, k: Key) -> bool:
    pub = Ed25519PublicKey.from_public_bytes(k.key)
    for name, sig in n.sigs:
        if name != k.name or sig[:4] != k.kid:
            continue
        if k.kind == 0x01:
            pub.verify(sig[4:], n.text)
            return True
        if k.kind == 0x04 and len(sig) == 76:
            (t,) = struct.unpack(">Q", sig[4:12])
            pub.verify(sig[12:], b"cosignature/v1\ntime " + str(t).encode() + b"\n" + n.text)
            return True
    return False


def quorum(policy: str, n: Note) -> tuple[bool, set[str]]:
    """(whether the log signed it and the quorum holds, the witnesses that cosigned)."""
    logs: list[Key] = []
    wit: dict[str, Key] = {}
    groups: dict[str, tuple[int, list[str]]] = {}
    q = ""
    for raw in policy.splitlines():
        w = raw.split()
        if not w or w[0].startswith("#"):
            continue
        if w[0] == "log":
            logs.append(vkey(w[1]))
        elif w[0] == "witness":
            wit[w[1]] = vkey(w[2])
        elif w[0] == "group":
            members = w[3:]
            k = {"all": len(members), "any": 1}.get(w[2]) or int(w[2])
            groups[w[1]] = (k, members)
        elif w[0] == "quorum":
            q = w[1]
    origin = n.text.decode().split("\n")[0]
    log_ok = any(lg.name == origin and signed(n, lg) for lg in logs)
    cosigned = {name for name, k in wit.items() if signed(n, k)}

    def ok(name: str) -> bool:
        if name == "none":
            return True
        if name in wit:
            return name in cosigned
        k, members = groups[name]
        return sum(ok(m) for m in members) >= k

    return log_ok and ok(q), cosigned


def check_proof(proof: bytes, body: bytes, policy: str) -> set[str]:
    """Verify a tlog-proof of an entry `body` of a ledger (its leaf rule: the
    index and the `extra` logging time before the body); the cosigners."""
    head, _, cp = proof.partition(b"\n\n")
    lines = head.decode().split("\n")
    assert lines.pop(0) == "c2sp.org/tlog-proof@v1"
    extra = base64.b64decode(lines.pop(0)[6:]) if lines[0].startswith("extra ") else None
    index = int(lines.pop(0).removeprefix("index "))
    path = [base64.b64decode(x) for x in lines]
    prefix = b"" if extra is None else str(index).encode() + b"\n" + extra + b"\n"
    leaf = h(b"\x00" + prefix + body)
    n = note(cp)
    _, size, root = n.text.decode().split("\n")[:3]
    assert root_from_path(index, int(size), leaf, path) == base64.b64decode(root)
    good, cosigned = quorum(policy, n)
    assert good, f"policy not met (cosigned by {cosigned})"
    return cosigned
