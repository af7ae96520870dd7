"""Each runner key speaks only for its hosts: which hosts (and GPUs) each key is bound
to, as the log says, the ingest check that refuses a receipt of another host's
devices, and the operator's changes (`ledger keys host add|remove`).

A key's hosts are those its registration names, changed by the ``hosts`` entries
after it (`ledger.evidence.hosts`). A runner key registered before registrations
named hosts speaks for the hosts it has recorded from ("recorded before binding"),
so no existing ledger stops working; one that has recorded nothing yet and was never
changed speaks for the first host it records from. Without this a registered key
could sign receipts naming any host and that host's GPUs with bad health, and the
fleet would quarantine another host's devices.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select

from ledger.evidence.canonical import receipt_id
from ledger.evidence.errors import Error, RefusedError, UsageError
from ledger.evidence.hosts import (
    HostChange,
    check_name,
    hosts_body,
    read_hosts,
    read_hosts_entry,
)
from ledger.evidence.keys import KeyInfo, find_key
from ledger.evidence.limits import COLUMN_LIMITS, check_text
from ledger.store.store import LOG, RECEIPT, Store, utc_now

__all__ = [
    "BEFORE_BINDING",
    "FIRST_USE",
    "REGISTERED",
    "KeyHosts",
    "Registry",
    "change_host",
    "check_names",
    "registry",
]

REGISTERED = "registered"
BEFORE_BINDING = "recorded before binding"
FIRST_USE = "its first host (registered before binding, nothing recorded yet)"


@dataclass(slots=True)
class KeyHosts:
    """The hosts one runner key speaks for, each with the GPU UUIDs declared there
    (empty: not known)."""

    keyid: str
    name: str
    hosts: dict[str, frozenset[str]] = field(default_factory=dict)
    source: str = REGISTERED
    """`REGISTERED` (its registration named them), `BEFORE_BINDING` (the hosts it
    recorded from, and those added since) or `FIRST_USE`."""

    def speaks_for(self, host: str) -> bool:
        return host in self.hosts

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": {h: sorted(g) for h, g in sorted(self.hosts.items())},
            "hosts_source": self.source,
        }

    def said(self) -> str:
        """The hosts, for people: ``a, b`` and where they come from when not registered."""
        names = ", ".join(f"{h!a}"[1:-1] for h in sorted(self.hosts)) or "no host"
        return names if self.source == REGISTERED else f"{names} ({self.source})"


@dataclass(frozen=True, slots=True)
class Registry:
    """Every runner key's hosts, and which host declares each GPU."""

    keys: Mapping[str, KeyHosts]
    owners: Mapping[str, frozenset[str]]
    """Per GPU UUID, the hosts a binding declares it on."""

    def of(self, keyid: str) -> KeyHosts | None:
        return self.keys.get(keyid)


# What each ledger's `hosts` entries said, read once per process and then only past the
# last position read: they are found by kind, which has no index.
_CHANGES: dict[str, tuple[int, dict[int, HostChange]]] = {}
_LOCK = threading.Lock()


def _changes(store: Store) -> list[tuple[int, HostChange]]:
    with _LOCK:
        upto, have = _CHANGES.get(store.url, (0, {}))
    size = store.size()
    if size < upto:
        upto, have = 0, {}  # a ledger made again at the same place
    if size > upto:
        q = select(LOG).where(LOG.c.kind == "hosts", LOG.c.seq >= upto).order_by(LOG.c.seq)
        got = dict(have)
        with store.engine.connect() as conn:
            for row in conn.execute(q):
                try:
                    got[int(row.seq)] = read_hosts_entry(_json(row.body))
                except Error:
                    continue  # `ledger audit` names it; an unreadable entry changes nothing
        with _LOCK:
            _CHANGES[store.url] = (size, got)
        have = got
    return sorted(have.items())


def _json(body: Any) -> Any:
    import json

    return json.loads(body if isinstance(body, str) else bytes(body))


def _registered(store: Store, keys: Iterable[KeyInfo]) -> dict[str, Any]:
    """Each runner key's registered ``hosts`` (absent: registered before binding)."""
    seqs = {k.seq: k.keyid for k in keys}
    out: dict[str, Any] = {}
    for e in store.entries_at(sorted(seqs)):
        doc = e.document
        if isinstance(doc, dict) and "hosts" in doc:
            out[seqs[e.seq]] = doc["hosts"]
    return out


# The hosts each key registered before binding recorded from, per ledger, once read in
# full, with the last receipt read (the signer column is indexed): later reads go on
# from there.
_RECORDED: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}
_CHUNK = 256


def _recorded(store: Store, keyid: str, want: Collection[str] = ()) -> frozenset[str]:
    """The hosts a key's logged receipts name (a receipt that does not read names none).
    With ``want``, its newest receipts are read first: a key of an earlier release asked
    about the host it always records from reads a few, not all."""
    with _LOCK:
        upto, have = _RECORDED.get((store.url, keyid), (-1, frozenset()))
    if upto >= store.size():
        upto, have = -1, frozenset()  # a ledger made again at the same place
    q = select(RECEIPT.c.seq).where(RECEIPT.c.signer == keyid, RECEIPT.c.seq > upto)
    if want and not set(want) <= have:
        with store.engine.connect() as conn:
            newest = [int(s) for (s,) in conn.execute(q.order_by(RECEIPT.c.seq.desc()).limit(4))]
        near = have | _hosts_of(store, newest)
        if set(want) <= near:
            return near  # found without reading them all: not kept as complete
    elif want:
        return have
    with store.engine.connect() as conn:
        seqs = sorted(int(s) for (s,) in conn.execute(q))
    if not seqs:
        return have
    got = have | _hosts_of(store, seqs)
    with _LOCK:
        _RECORDED[(store.url, keyid)] = (seqs[-1], got)
    return got


def _hosts_of(store: Store, seqs: Sequence[int]) -> frozenset[str]:
    out = set()
    for at in range(0, len(seqs), _CHUNK):
        for e in store.entries_at(seqs[at : at + _CHUNK]):
            try:
                host = e.payload_document["predicate"]["runner"].get("host")
            except (Error, KeyError, TypeError, AttributeError):
                continue
            if isinstance(host, str) and host:
                out.add(host)
    return frozenset(out)


def registry(
    store: Store,
    keys: Mapping[str, KeyInfo] | None = None,
    *,
    only: Mapping[str, Collection[str]] | None = None,
    recorded: Mapping[str, Collection[str]] | None = None,
) -> Registry:
    """Every runner key's hosts as the log says now (`KeyHosts`). A key registered
    before binding has its recorded hosts read for the keys in ``only`` (default:
    every key; others then speak for none), as far as needed to find the hosts it
    names for each, or taken from ``recorded`` (the hosts each key's receipts name,
    where the caller read them all already)."""
    keys = store.keys() if keys is None else keys
    runners = [k for k in keys.values() if k.role == "runner"]
    registered = _registered(store, runners)
    changes = _changes(store)
    changed = {c.keyid for _, c in changes}
    out: dict[str, KeyHosts] = {}
    for k in runners:
        kh = KeyHosts(k.keyid, k.name)
        if k.keyid in registered:
            # `ledger audit` names one that does not read; such a key speaks for no host.
            with contextlib.suppress(Error):
                kh.hosts = {h: frozenset(g) for h, g in read_hosts(registered[k.keyid]).items()}
        else:
            if recorded is not None:
                found: Collection[str] = recorded.get(k.keyid, ())
            elif only is None:
                found = _recorded(store, k.keyid)
            elif only.get(k.keyid):
                found = _recorded(store, k.keyid, only[k.keyid])
            else:
                found = ()
            kh.hosts = {h: frozenset() for h in found}
            kh.source = BEFORE_BINDING if kh.hosts or k.keyid in changed else FIRST_USE
        out[k.keyid] = kh
    for _, c in changes:
        kh2 = out.get(c.keyid)
        if kh2 is None:
            continue
        if c.action == "add":
            kh2.hosts[c.host] = frozenset(c.gpus)
        else:
            kh2.hosts.pop(c.host, None)
    owners: dict[str, set[str]] = {}
    for kh in out.values():
        for h, gpus in kh.hosts.items():
            for g in gpus:
                owners.setdefault(g, set()).add(h)
    return Registry(out, {g: frozenset(hs) for g, hs in owners.items()})


def check_names(p: Any) -> None:
    """Every name of a receipt's predicate that a page or terminal shows, as printable
    text (`check_name`): its claim, check, repository, host, GPUs, scope and artifacts."""
    check_name(p.claim, "claim")
    check_name(p.check.name, "check.name")
    check_name(p.source.repo, "source.repo")
    if p.runner.host:
        check_name(p.runner.host, "runner.host")
    for u in p.runner.gpu_uuids:
        check_name(u, "runner.gpu_uuids")
    for k, v in p.scope.items():
        if isinstance(v, str):
            check_name(v, f"scope.{k}")
    for a in p.artifacts:
        check_name(a.name, "artifacts.name")


def check_speaks_for(reg: Registry, signer: str, p: Any) -> None:
    """A receipt by ``signer`` speaks only of its own hosts' devices: its host one the
    key speaks for, its GPUs none that another host declares, and among those its own
    host declares where it declares any. A key bound on first use is bound here to its
    receipt's host (for the rest of the batch). RefusedError with the one reason."""
    kh = reg.of(signer)
    if kh is None:
        return  # not a runner key: the signature check refuses it
    host, uuids = p.runner.host, list(p.runner.gpu_uuids)
    if not host:
        if uuids:
            raise RefusedError("runner.gpu_uuids names GPUs, but runner.host names no host")
        return
    if kh.source == FIRST_USE and not kh.hosts:
        kh.hosts[host] = frozenset()
    if not kh.speaks_for(host):
        raise RefusedError(
            f"runner.host {host[:60]!a}: key {kh.name} speaks for {kh.said()}, not this host"
            f" (its operator adds one: ledger keys host add {kh.name} HOST --reason TEXT)"
        )
    mine = kh.hosts[host]
    for u in uuids:
        elsewhere = sorted(reg.owners.get(u, frozenset()) - {host})
        if elsewhere:
            raise RefusedError(
                f"runner.gpu_uuids: {u[:60]!a} is declared on host {elsewhere[0][:60]!a},"
                f" not {host[:60]!a}"
            )
        if mine and u not in mine:
            raise RefusedError(
                f"runner.gpu_uuids: {u[:60]!a} is not among the GPUs key {kh.name} declares"
                f" on {host[:60]!a}"
            )


def change_host(
    store: Store,
    ref: str,
    action: Literal["add", "remove"],
    host: str,
    gpus: Sequence[str],
    reason: str,
    *,
    by: str | None = None,
) -> tuple[KeyInfo, KeyHosts]:
    """Log that runner key ``ref`` speaks (``add``, with the GPUs declared there) or no
    longer speaks (``remove``) for ``host``; returns the key and its hosts after."""
    if not reason.strip():
        raise UsageError("a host change needs a --reason")
    check_text(reason, "--reason", COLUMN_LIMITS["reason"])
    try:
        check_name(host, "host")
        for g in gpus:
            check_name(g, "--gpu")
    except RefusedError as e:
        raise UsageError(e.reason()) from None
    if not host:
        raise UsageError("a host name is empty")
    if action == "remove" and gpus:
        raise UsageError("a removal names no --gpu")
    info = find_key(store.keys(fresh=True), ref)
    if info.role != "runner":
        raise UsageError(f"key {info.name} is a {info.role} key: only runner keys speak for hosts")
    if info.revoked_seq is not None:
        raise UsageError(f"key {info.name} is revoked")
    before = registry(store).keys[info.keyid]
    if action == "remove" and host not in before.hosts:
        raise UsageError(f"key {info.name} does not speak for {host!a}: {before.said()}")
    same = before.hosts.get(host) == frozenset(gpus)
    if action == "add" and same and before.source == REGISTERED:
        raise UsageError(f"key {info.name} already speaks for {host!a} with these GPUs")
    body = hosts_body(info.keyid, action, host, gpus, reason, utc_now(), by)
    with store.append_tx() as tx:
        tx.add(kind="hosts", entry_id=receipt_id(body), body=body)
    return info, registry(store).keys[info.keyid]
