"""PEMs read without cryptography's serialization module (`keys._ed25519_pem`)
give the key cryptography's reader gives; any other form is left to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.evidence.errors import InputError
from ledger.evidence.keys import KeyDir, _ed25519_pem, load_public_pem, public_pem, raw_public


def reference(data: bytes) -> bytes:
    """The raw public key cryptography's own PEM readers find in `data`."""
    try:
        public = serialization.load_pem_public_key(data)
    except ValueError:
        public = serialization.load_pem_private_key(data, password=None).public_key()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def test_public_and_private_pems_as_the_ledger_writes_them(tmp_path: Path) -> None:
    keys = KeyDir(tmp_path)
    for i in range(50):
        local = keys.create(f"k{i}")
        private = keys.file(local.name).read_bytes()
        public = public_pem(local.public)
        for pem in (private, public):
            fast = _ed25519_pem(pem)
            assert fast is not None, pem
            assert raw_public(fast) == reference(pem) == raw_public(local.public)
            assert raw_public(load_public_pem(pem)) == reference(pem)


def variants(pem: bytes) -> list[bytes]:
    """The same key in forms the fast reader leaves to cryptography."""
    return [
        pem.replace(b"\n", b"\r\n"),
        pem.rstrip(b"\n"),
        pem + b"\n",
        b"  " + pem,
        pem.replace(b"KEY-----\n", b"KEY-----\n\n", 1),
    ]


def test_other_forms_of_the_same_key_are_read_by_cryptography() -> None:
    key = Ed25519PrivateKey.generate()
    pem = public_pem(key.public_key())
    for variant in variants(pem):
        assert _ed25519_pem(variant) is None
        try:
            want = reference(variant)
        except ValueError:
            with pytest.raises(InputError):
                load_public_pem(variant)
            continue
        assert raw_public(load_public_pem(variant)) == want


def test_not_an_ed25519_key() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    pem = other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert _ed25519_pem(pem) is None
    with pytest.raises(InputError, match="not an Ed25519 public key"):
        load_public_pem(pem)
    # A PEM whose label and length fit but whose DER is another structure.
    forged = pem[:27] + b"A" * 60 + b"\n-----END PUBLIC KEY-----\n"
    assert _ed25519_pem(forged) is None
