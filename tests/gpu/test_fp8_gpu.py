"""FP8 local GEMM and the one-launch split-K on one GPU (world 1): correctness only.

- kernels/gemm_fp8.py: e4m3 A and B, per-tensor and row-wise scales, both B layouts, shapes
  that are not multiples of the block, NaN-poisoned output, against the fp32 product of the
  dequantised operands and against torch._scaled_mm (same operands and scales);
- the one-launch kernels (kernels/gemm_one_launch.py: split-K, the split tail and stream-K, each
  tile summed by its last contributor in the same launch): bf16 split-K with several splits and
  blocks, and FP8 with per-tensor and row scales (applied after the sum), run repeatedly on the
  same counters (they must come back to zero, else the next call's tiles would be summed by the
  wrong program), vs fp32.

    PYTHONPATH=$(tests/gpu/stage_package.sh) python3 -m pytest -q tests/gpu/test_fp8_gpu.py
"""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from syncopate.kernels import gemm_fp8 as fp8_gemm  # noqa: E402
from syncopate.kernels import gemm_fp8_module, gemm_module  # noqa: E402
from syncopate.kernels.configs import GemmConfig  # noqa: E402

E4M3 = torch.float8_e4m3fn
HAS_FP8 = torch.cuda.get_device_capability() >= (8, 9)


def _rel(out, ref):
    if not torch.isfinite(out).all():
        return math.inf
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _fp8_operands(m, n, k, layout, mode, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(E4M3)
    if layout == "nk":
        b = (torch.randn(n, k, device="cuda", generator=gen) * 2).to(E4M3).t()
    else:
        b = (torch.randn(k, n, device="cuda", generator=gen) * 2).to(E4M3)
    if mode == "tensor":
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    else:
        sa = torch.rand(m, 1, device="cuda", generator=gen) + 0.1
        sb = torch.rand(1, n, device="cuda", generator=gen) + 0.1
    return a, b, sa, sb


@pytest.mark.parametrize("block, split", [((128, 256, 3, 8), 2), ((64, 128, 4, 4), 8)])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("shape", [(128, 4096, 8192), (300, 2000, 2048)])
def test_split_k_fixup_matches_reference_every_call(block, split, layout, shape):
    m, n, k = shape
    bm, bn, stages, warps = block
    cfg = GemmConfig(bm, bn, 64, 8, stages, warps, True, 1, 1.0, split_k=split, split_fixup=True)
    gen = torch.Generator(device="cuda").manual_seed(split * 7 + m)
    a = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    if layout == "nk":
        b = torch.randn(n, k, device="cuda", generator=gen, dtype=torch.bfloat16).t()
    else:
        b = torch.randn(k, n, device="cuda", generator=gen, dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        out.fill_(float("nan"))
        gemm_module.gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2
    counters = gemm_module._fixup_counters[(out.device.index, torch.cuda.current_stream().cuda_stream)]
    assert int(counters.abs().sum()) == 0


FP8_CONFIGS = [
    None,  # the model's choice
    GemmConfig(64, 128, 128, 8, 4, 4, True, 1, 1.0),
]


@pytest.mark.skipif(not HAS_FP8, reason="this GPU has no FP8 tensor cores (capability < 8.9)")
@pytest.mark.parametrize("cfg", FP8_CONFIGS, ids=["model", "64x128-pointer-stores"])
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("shape", [(256, 1024, 4096), (1000, 1536, 2048)])
def test_fp8_gemm_matches_reference_and_scaled_mm(cfg, mode, layout, shape):
    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k, layout, mode, seed=m + n + k)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_gemm(a, b, sa, sb, out=out, config=cfg, c_store_pointers=cfg is not None and cfg.block_m == 64)
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)
    assert _rel(out, ref) < 5e-3
    b_col = b if b.stride(0) == 1 else b.t().contiguous().t()
    lib = torch._scaled_mm(a, b_col, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert _rel(out, lib.float()) < 5e-3


@pytest.mark.skipif(not HAS_FP8, reason="this GPU has no FP8 tensor cores (capability < 8.9)")
def test_fp8_model_config_fits_this_device():
    cfg = gemm_fp8_module.select_fp8_config(4096, 8192, 8192, torch.device("cuda"))
    assert cfg.block_k == 128 and cfg.split_k == 1


@pytest.mark.skipif(not HAS_FP8, reason="this GPU has no FP8 tensor cores (capability < 8.9)")
def test_fp8_kn_b_is_read_through_one_kept_k_major_copy():
    """B stored [K, N]: one K-major copy made at the first call and reused; refreshed after an
    in-place write; the in-kernel transpose (k_major_b=False) gives the same result."""
    copies = gemm_fp8_module.k_major_copies
    copies.clear()
    a, b, sa, sb = _fp8_operands(256, 1024, 2048, "kn", "row", seed=4)
    out = fp8_gemm(a, b, sa, sb)
    kept = copies.get(b)
    assert len(copies) == 1 and kept.shape == (1024, 2048)
    fp8_gemm(a, b, sa, sb)
    assert copies.get(b) is kept
    ref = (a.float() @ b.float()) * sa * sb
    assert _rel(out, ref) < 5e-3
    b.copy_((torch.randn(2048, 1024, device="cuda") * 2).to(E4M3))
    ref = (a.float() @ b.float()) * sa * sb
    assert _rel(fp8_gemm(a, b, sa, sb), ref) < 5e-3
    assert _rel(fp8_gemm(a, b, sa, sb, k_major_b=False), ref) < 5e-3
    assert copies.get(b) is not kept


FP8_ONE_LAUNCH = [
    GemmConfig(128, 128, 128, 8, 4, 4, True, 1, 1.0, stream_k=True),
    GemmConfig(128, 64, 128, 8, 6, 4, True, 1, 1.0, stream_k=True),
    GemmConfig(128, 128, 128, 8, 4, 4, True, 1, 1.0, split_k=3, split_fixup=True),
    GemmConfig(128, 128, 128, 8, 4, 4, True, 1, 1.0, split_k=2, split_fixup=True, split_tail=True),
]


@pytest.mark.skipif(not HAS_FP8, reason="this GPU has no FP8 tensor cores (capability < 8.9)")
@pytest.mark.parametrize("cfg", FP8_ONE_LAUNCH, ids=lambda c: c.name)
@pytest.mark.parametrize("mode", ["tensor", "row"])
# 128 x 5120 x 8192: under one wave (every tile shared / split); 1000 x 3000 x 2048: ragged edges,
# 192 tiles of 128x128 (whole waves first, then the rest shared).
@pytest.mark.parametrize("shape", [(128, 5120, 8192), (1000, 3000, 2048)])
def test_fp8_one_launch_kernels_match_reference_every_call(cfg, mode, shape):
    """kernels/gemm_one_launch.py with FP8 scales (applied after the partials are summed):
    stream-K, split-K and the split tail, each summed in the same launch; five calls on the same
    counters, which must come back to zero."""
    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k, "nk", mode, seed=m + n + cfg.block_n)
    ref = (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        out.fill_(float("nan"))
        fp8_gemm(a, b, sa, sb, out=out, config=cfg)
        torch.cuda.synchronize()
        assert _rel(out, ref) < 5e-3
    counters = gemm_module._fixup_counters[(out.device.index, torch.cuda.current_stream().cuda_stream)]
    assert int(counters.abs().sum()) == 0


FP8_WIDE = [
    GemmConfig(128, 128, 128, 8, 4, 8, True, 1, 1.0, flatten=False, block_n2=64),
    GemmConfig(64, 64, 128, 8, 6, 4, True, 1, 1.0, flatten=False, block_n2=32),
    GemmConfig(64, 128, 128, 8, 6, 4, True, 1, 1.0, flatten=False, split_k=3, block_n2=32),
]


@pytest.mark.skipif(not HAS_FP8, reason="this GPU has no FP8 tensor cores (capability < 8.9)")
@pytest.mark.parametrize("cfg", FP8_WIDE, ids=lambda c: c.name)
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("shape", [(128, 4096, 7168), (1000, 3000, 2048)])
def test_fp8_wide_tiles_match_reference(cfg, mode, shape):
    """kernels/gemm_wide.py with FP8 scales: unsplit (scaled in the epilogue) and split three ways
    (scaled after the sum by the reduction)."""
    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k, "nk", mode, seed=m + n + cfg.block_n2)
    ref = (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_gemm(a, b, sa, sb, out=out, config=cfg)
    torch.cuda.synchronize()
    assert _rel(out, ref) < 5e-3
