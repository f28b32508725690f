"""The output layouts of the CUDA FFT shims (ops::cufft_r2c_strides / cufft_c2c_strides, driven through the
fft_layout_probe test program) against torch's meta functions, which record the layout a CUDA plugin reads
the result with. Meta tensors need no GPU (torch's meta functions take a meta tensor as a CUDA one), so every
machine checks what only the GPU machine can run; tests/gpu/test_cuda_ops.py compares the shims' results,
values included, with ATen's CUDA kernels there."""

from __future__ import annotations

import random
import subprocess

import pytest


def _cases(seed: int, count: int):
    """Random ranks, dim subsets and orders (the two-dim (0, 1) prefix and more than three dims take ATen's
    multi-pass path), memory layouts (permuted, with size-1 and size-2 dims), one- and two-sided."""
    rng = random.Random(seed)
    for _ in range(count):
        nd = rng.randint(1, 5)
        sizes = [rng.choice([1, 2, 3, 4, 5, 6, 8]) for _ in range(nd)]
        order = list(range(nd))
        rng.shuffle(order)
        strides = [0] * nd
        step = 1
        for d in reversed(order):  # dense in a permuted order
            strides[d] = step
            step *= sizes[d]
        dims = rng.sample(range(nd), rng.randint(1, nd))
        if nd >= 2 and rng.random() < 0.2:
            dims = [0, 1] + [d for d in dims if d > 1]
        yield rng.choice(["r2c", "c2c"]), rng.random() < 0.7, sizes, strides, dims


@pytest.fixture(scope="module")
def probe(host_build):
    exe = host_build.tests_dir / "fft_layout_probe"
    assert exe.exists(), f"{exe} was not built (runtime/SConscript builds it with the native tests)"
    return exe


def test_cuda_fft_layouts_match_torch_meta_functions(probe, torch):
    cases = list(_cases(46, 400))
    lines = [f"{kind} {int(one)} {len(sz)} {' '.join(map(str, sz))} {' '.join(map(str, st))} {len(dims)} "
             f"{' '.join(map(str, dims))}" for kind, one, sz, st, dims in cases]
    proc = subprocess.run([str(probe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60,
                          check=True)
    got = proc.stdout.splitlines()
    assert len(got) == len(cases), proc.stdout[-2000:]
    bad = []
    for (kind, one, sizes, strides, dims), line in zip(cases, got, strict=True):
        if kind == "r2c":
            x = torch.empty_strided(sizes, strides, dtype=torch.float32, device="meta")
            want = torch.ops.aten._fft_r2c(x, dims, 0, one)
        else:
            x = torch.empty_strided(sizes, strides, dtype=torch.complex64, device="meta")
            want = torch.ops.aten._fft_c2c(x, dims, 0, one)
        ours = tuple(int(v) for v in line.split())
        # a size-1 dim's stride addresses nothing (where strides tie, ATen orders such a dim its own way)
        if [s for s, n in zip(ours, want.shape, strict=True) if n > 1] != \
                [s for s, n in zip(want.stride(), want.shape, strict=True) if n > 1]:
            bad.append(f"{kind} sizes {sizes} strides {strides} dims {dims} onesided {one}: ours {ours}, "
                       f"torch's meta {want.stride()}")
    assert not bad, f"{len(bad)} of {len(cases)} differ:\n" + "\n".join(bad[:20])
