"""RFC 6962 / RFC 9162 Merkle tree over byte-string log entries.

Leaf hash ``SHA256(0x00 || entry)``, interior node ``SHA256(0x01 || left || right)``,
empty tree ``SHA256("")``. A tree of ``n > 1`` leaves splits at the largest power of
two ``k < n``: the left subtree holds ``k`` leaves, the right one the rest.

Roots and proofs are computed in one pass over the leaf hashes with a stack of
perfect-subtree roots (O(n) hashes, O(log n) memory, no recursion); the verifiers
are the iterative algorithms of RFC 9162 §2.1.3.2 and §2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from ledger.evidence.errors import MerkleError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "MerkleError",
    "consistency_proof",
    "entry_leaf",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Bytes in every leaf hash, node hash, root and proof node (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""Root of the tree with no leaves."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"

_sha256 = hashlib.sha256


def leaf_hash(entry: bytes) -> bytes:
    """Return ``SHA256(0x00 || entry)``."""
    return _sha256(_LEAF_PREFIX + entry).digest()


def entry_leaf(seq: int, logged_at: str, body: bytes) -> bytes:
    """The leaf hash of a log entry: it commits to the entry's position, its
    logging time and its body, so every stored byte a reader is shown of a log
    row is covered by the signed root (not the body alone)."""
    return leaf_hash(b"%d\n%s\n" % (seq, logged_at.encode("utf-8", "surrogateescape")) + body)


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return ``SHA256(0x01 || left || right)``."""
    return _sha256(_NODE_PREFIX + left + right).digest()


def _split(size: int) -> int:
    """Largest power of two strictly below ``size`` (``size >= 2``)."""
    return 1 << ((size - 1).bit_length() - 1)


def _check_hash(value: bytes, what: str, exc: type[Exception]) -> None:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        got = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
        raise exc(f"{what} must be {HASH_SIZE} bytes, got {got}")


def _range_root(leaf_hashes: Sequence[bytes], start: int, end: int) -> bytes:
    """Root of the subtree over ``leaf_hashes[start:end]`` (``start < end``).

    Keeps the roots of the perfect subtrees seen so far on a stack and merges
    equal-sized neighbours as each leaf arrives, which yields exactly the
    RFC 6962 left-full shape without recursion.
    """
    stack: list[bytes] = []
    for i in range(start, end):
        h = leaf_hashes[i]
        if len(h) != HASH_SIZE:
            raise ValueError(f"leaf hash {i} must be {HASH_SIZE} bytes, got {len(h)}")
        # One merge per trailing 1-bit of the number of leaves so far: those are the perfect
        # subtrees that the new leaf completes.
        k = i - start
        while k & 1:
            h = _sha256(_NODE_PREFIX + stack.pop() + h).digest()
            k >>= 1
        stack.append(h)
    h = stack.pop()
    while stack:
        h = _sha256(_NODE_PREFIX + stack.pop() + h).digest()
    return h


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """Return the Merkle tree hash of ``leaf_hashes`` (``EMPTY_ROOT`` when empty).

    Raises ValueError if a leaf hash is not 32 bytes.
    """
    if not leaf_hashes:
        return EMPTY_ROOT
    return _range_root(leaf_hashes, 0, len(leaf_hashes))


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the audit path of leaf ``index`` in the tree over all of ``leaf_hashes``.

    Nodes are ordered leaf-side first, as in RFC 6962 ``PATH``. Raises ValueError
    if ``index`` is not a leaf of the tree.
    """
    size = len(leaf_hashes)
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    # Walk down from the root; each step records the sibling subtree's root,
    # so the path comes out root-side first and is reversed at the end.
    while hi - lo > 1:
        mid = lo + _split(hi - lo)
        if index < mid:
            path.append(_range_root(leaf_hashes, mid, hi))
            hi = mid
        else:
            path.append(_range_root(leaf_hashes, lo, mid))
            lo = mid
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the RFC 6962 ``PROOF(old_size, D[new_size])`` over ``leaf_hashes[:new_size]``.

    Empty when ``old_size`` is 0 or equal to ``new_size``. Raises ValueError unless
    ``0 <= old_size <= new_size <= len(leaf_hashes)``.
    """
    if not 0 <= old_size <= new_size <= len(leaf_hashes):
        raise ValueError(
            f"no consistency proof from size {old_size} to size {new_size} "
            f"in a log of {len(leaf_hashes)} entries"
        )
    if old_size in (0, new_size):
        return []
    path: list[bytes] = []
    m, lo, hi = old_size, 0, new_size
    # SUBPROOF(m, D[lo:hi], b) unrolled: ``complete`` is b, true while the old
    # tree is still a left prefix of the current subtree (its root is then
    # known to the verifier and left out).
    complete = True
    while m != hi - lo:
        k = _split(hi - lo)
        if m <= k:
            path.append(_range_root(leaf_hashes, lo + k, hi))
            hi = lo + k
        else:
            path.append(_range_root(leaf_hashes, lo, lo + k))
            lo += k
            m -= k
            complete = False
    if not complete:
        path.append(_range_root(leaf_hashes, lo, hi))
    path.reverse()
    return path


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` leaves with ``root``.

    RFC 9162 §2.1.3.2. Returns None on success; raises MerkleError with the reason.
    """
    if not 0 <= index < size:
        raise MerkleError(f"leaf index {index} is outside a tree of size {size}")
    _check_hash(leaf_hash, "leaf hash", MerkleError)
    _check_hash(root, "root", MerkleError)
    for i, node in enumerate(proof):
        _check_hash(node, f"inclusion proof node {i}", MerkleError)
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise MerkleError(
                f"inclusion proof has more than the nodes for leaf {index} of a tree of size {size}"
            )
        if fn & 1 or fn == sn:
            r = _sha256(_NODE_PREFIX + p + r).digest()
            # Skip the levels where this node is the last, unpaired one: it is
            # carried up unchanged, so no proof node belongs to those levels.
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _sha256(_NODE_PREFIX + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise MerkleError(
            f"inclusion proof has too few nodes for leaf {index} of a tree of size {size}"
        )
    if r != root:
        raise MerkleError(
            f"inclusion proof for leaf {index} leads to root {r.hex()}, not {root.hex()}"
        )


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` with ``new_root`` extends the one of ``old_size``.

    RFC 9162 §2.1.4.2, extended to the cases it leaves out: from size 0 the proof
    must be empty and ``old_root`` the empty root; between equal sizes the proof
    must be empty and the roots equal. Raises MerkleError with the reason.
    """
    if not 0 <= old_size <= new_size:
        raise MerkleError(f"no consistency between size {old_size} and size {new_size}")
    _check_hash(old_root, "old root", MerkleError)
    _check_hash(new_root, "new root", MerkleError)
    for i, node in enumerate(proof):
        _check_hash(node, f"consistency proof node {i}", MerkleError)
    if old_size == 0:
        if proof:
            raise MerkleError("a consistency proof from the empty tree must be empty")
        if old_root != EMPTY_ROOT:
            raise MerkleError("old root is not the root of the empty tree")
        return
    if old_size == new_size:
        if proof:
            raise MerkleError("a consistency proof between equal sizes must be empty")
        if old_root != new_root:
            raise MerkleError(f"two different roots for the same size {old_size}")
        return
    if not proof:
        raise MerkleError(f"empty consistency proof from size {old_size} to size {new_size}")

    # When the old tree is a perfect subtree of the new one its root is a node
    # of the new tree, and RFC 6962 leaves it out of the proof.
    path: list[bytes] = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise MerkleError(
                f"consistency proof has more than the nodes from size {old_size} to size {new_size}"
            )
        if fn & 1 or fn == sn:
            fr = _sha256(_NODE_PREFIX + c + fr).digest()
            sr = _sha256(_NODE_PREFIX + c + sr).digest()
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = _sha256(_NODE_PREFIX + sr + c).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise MerkleError(
            f"consistency proof has too few nodes from size {old_size} to size {new_size}"
        )
    if fr != old_root:
        raise MerkleError(
            f"consistency proof leads to old root {fr.hex()}, not {old_root.hex()} "
            f"(size {old_size})"
        )
    if sr != new_root:
        raise MerkleError(
            f"consistency proof leads to new root {sr.hex()}, not {new_root.hex()} "
            f"(size {new_size})"
        )


class CompactRange:
    """Roots of the perfect subtrees covering a growing log, largest (leftmost) first.

    One root per set bit of ``size``: enough to append a leaf and to compute the
    log's root in O(log n), so a writer never rereads old entries. ``size`` and
    ``nodes`` can be stored and passed back to resume.
    """

    __slots__ = ("_nodes", "_size")

    def __init__(self, size: int = 0, nodes: Iterable[bytes] = ()) -> None:
        """Resume from a stored ``size`` and its ``nodes``; raises ValueError if they disagree."""
        node_list = list(nodes)
        if size < 0:
            raise ValueError(f"negative size {size}")
        if len(node_list) != size.bit_count():
            raise ValueError(
                f"a range of size {size} has {size.bit_count()} nodes, got {len(node_list)}"
            )
        for i, node in enumerate(node_list):
            _check_hash(node, f"node {i}", ValueError)
        self._size = size
        self._nodes = node_list

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    @property
    def nodes(self) -> tuple[bytes, ...]:
        """Perfect-subtree roots, largest first (one per set bit of ``size``)."""
        return tuple(self._nodes)

    def append(self, leaf_hash: bytes) -> None:
        """Add one leaf hash at index ``size``; raises ValueError if it is not 32 bytes."""
        _check_hash(leaf_hash, "leaf hash", ValueError)
        h = leaf_hash
        k = self._size
        while k & 1:
            h = _sha256(_NODE_PREFIX + self._nodes.pop() + h).digest()
            k >>= 1
        self._nodes.append(h)
        self._size += 1

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append each of ``leaf_hashes`` in order."""
        for h in leaf_hashes:
            self.append(h)

    def root(self) -> bytes:
        """Root of the tree over every leaf appended so far."""
        if not self._nodes:
            return EMPTY_ROOT
        h = self._nodes[-1]
        for node in reversed(self._nodes[:-1]):
            h = _sha256(_NODE_PREFIX + node + h).digest()
        return h

    def copy(self) -> CompactRange:
        """An independent copy of this range."""
        return CompactRange(self._size, self._nodes)

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, nodes={len(self._nodes)})"
