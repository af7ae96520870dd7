"""The host each GPU UUID belongs to when no host declares it: the first host that
recorded it, as the fleet counts receipts (`ledger.fleet.report.store_predicates`),
and the ingest rule that keeps it so.

A GPU UUID a key's binding declares belongs to the host that declares it
(`ledger.write.hosts.check_speaks_for`). One declared nowhere belonged, in the fleet
only, to the first host whose standing receipts named it, and a key of another host
could still log receipts naming it. Ingest now refuses those: a receipt naming a GPU
another host recorded first is refused, unless its own host declares that GPU; a GPU
no host recorded yet is accepted and from then on belongs to the receipt's host. The
fleet's count of every ledger is unchanged: it already counted the first recorder.

The first recorders are found by reading every receipt once per process (receipts
name their GPUs in the signed payload, which no column indexes), then only those
logged since; a change of the key table (a key registered or revoked) reads them all
again, since which receipts stand depends on it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select

from ledger.evidence.errors import Error, RefusedError
from ledger.evidence.keys import KeyInfo
from ledger.store.cache import ENTRIES
from ledger.store.store import LOG, Store
from ledger.verify.standing import standing
from ledger.write.hosts import Registry, registry

__all__ = ["Recorders", "check_first_recorded", "recorders"]


@dataclass(slots=True)
class _Read:
    """What one ledger's standing receipts said, up to ``upto`` (exclusive)."""

    upto: int = 0
    keys: tuple[tuple[str, int, int | None], ...] = ()
    named: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Per GPU UUID, each (signer, host) that named it, in the order each first did."""
    recorded: dict[str, set[str]] = field(default_factory=dict)
    """Per signer, the hosts its standing receipts name."""


_READ: dict[str, _Read] = {}
_LOCK = threading.Lock()


def _key_table(keys: Mapping[str, KeyInfo]) -> tuple[tuple[str, int, int | None], ...]:
    return tuple(sorted((k, i.seq, i.revoked_seq) for k, i in keys.items()))


def _read(store: Store, keys: Mapping[str, KeyInfo]) -> _Read:
    table = _key_table(keys)
    with _LOCK:
        have = _READ.get(store.url)
    size = store.size()
    if have is None or have.keys != table or size < have.upto:
        have = _Read(keys=table)  # first read, a key changed, or a ledger made again
    if size <= have.upto:
        return have
    got = _Read(
        have.upto,
        table,
        {u: list(v) for u, v in have.named.items()},
        {s: set(h) for s, h in have.recorded.items()},
    )
    q = select(LOG).where(LOG.c.kind == "receipt", LOG.c.seq >= have.upto).order_by(LOG.c.seq)
    with store.engine.connect() as conn:
        for row in conn.execution_options(yield_per=2000).execute(q):
            e = ENTRIES.get(row)
            try:
                if standing(e, keys) is not None:
                    continue
                p = e.receipt.predicate
            except Error:
                continue  # counts for nothing, as in the fleet (`ledger audit` names it)
            host = p.runner.host
            if not host:
                continue
            got.recorded.setdefault(e.signer, set()).add(host)
            for u in p.runner.gpu_uuids:
                seen = got.named.setdefault(u, [])
                if (e.signer, host) not in seen:
                    seen.append((e.signer, host))
    got.upto = size
    with _LOCK:
        _READ[store.url] = got
    return got


@dataclass(slots=True)
class Recorders:
    """The host each GPU UUID named by a counted receipt belongs to (declared there,
    else first recorded there), and those the batch being checked adds."""

    owner: dict[str, str]


def recorders(store: Store, keys: Mapping[str, KeyInfo] | None = None) -> Recorders:
    """Each GPU UUID's host as `ledger.fleet.report.store_predicates` counts it now: the
    one host whose binding declares it, else the first host whose standing receipts
    named it where their key speaks for that host."""
    keys = store.keys() if keys is None else keys
    got = _read(store, keys)
    reg: Registry = registry(store, keys, recorded=got.recorded)
    owner = {u: min(hs) for u, hs in reg.owners.items() if len(hs) == 1}
    for u, pairs in got.named.items():
        if u in owner:
            continue
        for signer, host in pairs:
            bound = reg.of(signer)
            if bound is not None and bound.speaks_for(host):
                owner[u] = host
                break
    return Recorders(owner)


def check_first_recorded(
    rec: Recorders, declared: Mapping[str, frozenset[str]], host: str, uuids: Sequence[str]
) -> None:
    """A receipt of ``host`` names no GPU another host recorded first, unless a binding
    declares it on ``host`` (``declared``: per GPU UUID, the hosts that declare it); a
    GPU no host recorded yet is ``host``'s from now on (for the rest of the batch too).
    RefusedError with the one reason."""
    for u in uuids:
        first = rec.owner.get(u)
        if first is not None and first != host and host not in declared.get(u, ()):
            raise RefusedError(
                f"runner.gpu_uuids: {u[:60]!a} was first recorded on host {first[:60]!a},"
                f" not {host[:60]!a} (no key declares it there)"
            )
    for u in uuids:
        rec.owner.setdefault(u, host)
