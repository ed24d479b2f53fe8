"""The local GEMM's schedules on one GPU (world 1): correctness only.

- stream-K (kernels/gemm_one_launch.py:gemm_stream_k_flat_kernel): whole waves of whole tiles,
  the rest's K-steps spread over every program in one pipelined loop, shared tiles summed by the
  last contributor in the same launch; bf16, several blocks, both B layouts, shapes with and
  without whole waves, shapes that are not multiples of the block; five calls on the same
  counters (they must come back to zero); replays of a CUDA graph that captured it;
- the split tail in one launch (gemm_tail_fixup_kernel: whole waves whole, the last wave's tiles
  split over K and summed by their last slice);
- the non-persistent grid (one program per tile or per split-K work item);
- the split tail (whole waves whole, the last wave's tiles split over K) and the model's picks;
against an fp32 reference, outputs NaN-poisoned.

    PYTHONPATH=$(tests/gpu/stage_package.sh) python3 -m pytest -q tests/gpu/test_gemm_gpu.py
"""

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from syncopate.kernels import gemm_module  # noqa: E402
from syncopate.kernels.configs import GemmConfig  # noqa: E402


def _rel(out, ref):
    if not torch.isfinite(out).all():
        return math.inf
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _operands(m, n, k, layout, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)
    if layout == "nk":
        b = torch.randn(n, k, device="cuda", generator=gen, dtype=torch.bfloat16).t()
    else:
        b = torch.randn(k, n, device="cuda", generator=gen, dtype=torch.bfloat16)
    return a, b


STREAM_K_BLOCKS = [(128, 128, 4, 4, 1), (64, 128, 4, 4, 1), (128, 256, 3, 8, 2), (128, 64, 6, 4, 1)]


@pytest.mark.parametrize("block", STREAM_K_BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("layout", ["kn", "nk"])
# 128 x 4096 x 2048: one wave of few tiles, each shared by several programs; 2000 x 3000 x 1000:
# whole waves first (128x128: 16 x 24 = 384 tiles), edges not multiples of the block.
@pytest.mark.parametrize("shape", [(128, 4096, 2048), (2000, 3000, 1000)])
def test_stream_k_matches_reference_every_call(block, layout, shape):
    m, n, k = shape
    bm, bn, stages, warps, split = block
    cfg = GemmConfig(bm, bn, 64, 8, stages, warps, True, split, 1.0, stream_k=True)
    a, b = _operands(m, n, k, layout, seed=m + n + bm)
    ref = a.float() @ b.float()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        out.fill_(float("nan"))
        gemm_module.gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2
    counters = gemm_module._fixup_counters[(out.device.index, torch.cuda.current_stream().cuda_stream)]
    assert int(counters.abs().sum()) == 0


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_non_persistent_grid_matches_reference(split_k, layout):
    m, n, k = 1000, 3000, 2048
    cfg = GemmConfig(64, 128, 64, 8, 4, 4, True, 1, 1.0, split_k=split_k, persistent=False)
    a, b = _operands(m, n, k, layout, seed=split_k)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_module.gemm(a, b, out=out, config=cfg)
    torch.cuda.synchronize()
    assert _rel(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("block", [(128, 256, 3, 8, 2), (128, 128, 4, 4, 1)], ids=["128x256", "128x128"])
@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("layout", ["kn", "nk"])
# 1000 x 5000 x 4096: edges not multiples of the block, tiles past one wave (tail split); 256 x
# 2048 x 1024: under one wave (every tile split).
@pytest.mark.parametrize("shape", [(1000, 5000, 4096), (256, 2048, 1024)])
def test_split_tail_matches_reference(block, split, layout, shape):
    """gemm_split_tail_kernel + split_tail_reduce_kernel: whole waves whole, the last wave's
    tiles split over K and summed by the second launch."""
    m, n, k = shape
    bm, bn, stages, warps, epilogue = block
    cfg = GemmConfig(bm, bn, 64, 8, stages, warps, True, epilogue, 1.0, split_k=split, split_tail=True)
    a, b = _operands(m, n, k, layout, seed=m + split)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_module.gemm(a, b, out=out, config=cfg)
    torch.cuda.synchronize()
    assert _rel(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("shape", [(256, 8192, 8192), (1024, 5120, 8192), (128, 3072, 4096), (4096, 2560, 8192)])
def test_model_choice_matches_reference(shape):
    """The plain gemm()'s own pick (configs.LOCAL_CANDIDATES and the split tail included)."""
    m, n, k = shape
    a, b = _operands(m, n, k, "nk", seed=n)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_module.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert _rel(out, a.float() @ b.float()) < 1e-2


@pytest.mark.parametrize("block", [(128, 256, 3, 8, 2), (128, 128, 6, 4, 1)], ids=["128x256", "128x128s6"])
@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("shape", [(1000, 5000, 4096), (256, 2048, 1024)])
def test_split_tail_in_one_launch_matches_reference_every_call(block, split, layout, shape):
    """gemm_tail_fixup_kernel (split_tail + split_fixup): whole waves whole, the last wave's tiles
    split over K and summed by their last slice in the same launch; five calls, counters zero."""
    m, n, k = shape
    bm, bn, stages, warps, epilogue = block
    cfg = GemmConfig(
        bm, bn, 64, 8, stages, warps, True, epilogue, 1.0, split_k=split, split_tail=True, split_fixup=True
    )
    a, b = _operands(m, n, k, layout, seed=m + split + 1)
    ref = a.float() @ b.float()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        out.fill_(float("nan"))
        gemm_module.gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1e-2
    counters = gemm_module._fixup_counters[(out.device.index, torch.cuda.current_stream().cuda_stream)]
    assert int(counters.abs().sum()) == 0


def test_stream_k_in_a_cuda_graph_matches_reference_every_replay():
    """Captured once, replayed on new inputs: the counters the capture zeroed come back to zero
    after every replay, so each replay's shared tiles are summed by their own last program."""
    m, n, k = 128, 3072, 4096
    cfg = GemmConfig(128, 64, 64, 8, 6, 4, True, 1, 1.0, stream_k=True)
    a, b = _operands(m, n, k, "nk", seed=11)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gemm_module.gemm(a, b, out=out, config=cfg)  # compiles outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            gemm_module.gemm(a, b, out=out, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    for seed in range(3):
        new_a, new_b = _operands(m, n, k, "nk", seed=100 + seed)
        a.copy_(new_a)
        b.copy_(new_b)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel(out, a.float() @ b.float()) < 1e-2


# (BLOCK_M, BLOCK_N, BLOCK_N2, stages, warps): the wide tiles bench/sweep_wide.py offers.
WIDE_BLOCKS = [(128, 128, 64, 4, 8), (128, 128, 32, 5, 8), (64, 128, 64, 6, 4), (64, 64, 32, 6, 4), (128, 64, 32, 6, 4)]


@pytest.mark.parametrize("block", WIDE_BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}+{b[2]}")
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("layout", ["kn", "nk"])
# 512 x 3072 x 4096: whole tiles of every width; 1000 x 3000 x 1000: ragged M and K, N not a
# multiple of any width (the last tile's second block partly or wholly past N).
@pytest.mark.parametrize("shape", [(512, 3072, 4096), (1000, 3000, 1000)])
def test_wide_tiles_match_reference(block, split_k, layout, shape):
    """kernels/gemm_wide.py: tiles BLOCK_M x (BLOCK_N + BLOCK_N2), unsplit (TMA stores) and split
    three ways (fp32 partials, second launch)."""
    m, n, k = shape
    bm, bn, bn2, stages, warps = block
    cfg = GemmConfig(bm, bn, 64, 8, stages, warps, True, 1, 1.0, flatten=False, split_k=split_k, block_n2=bn2)
    a, b = _operands(m, n, k, layout, seed=m + n + bm + bn2)
    ref = a.float() @ b.float()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    gemm_module.gemm(a, b, out=out, config=cfg)
    torch.cuda.synchronize()
    assert _rel(out, ref) < 1e-2
