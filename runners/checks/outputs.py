"""A forward's declared outputs compared: their digests, their repetition, their error
against a reference.

The outputs of a 24-view forward include its logits: 24 x 512 x 32768 in bf16 is
805 MB for a 32 k vocabulary. Each host copy, digest and double-precision norm of
that size costs a second or more on the host, so: a digest reads the host copy in
place (no second copy into Python bytes), a second run bitwise equal to the first
has the first's digest (the same bytes), and an error against a reference is
summed on the reference's device in float64, in chunks (no full-size float64
temporaries).
"""

from __future__ import annotations

import ctypes
import hashlib
import math

import torch

__all__ = ["bitwise_equal", "host_copy", "rel_err", "sha256_of"]

_CHUNK = 1 << 24
"""Elements per float64 chunk of `rel_err` (128 MiB each)."""


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, on the CPU, contiguous (``t`` itself where it already is)."""
    return t.detach().to("cpu").contiguous()


def sha256_of(c: torch.Tensor) -> str:
    """sha256 hex of a CPU tensor's bytes, with its dtype and shape (`host_copy` first)."""
    h = hashlib.sha256(f"{c.dtype}:{tuple(c.shape)}:".encode())
    n = c.numel() * c.element_size()
    if n:
        # The storage read in place through ctypes (no NumPy: the torch wheel does not
        # bring it); ``c`` stays alive for the call.
        h.update(memoryview((ctypes.c_char * n).from_address(c.data_ptr())))
    return h.hexdigest()


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same dtype, shape and bytes (a NaN equals itself, -0.0 differs from 0.0):
    where this holds, the two digests are one."""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.equal(_bytes(a), _bytes(b)))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float | None:
    """``||x - ref|| / ||ref||`` in float64 on ``ref``'s device (None when not finite or
    the shapes differ)."""
    if x.shape != ref.shape:
        return None
    xf, rf = x.detach().reshape(-1), ref.detach().reshape(-1)
    dev = rf.device
    nr2 = torch.zeros((), dtype=torch.float64, device=dev)
    nd2 = torch.zeros((), dtype=torch.float64, device=dev)
    for i in range(0, rf.numel(), _CHUNK):
        r = rf[i : i + _CHUNK].to(dev, torch.float64)
        d = xf[i : i + _CHUNK].to(dev, torch.float64) - r
        nr2 += r.square().sum()
        nd2 += d.square().sum()
    nr, nd = math.sqrt(float(nr2)), math.sqrt(float(nd2))
    if not (math.isfinite(nr) and math.isfinite(nd)):
        return None
    return nd / nr if nr > 0 else (0.0 if nd == 0 else None)
