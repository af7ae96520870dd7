"""The Merkle log against RFC 6962 §2.1 itself and the Certificate Transparency vectors.

The reference below is a direct transcription of RFC 6962's recursive
definitions (MTH, PATH, PROOF/SUBPROOF) over raw entries, sharing no code with
``ledger._internal.merkle``.
"""

from __future__ import annotations

import hashlib
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger._internal import merkle
from ledger._internal.merkle import CompactRange, MerkleError

# --- RFC 6962 §2.1, transcribed -------------------------------------------------


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def ref_mth(d: tuple[bytes, ...]) -> bytes:
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(n)
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: tuple[bytes, ...]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_path_sides(m: int, n: int) -> list[bool]:
    """For each node of PATH(m, D[n]): is it a right-hand sibling?"""
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*ref_path_sides(m, k), True]
    return [*ref_path_sides(m - k, n - k), False]


def ref_subproof(m: int, d: tuple[bytes, ...], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


def ref_proof(m: int, d: tuple[bytes, ...]) -> list[bytes]:
    # RFC 6962 defines PROOF for 0 < m <= n; from the empty tree nothing is needed.
    return [] if m == 0 else ref_subproof(m, d, True)


# --- fixtures --------------------------------------------------------------------

MAX = 64
ENTRIES: tuple[bytes, ...] = tuple(
    f"entry {i}".encode() * (i % 3) + bytes([i]) for i in range(MAX + 1)
)
LEAVES = [merkle.leaf_hash(e) for e in ENTRIES]
ROOTS = [ref_mth(ENTRIES[:n]) for n in range(MAX + 2)]


def flip(value: bytes, pos: int = 0) -> bytes:
    """The same bytes with one bit flipped at ``pos``."""
    return value[:pos] + bytes([value[pos] ^ 0x01]) + value[pos + 1 :]


def fails(fn: object, *args: object) -> bool:
    assert callable(fn)
    try:
        fn(*args)
    except MerkleError:
        return True
    return False


# --- Certificate Transparency reference data ------------------------------------
# transparency-dev/merkle testonly data (originally certificate-transparency's
# merkle_tree_test.cc): eight leaves, the tree head for each size, and proofs.

CT_ENTRIES = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = [
    (0, 1, []),
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CT_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        2,
        8,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
]
CT_LEAVES = [merkle.leaf_hash(e) for e in CT_ENTRIES]


def test_hash_prefixes() -> None:
    assert merkle.leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    left, right = merkle.leaf_hash(b"l"), merkle.leaf_hash(b"r")
    assert merkle.node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert merkle.node_hash(left, right) != merkle.node_hash(right, left)


def test_empty_tree() -> None:
    assert merkle.root([]) == merkle.EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert CompactRange().root() == merkle.EMPTY_ROOT


def test_ct_reference_roots() -> None:
    for n, want in enumerate(CT_ROOTS):
        assert merkle.root(CT_LEAVES[:n]).hex() == want, n
        assert ref_mth(tuple(CT_ENTRIES[:n])).hex() == want, n
    assert merkle.root(CT_LEAVES).hex() == (
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    )


@pytest.mark.parametrize(("index", "size", "want"), CT_INCLUSION)
def test_ct_reference_inclusion(index: int, size: int, want: list[str]) -> None:
    proof = merkle.inclusion_proof(index, CT_LEAVES[:size])
    assert [p.hex() for p in proof] == want
    root = bytes.fromhex(CT_ROOTS[size])
    merkle.verify_inclusion(index, size, CT_LEAVES[index], proof, root)
    with pytest.raises(MerkleError):
        merkle.verify_inclusion(index, size, CT_LEAVES[index], proof, flip(root, 31))


@pytest.mark.parametrize(("old", "new", "want"), CT_CONSISTENCY)
def test_ct_reference_consistency(old: int, new: int, want: list[str]) -> None:
    proof = merkle.consistency_proof(old, new, CT_LEAVES)
    assert [p.hex() for p in proof] == want
    old_root, new_root = bytes.fromhex(CT_ROOTS[old]), bytes.fromhex(CT_ROOTS[new])
    merkle.verify_consistency(old, new, old_root, new_root, proof)
    with pytest.raises(MerkleError):
        merkle.verify_consistency(old, new, flip(old_root), new_root, proof)


# --- every size 0..64 against the transcription ---------------------------------


def test_roots_and_compact_range_match_reference() -> None:
    compact = CompactRange()
    for n in range(MAX + 1):
        assert merkle.root(LEAVES[:n]) == ROOTS[n], n
        assert compact.size == n
        assert compact.root() == ROOTS[n], n
        assert len(compact.nodes) == bin(n).count("1")
        resumed = CompactRange(compact.size, compact.nodes)
        assert resumed.root() == ROOTS[n]
        compact.append(LEAVES[n])


@pytest.mark.parametrize("n", range(1, MAX + 1))
def test_inclusion_every_index(n: int) -> None:
    leaves, root = LEAVES[:n], ROOTS[n]
    for i in range(n):
        proof = merkle.inclusion_proof(i, leaves)
        assert proof == ref_path(i, ENTRIES[:n]), (i, n)
        merkle.verify_inclusion(i, n, leaves[i], proof, root)

        # Tampered twins.
        for j in range(len(proof)):
            bad = [*proof[:j], flip(proof[j], j), *proof[j + 1 :]]
            assert fails(merkle.verify_inclusion, i, n, leaves[i], bad, root)
        assert fails(merkle.verify_inclusion, i, n, flip(leaves[i], 5), proof, root)
        assert fails(merkle.verify_inclusion, i, n, leaves[i], proof, flip(root, 17))
        assert fails(
            merkle.verify_inclusion, i, n, merkle.leaf_hash(ENTRIES[i] + b"x"), proof, root
        )
        if proof:
            assert fails(merkle.verify_inclusion, i, n, leaves[i], proof[:-1], root)
        assert fails(merkle.verify_inclusion, i, n, leaves[i], [*proof, root], root)
        for j in [*range(n), n, n + 1, -1]:
            if j != i:
                assert fails(merkle.verify_inclusion, j, n, leaves[i], proof, root), (i, j, n)

        for other in {i + 1, n - 1, n + 1, 2 * n, n + 7}:
            if other == n or other <= i:
                continue
            # The size enters only through the shape of the path: a proof for
            # the same shape checks out against this root, any other shape fails.
            same_shape = ref_path_sides(i, other) == ref_path_sides(i, n)
            assert fails(merkle.verify_inclusion, i, other, leaves[i], proof, root) != same_shape
            if other <= MAX:
                # Against the root of the claimed size, only that size's own path holds.
                own = ref_path(i, ENTRIES[:other]) == proof
                assert (
                    fails(merkle.verify_inclusion, i, other, leaves[i], proof, ROOTS[other]) != own
                )


@pytest.mark.parametrize("n", range(1, MAX + 1))
def test_consistency_every_old_size(n: int) -> None:
    new_root = ROOTS[n]
    for m in range(n + 1):
        old_root = ROOTS[m]
        proof = merkle.consistency_proof(m, n, LEAVES)
        assert proof == ref_proof(m, ENTRIES[:n]), (m, n)
        merkle.verify_consistency(m, n, old_root, new_root, proof)

        # Tampered twins.
        for j in range(len(proof)):
            bad = [*proof[:j], flip(proof[j], j), *proof[j + 1 :]]
            assert fails(merkle.verify_consistency, m, n, old_root, new_root, bad), (m, n, j)
        assert fails(merkle.verify_consistency, m, n, flip(old_root, 3), new_root, proof)
        if m > 0:
            # Every tree extends the empty one, so from size 0 the new root is unconstrained.
            assert fails(merkle.verify_consistency, m, n, old_root, flip(new_root, 30), proof)
        if proof:
            assert fails(merkle.verify_consistency, m, n, old_root, new_root, proof[:-1])
            assert fails(merkle.verify_consistency, m, n, old_root, new_root, proof[1:])
        assert fails(merkle.verify_consistency, m, n, old_root, new_root, [*proof, new_root])
        if m < n:
            assert fails(merkle.verify_consistency, n, m, new_root, old_root, proof)

        for m2, n2 in {(m - 1, n), (m + 1, n), (m, n - 1), (m, n + 1), (m + 1, n + 1)}:
            if (m2, n2) == (m, n) or not 0 <= m2 <= n2 <= MAX:
                continue
            # With the roots of the claimed sizes, only that pair's own proof holds.
            own = ref_proof(m2, ENTRIES[:n2]) == proof
            assert fails(merkle.verify_consistency, m2, n2, ROOTS[m2], ROOTS[n2], proof) != own, (
                m,
                n,
                m2,
                n2,
            )
            # With the original roots, a proof of the wrong length never holds.
            if len(ref_proof(m2, ENTRIES[:n2])) != len(proof):
                assert fails(merkle.verify_consistency, m2, n2, old_root, new_root, proof)


def test_degenerate_consistency() -> None:
    merkle.verify_consistency(0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [])
    merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, ROOTS[5], [])
    merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[4], [])
    with pytest.raises(MerkleError, match="empty tree"):
        merkle.verify_consistency(0, 5, ROOTS[1], ROOTS[5], [])
    with pytest.raises(MerkleError, match="must be empty"):
        merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, ROOTS[5], [ROOTS[1]])
    with pytest.raises(MerkleError, match="same size"):
        merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[5], [])
    with pytest.raises(MerkleError, match="must be empty"):
        merkle.verify_consistency(4, 4, ROOTS[4], ROOTS[4], [ROOTS[1]])
    with pytest.raises(MerkleError, match="empty consistency proof"):
        merkle.verify_consistency(3, 5, ROOTS[3], ROOTS[5], [])
    with pytest.raises(MerkleError, match="no consistency"):
        merkle.verify_consistency(-1, 5, ROOTS[3], ROOTS[5], [])


def test_malformed_hashes_are_refused() -> None:
    proof = merkle.inclusion_proof(5, LEAVES[:8])
    with pytest.raises(MerkleError, match="leaf hash must be 32 bytes"):
        merkle.verify_inclusion(5, 8, LEAVES[5][:31], proof, ROOTS[8])
    with pytest.raises(MerkleError, match="root must be 32 bytes"):
        merkle.verify_inclusion(5, 8, LEAVES[5], proof, ROOTS[8] + b"\x00")
    with pytest.raises(MerkleError, match="proof node 1 must be 32 bytes"):
        merkle.verify_inclusion(5, 8, LEAVES[5], [proof[0], proof[1][:-1], proof[2]], ROOTS[8])
    with pytest.raises(MerkleError, match="outside a tree of size 8"):
        merkle.verify_inclusion(8, 8, LEAVES[5], proof, ROOTS[8])
    with pytest.raises(MerkleError, match="too few"):
        merkle.verify_inclusion(5, 8, LEAVES[5], proof[:2], ROOTS[8])
    with pytest.raises(MerkleError, match="more than"):
        merkle.verify_inclusion(5, 8, LEAVES[5], [*proof, proof[0]], ROOTS[8])
    cproof = merkle.consistency_proof(6, 8, LEAVES)
    with pytest.raises(MerkleError, match="old root must be 32 bytes"):
        merkle.verify_consistency(6, 8, b"", ROOTS[8], cproof)
    with pytest.raises(MerkleError, match="consistency proof node 0 must be 32 bytes"):
        merkle.verify_consistency(6, 8, ROOTS[6], ROOTS[8], [b"\x00" * 33, *cproof[1:]])


def test_generators_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError):
        merkle.inclusion_proof(8, LEAVES[:8])
    with pytest.raises(ValueError):
        merkle.inclusion_proof(-1, LEAVES[:8])
    with pytest.raises(ValueError):
        merkle.inclusion_proof(0, [])
    with pytest.raises(ValueError):
        merkle.consistency_proof(5, 3, LEAVES)
    with pytest.raises(ValueError):
        merkle.consistency_proof(1, MAX + 2, LEAVES)
    with pytest.raises(ValueError, match="leaf hash 1"):
        merkle.root([LEAVES[0], b"short"])
    with pytest.raises(ValueError):
        CompactRange().append(b"short")
    with pytest.raises(ValueError):
        CompactRange(3, [LEAVES[0]])
    with pytest.raises(ValueError):
        CompactRange(-1, [])


def test_consistency_proof_over_a_longer_log() -> None:
    # The proof depends only on the first new_size leaves.
    assert merkle.consistency_proof(3, 7, LEAVES) == merkle.consistency_proof(3, 7, LEAVES[:7])


def test_compact_range_copy_is_independent() -> None:
    compact = CompactRange()
    compact.extend(LEAVES[:5])
    copy = compact.copy()
    copy.append(LEAVES[5])
    assert (compact.size, compact.root()) == (5, ROOTS[5])
    assert (copy.size, copy.root()) == (6, ROOTS[6])


def test_large_tree_agrees_with_compact_range() -> None:
    n = 100_003
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n)]
    compact = CompactRange()
    compact.extend(leaves)
    root = merkle.root(leaves)
    assert compact.root() == root
    for index in (0, 65_535, 65_536, n - 1):
        merkle.verify_inclusion(
            index, n, leaves[index], merkle.inclusion_proof(index, leaves), root
        )
    old = 77_777
    proof = merkle.consistency_proof(old, n, leaves)
    merkle.verify_consistency(old, n, merkle.root(leaves[:old]), root, proof)


# --- random trees ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(st.binary(max_size=3), min_size=1, max_size=300),
    data=st.data(),
)
def test_random_trees(entries: list[bytes], data: st.DataObject) -> None:
    d = tuple(entries)
    n = len(d)
    leaves = [merkle.leaf_hash(e) for e in d]
    root = merkle.root(leaves)
    assert root == ref_mth(d)

    i = data.draw(st.integers(0, n - 1), label="index")
    proof = merkle.inclusion_proof(i, leaves)
    assert proof == ref_path(i, d)
    merkle.verify_inclusion(i, n, leaves[i], proof, root)
    if proof:
        j = data.draw(st.integers(0, len(proof) - 1), label="node")
        pos = data.draw(st.integers(0, 31), label="byte")
        bad = [*proof[:j], flip(proof[j], pos), *proof[j + 1 :]]
        assert fails(merkle.verify_inclusion, i, n, leaves[i], bad, root)

    m = data.draw(st.integers(0, n), label="old size")
    old_root = ref_mth(d[:m])
    cproof = merkle.consistency_proof(m, n, leaves)
    assert cproof == ref_proof(m, d)
    merkle.verify_consistency(m, n, old_root, root, cproof)
    if cproof:
        j = data.draw(st.integers(0, len(cproof) - 1), label="node")
        bad = [*cproof[:j], flip(cproof[j], 7), *cproof[j + 1 :]]
        assert fails(merkle.verify_consistency, m, n, old_root, root, bad)
    assert fails(merkle.verify_consistency, m, n, flip(old_root), root, cproof)
    if m > 0:
        assert fails(merkle.verify_consistency, m, n, old_root, flip(root), cproof)

    compact = CompactRange()
    compact.extend(leaves[:m])
    assert compact.root() == old_root
    compact.extend(leaves[m:])
    assert compact.root() == root
