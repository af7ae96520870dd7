"""The hosts a runner key speaks for, as the log holds them, and the one rule every
signed name a page or terminal shows is held to.

A runner key's registration names its hosts, each with the GPU UUIDs it declares
there where they are known (``"hosts": {"gpu-host-7": ["GPU-..."]}`` in the key
entry); an operator adds or removes one later with a ``hosts`` entry, logged like a
key entry. A key entry without ``hosts`` was registered before keys named them: it
speaks for the hosts it has recorded from (`ledger.write.hosts`).

A name a receipt signs (its host, its GPUs, its claim) reaches terminals and pages:
it must be printable text, refused at ingest otherwise. Pages escape it anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ledger.evidence.canonical import canonical_bytes
from ledger.evidence.errors import RefusedError

__all__ = [
    "MAX_NAME",
    "HostChange",
    "check_name",
    "hosts_body",
    "read_hosts",
    "read_hosts_entry",
    "with_hosts",
]

MAX_NAME = 255
"""The longest host or GPU name accepted (a DNS name is at most 253 characters)."""


def check_name(value: str, what: str) -> None:
    """``value`` as printable text: no control, format or separator character other
    than the space (an escape sequence, a bidirectional override, a line break), at
    most `MAX_NAME` characters. RefusedError with the name shown escaped otherwise."""
    if not value.isprintable():
        raise RefusedError(f"{what} {value[:60]!a} is not printable text")
    if len(value) > MAX_NAME:
        raise RefusedError(f"{what} is {len(value)} characters, over {MAX_NAME}")


def _names(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RefusedError(f"{what}: expected a list of names")
    for v in value:
        check_name(v, what)
    return tuple(sorted(set(value)))


def read_hosts(value: Any) -> dict[str, tuple[str, ...]]:
    """A registration's ``hosts``: each host with the GPU UUIDs declared there (none:
    not known). RefusedError where it is not that shape."""
    if not isinstance(value, dict):
        raise RefusedError("hosts: expected an object of host names")
    out: dict[str, tuple[str, ...]] = {}
    for host, gpus in value.items():
        if not host:
            raise RefusedError("hosts: a host name is empty")
        check_name(host, "host")
        out[host] = _names(gpus, f"hosts[{host[:40]!a}]")
    return out


def with_hosts(key_body: bytes, hosts: Mapping[str, Sequence[str]]) -> bytes:
    """A key entry's body (`ledger.evidence.entry.key_body`) naming the hosts its key
    speaks for, each with its GPUs: canonical, hosts and GPUs sorted."""
    import json

    doc = json.loads(key_body)
    doc["hosts"] = {h: sorted(set(g)) for h, g in sorted(hosts.items())}
    read_hosts(doc["hosts"])
    return canonical_bytes(doc)


class HostChange(NamedTuple):
    """One ``hosts`` entry: a host added to or removed from a key, and why."""

    keyid: str
    action: Literal["add", "remove"]
    host: str
    gpus: tuple[str, ...]
    """The GPU UUIDs declared on ``host`` (add only; none: not known)."""
    reason: str


def hosts_body(
    keyid: str,
    action: Literal["add", "remove"],
    host: str,
    gpus: Sequence[str],
    reason: str,
    when: str,
    by: str | None = None,
) -> bytes:
    """A ``hosts`` entry; ``by`` names the token holder of a change made over HTTP."""
    doc: dict[str, Any] = {
        "kind": "hosts",
        "keyid": keyid,
        "action": action,
        "host": host,
        "gpus": sorted(set(gpus)),
        "reason": reason,
        "when": when,
    }
    if by is not None:
        doc["by"] = by
    return canonical_bytes(doc)


def read_hosts_entry(doc: Any) -> HostChange:
    """A ``hosts`` entry's change; RefusedError where the body is not one."""
    if not isinstance(doc, dict) or doc.get("kind") != "hosts":
        raise RefusedError("not a hosts entry")
    keyid, action, host, reason = (doc.get(k) for k in ("keyid", "action", "host", "reason"))
    if not isinstance(keyid, str) or action not in ("add", "remove"):
        raise RefusedError("hosts entry: expected a key id and an action (add or remove)")
    if not isinstance(host, str) or not host or not isinstance(reason, str):
        raise RefusedError("hosts entry: expected a host and a reason")
    check_name(host, "host")
    gpus = _names(doc.get("gpus", []), "gpus")
    if action == "remove" and gpus:
        raise RefusedError("hosts entry: a removal names no GPUs")
    return HostChange(keyid, action, host, gpus, reason)


def declared(hosts: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``hosts`` as a key entry carries it: hosts and their GPUs sorted."""
    return {h: sorted(set(g)) for h, g in sorted(hosts.items())}
