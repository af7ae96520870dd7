"""A forward's declared outputs compared: their digests, their repetition, their error
against a reference.

The outputs of a 24-view forward include its logits: 24 x 512 x 32768 in bf16 is
805 MB for a 32 k vocabulary. Each host copy, digest and double-precision norm of
that size costs a second or more on the host, so: a digest reads the host copy in
place (no second copy into Python bytes), a second run bitwise equal to the first
has the first's digest (the same bytes), and an error against a reference is
summed in float64, in chunks (no full-size float64 temporaries), in one pass for
every figure of a pair (`sums`). Where the check runs on a GPU, a large pair held on
the host is summed there (`device_for`): the host's float64 norm of such logits (402 M
elements) took 4.6 s on a 2-core host, and the base comparison takes several.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from dataclasses import dataclass

import torch

__all__ = ["Sums", "bitwise_equal", "device_for", "host_copy", "rel_err", "sha256_of", "sums"]

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


def device_for(numel: int, on: torch.device | None) -> torch.device | None:
    """Where a pair of ``numel`` elements is summed: on ``on`` (the check's device)
    when it is a GPU and the pair is larger than one chunk, else where the reference
    lies (a small pair costs less than the copy)."""
    if on is not None and on.type == "cuda" and numel > _CHUNK:
        return on
    return None


@dataclass(frozen=True, slots=True)
class Sums:
    """Float64 figures of a pair ``x``, ``ref`` of one shape, summed in one pass."""

    x2: float
    """``||x||²``."""
    ref2: float
    """``||ref||²``."""
    diff2: float
    """``||x - ref||²``."""
    dot: float
    max_abs: float
    """The largest ``|x - ref|`` (0 for empty tensors; NaN propagates)."""


def sums(x: torch.Tensor, ref: torch.Tensor, on: torch.device | None = None) -> Sums:
    """``x`` and ``ref`` (one shape) in float64 chunks on ``device_for(numel, on)`` or
    ``ref``'s device: every figure in one pass, nothing full-size allocated."""
    xf, rf = x.detach().reshape(-1), ref.detach().reshape(-1)
    dev = device_for(rf.numel(), on) or rf.device
    acc = torch.zeros(4, dtype=torch.float64, device=dev)
    top = torch.zeros((), dtype=torch.float64, device=dev)
    for i in range(0, rf.numel(), _CHUNK):
        # To the device at the tensor's own width, widened there: a host chunk widened
        # first is converted by the CPU and crosses at 8 bytes an element (on an H200 the
        # 24-view's comparisons with the base took 10 to 11 s so, 2 to 3 s now).
        r = rf[i : i + _CHUNK].to(dev).to(torch.float64)
        a = xf[i : i + _CHUNK].to(dev).to(torch.float64)
        d = a - r
        acc += torch.stack((a.square().sum(), r.square().sum(), d.square().sum(), a.dot(r)))
        # maximum (not max) so a NaN anywhere stays NaN, as a whole-tensor max says.
        top = torch.maximum(top, d.abs().max())
    x2, ref2, diff2, dot = (float(v) for v in acc.tolist())
    return Sums(x2=x2, ref2=ref2, diff2=diff2, dot=dot, max_abs=float(top))


def rel_err(x: torch.Tensor, ref: torch.Tensor, on: torch.device | None = None) -> float | None:
    """``||x - ref|| / ||ref||`` in float64 (`sums`; None when not finite or the shapes
    differ)."""
    if x.shape != ref.shape:
        return None
    s = sums(x, ref, on)
    nr, nd = math.sqrt(s.ref2), math.sqrt(s.diff2)
    if not (math.isfinite(nr) and math.isfinite(nd)):
        return None
    return nd / nr if nr > 0 else (0.0 if nd == 0 else None)
