"""Host work a claim does around its steps, before and after, in one run.

- A garbage collection with torch, transformers and peft imported: ``gc.collect()``
  as it was, against one after `runners.harness.collect.freeze` (the fork server's
  and each claim's, before the claim).
- A 24-view regression's declared logits (24 x 512 x VOCAB, bf16): digests of both
  runs (a copy into Python bytes, then sha256, each run), the base moved to the host,
  and the float64 error against a float32 reference on the host, as it was; against
  `runners.checks.outputs` (the digest read in place, one digest for bitwise-equal
  runs, the error summed in float64 chunks on the reference's device).

    python -m benchmarks.claim_host_work [--vocab 32768] [--repeat 3]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import statistics
import time
from collections.abc import Callable

import torch

from runners.checks import outputs


def _median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _old_digest(t: torch.Tensor) -> str:
    c = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{c.dtype}:{tuple(c.shape)}:".encode())
    h.update(ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()))
    return h.hexdigest()


def _old_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    nr = float(torch.linalg.vector_norm(ref.double()))
    return float(torch.linalg.vector_norm(x.double() - ref.double())) / nr


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)

    import peft  # noqa: F401
    import transformers  # noqa: F401

    print(f"objects tracked by gc: {len(gc.get_objects())}")
    before = _median_s(gc.collect, a.repeat)
    gc.collect()
    gc.freeze()
    after = _median_s(gc.collect, a.repeat)
    gc.unfreeze()
    print(f"{'gc.collect':28s} before {before * 1e3:7.1f} ms  after {after * 1e3:7.1f} ms")

    shape = (24, 512, a.vocab)
    g = torch.Generator().manual_seed(0)
    run1 = torch.randn(shape, generator=g).to(torch.bfloat16)
    run2 = run1.clone()
    ref = run1.float() + 1e-3 * torch.randn(shape, generator=g)
    size = run1.numel() * run1.element_size()
    print(f"logits {shape} bf16: {size / 2**20:.0f} MiB")

    def digests_old() -> None:
        _old_digest(run1), _old_digest(run2)

    def digests_new() -> None:
        base = outputs.host_copy(run1)
        d1 = outputs.sha256_of(base)
        _ = d1 if outputs.bitwise_equal(run1, run2) else outputs.sha256_of(run2)

    assert _old_digest(run1) == outputs.sha256_of(outputs.host_copy(run1))
    for what, old, new in (
        ("digests of two equal runs", digests_old, digests_new),
        (
            "error against the reference",
            lambda: _old_err(run1, ref),
            lambda: outputs.rel_err(run1, ref),
        ),
    ):
        t_old, t_new = _median_s(old, a.repeat), _median_s(new, a.repeat)
        print(f"{what:28s} before {t_old:7.3f} s   after {t_new:7.3f} s  (on {ref.device})")


if __name__ == "__main__":
    main()
