"""Declared outputs compared (`runners.checks.outputs`): the digest, the bitwise test that
lets a second run share the first's digest, and the chunked float64 error, each against
the plain computation it replaces."""

from __future__ import annotations

import ctypes
import hashlib

import pytest
import torch

from runners.checks import outputs


def _plain_sha256(t: torch.Tensor) -> str:
    """The digest as receipts have always carried it (a copy of the bytes, then sha256)."""
    c = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{c.dtype}:{tuple(c.shape)}:".encode())
    h.update(ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()) if c.numel() else b"")
    return h.hexdigest()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_digest_is_the_plain_sha256(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    for t in (
        (torch.randn(3, 5, 7, generator=g) * 100).to(dtype),
        torch.randn(4, 6, generator=g).to(dtype).t(),  # not contiguous
        torch.tensor(2.5).to(dtype),
        torch.empty(0, 3, dtype=dtype),
    ):
        assert outputs.sha256_of(outputs.host_copy(t)) == _plain_sha256(t)


def test_bitwise_equal_is_about_bytes() -> None:
    a = torch.tensor([1.0, float("nan"), 0.0])
    assert outputs.bitwise_equal(a, a.clone())  # NaN is the same bytes as itself
    assert not outputs.bitwise_equal(a, torch.tensor([1.0, float("nan"), -0.0]))
    assert not outputs.bitwise_equal(a, a.to(torch.float64))
    assert not outputs.bitwise_equal(a, a.reshape(3, 1))
    assert outputs.bitwise_equal(torch.tensor(3), torch.tensor(3))
    b = a.clone()
    b[0] = torch.nextafter(b[0], torch.tensor(2.0))
    assert not outputs.bitwise_equal(a, b)
    # Where equal, the digest of one is the digest of the other.
    x = torch.randn(8, 8).to(torch.bfloat16)
    assert outputs.bitwise_equal(x, x.clone())
    assert _plain_sha256(x) == _plain_sha256(x.clone())


def test_rel_err_in_chunks_is_the_float64_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(5, 13, 11, generator=g)
    x = (ref + 1e-3 * torch.randn(5, 13, 11, generator=g)).to(torch.bfloat16)
    want = float(torch.linalg.vector_norm(x.double() - ref.double())) / float(
        torch.linalg.vector_norm(ref.double())
    )
    whole = outputs.rel_err(x, ref)
    monkeypatch.setattr(outputs, "_CHUNK", 7)  # 715 elements in 103 chunks
    chunked = outputs.rel_err(x, ref)
    assert whole == pytest.approx(want, rel=1e-12)
    assert chunked == pytest.approx(want, rel=1e-12)
    assert outputs.rel_err(ref, ref) == 0.0
    assert outputs.rel_err(x, ref.reshape(-1)) is None
    assert outputs.rel_err(torch.ones(3), torch.zeros(3)) is None
    assert outputs.rel_err(torch.zeros(3), torch.zeros(3)) == 0.0
    assert outputs.rel_err(torch.tensor([float("inf")]), torch.ones(1)) is None


def _plain_rows(base: torch.Tensor, cand: torch.Tensor) -> dict[str, float]:
    """gradient_verdicts.compare's figures as it computed them before: whole float64
    copies of both tensors."""
    b, c = base.double().flatten(), cand.double().flatten()
    nb, nc = float(torch.linalg.vector_norm(b)), float(torch.linalg.vector_norm(c))
    nd = float(torch.linalg.vector_norm(c - b))
    return {
        "rel_l2": nd / nb,
        "cosine": float(torch.dot(b, c)) / (nb * nc),
        "max_abs": float((c - b).abs().max()),
    }


def test_one_chunked_pass_gives_the_figures_of_whole_float64_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compare() and errors() sum each pair in one chunked float64 pass (`outputs.sums`)
    instead of allocating whole float64 copies (13 GB of temporaries for the 24-view's
    logits on a 32 k vocabulary): the same figures, chunked or not, NaN kept."""
    from runners.checks.gradient_verdicts import compare, errors

    g = torch.Generator().manual_seed(2)
    base = torch.randn(7, 19, generator=g).to(torch.bfloat16)
    cand = (base.float() + 1e-2 * torch.randn(7, 19, generator=g)).to(torch.bfloat16)
    want = _plain_rows(base, cand)
    for chunk in (1 << 24, 5):  # whole, then 133 elements in 27 chunks
        monkeypatch.setattr(outputs, "_CHUNK", chunk)
        rows, only = compare(
            {"t": base, "z": torch.empty(0)}, {"t": cand, "z": torch.empty(0)}, 1.0
        )
        assert only == []
        got = {k: rows[0][k] for k in want}
        assert got == pytest.approx(want, rel=1e-12)
        assert (rows[1]["rel_l2"], rows[1]["max_abs"], rows[1]["cosine"]) == (0.0, 0.0, None)
        err = errors({"t": cand}, {"t": base})["t"]
        assert err == pytest.approx(want["rel_l2"], rel=1e-12)
    nan = base.clone()
    nan[3, 4] = float("nan")
    rows, _ = compare({"t": base}, {"t": nan}, 1.0)
    assert rows[0]["rel_l2"] is None and rows[0]["max_abs"] is None
    assert rows[0]["over_threshold"] is True


def test_a_large_pair_is_summed_on_the_checks_gpu_a_small_one_where_it_lies() -> None:
    cuda = torch.device("cuda", 0)
    assert outputs.device_for(outputs._CHUNK + 1, cuda) == cuda
    assert outputs.device_for(outputs._CHUNK, cuda) is None  # one chunk: not worth a copy
    assert outputs.device_for(outputs._CHUNK + 1, torch.device("cpu")) is None
    assert outputs.device_for(outputs._CHUNK + 1, None) is None
