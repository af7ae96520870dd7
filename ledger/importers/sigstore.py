"""A Sigstore bundle's signing certificate, verified up to a trusted root.

The root is given as PEM certificates or as a Sigstore ``trusted_root.json``
(its ``certificateAuthorities[].certChain``). The bundle's leaf certificate
(``verificationMaterial.certificate``, or the first of
``x509CertificateChain``) must chain to one of those roots, through the
bundle's or the root file's intermediates, each certificate valid at the
time the transparency log integrated the entry (else now). The caller then
verifies the DSSE signature with the leaf's key. The log entry's own proofs
are not checked.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from ledger.evidence.errors import InputError

__all__ = ["identity", "leaf", "load_roots"]

_MAX_DEPTH = 5


def _der(raw: Any, where: str) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(base64.b64decode(str(raw), validate=True))
    except (ValueError, binascii.Error) as e:
        raise InputError(f"{where}: a certificate that does not parse: {e}") from None


def load_roots(path: Path) -> list[x509.Certificate]:
    """PEM certificates, or a Sigstore trusted_root.json's certificate authorities."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: {e}") from None
    if data.lstrip().startswith(b"{"):
        try:
            doc = json.loads(data)
            chains = [ca["certChain"]["certificates"] for ca in doc["certificateAuthorities"]]
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not a Sigstore trusted root: {e}") from None
        return [_der(c.get("rawBytes"), str(path)) for chain in chains for c in chain]
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise InputError(f"{path}: no PEM certificate: {e}") from None


def _when(bundle: dict[str, Any]) -> datetime:
    entries = (bundle.get("verificationMaterial") or {}).get("tlogEntries") or []
    for e in entries:
        t = e.get("integratedTime") if isinstance(e, dict) else None
        if isinstance(t, int | str) and str(t).isdigit():
            return datetime.fromtimestamp(int(t), UTC)
    return datetime.now(UTC)


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _valid_at(cert: x509.Certificate, when: datetime) -> bool:
    return cert.not_valid_before_utc <= when <= cert.not_valid_after_utc


def leaf(bundle: dict[str, Any], where: str, roots: Sequence[x509.Certificate]) -> x509.Certificate:
    """The bundle's signing certificate, once its chain to a trusted root holds."""
    material = bundle.get("verificationMaterial") or {}
    if "certificate" in material:
        chain = [_der((material["certificate"] or {}).get("rawBytes"), where)]
    else:
        certs = (material.get("x509CertificateChain") or {}).get("certificates") or []
        chain = [_der((c or {}).get("rawBytes"), where) for c in certs]
    if not chain:
        raise InputError(f"{where}: the Sigstore bundle holds no certificate to verify")
    when = _when(bundle)
    pool = [*chain[1:], *roots]
    current = chain[0]
    for _ in range(_MAX_DEPTH):
        if not _valid_at(current, when):
            raise InputError(
                f"{where}: certificate {current.subject.rfc4514_string()!r} is not valid at "
                f"{when:%Y-%m-%dT%H:%M:%SZ}; nothing written"
            )
        if any(current == r for r in roots):
            return chain[0]
        issuer = next((c for c in pool if c != current and _issued_by(current, c)), None)
        if issuer is None:
            break
        current = issuer
    raise InputError(
        f"{where}: the bundle's certificate does not chain to the trusted root; nothing written"
    )


def identity(cert: x509.Certificate) -> list[str]:
    """Who the certificate names (Fulcio puts the signer in the subject alternative name)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [cert.subject.rfc4514_string()]
    return [str(n.value) for n in san]
