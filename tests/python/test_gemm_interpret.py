"""The local GEMM run by Triton's CPU interpreter on small shapes.

Checks the real kernels (the TMA-descriptor one and the pointer fallback) against a float64
reference on fresh random inputs, with a poisoned output so unwritten elements show, over
shapes that are not multiples of the block, both layouts of B, and a persistent grid smaller
than the tile count (so each program loops over several tiles).
"""

import dataclasses
import os
import sys
from pathlib import Path

import pytest

# The interpreter is chosen when triton is first imported: set it before anything imports it.
os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
numpy = pytest.importorskip("numpy")

import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_REPO_PYTHON = Path(__file__).resolve().parents[2] / "python"
if str(_REPO_PYTHON) not in sys.path:
    sys.path.insert(0, str(_REPO_PYTHON))

# Import the kernels module on its own: the package root may load compiled bindings that a
# pure-Python test does not need.
import importlib  # noqa: E402
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "syncopate_kernels_under_test",
    _REPO_PYTHON / "syncopate" / "kernels" / "__init__.py",
    submodule_search_locations=[str(_REPO_PYTHON / "syncopate" / "kernels")],
)
_kernels = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _kernels
_spec.loader.exec_module(_kernels)
gemm_module = importlib.import_module("syncopate_kernels_under_test.gemm")
one_launch_module = importlib.import_module("syncopate_kernels_under_test.gemm_one_launch")
from syncopate_kernels_under_test.configs import GemmConfig  # noqa: E402

configs_module = importlib.import_module("syncopate_kernels_under_test.configs")


def _bf16_bits_to_float32(data):
    bits = data.view(numpy.uint16).astype(numpy.uint32) << 16
    return bits.view(numpy.float32)


@pytest.fixture(autouse=True)
def _interpreter_fixes(monkeypatch):
    """Two bugs of Triton 3.6's interpreter (not of the kernel), worked around for the test:
    - it turns a scalar into an int with int(1-element array), which NumPy >= 2.4 refuses, so
      every loop with a run-time bound fails: take the element explicitly;
    - tl.dot on bfloat16 multiplies the raw 16-bit patterns as integers: widen them to
      float32 first (exact), as the tensor cores do."""
    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    original_dot = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype == tl.bfloat16 and b.dtype == tl.bfloat16:
            a = interpreter.TensorHandle(_bf16_bits_to_float32(a.data), tl.float32)
            b = interpreter.TensorHandle(_bf16_bits_to_float32(b.data), tl.float32)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)


SMALL = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0)
SMALL_SPLIT = GemmConfig(32, 64, 32, 2, 1, 4, False, 2, 1.0)


def _operands(m, n, k, dtype, b_is_nk, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    if b_is_nk:
        b = torch.randn(n, k, generator=gen).to(dtype).t()  # a Linear weight, viewed as [K, N]
    else:
        b = torch.randn(k, n, generator=gen).to(dtype)
    return a, b


def _rel_error(c, a, b):
    ref = a.double() @ b.double()
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape", [(64, 64, 64), (72, 40, 56), (33, 96, 24), (100, 8, 40)])
@pytest.mark.parametrize("cfg", [SMALL, SMALL_SPLIT], ids=["e1", "e2"])
def test_tma_kernel_matches_reference(dtype, b_is_nk, shape, cfg):
    m, n, k = shape
    a, b = _operands(m, n, k, dtype, b_is_nk, seed=m * 7 + n * 3 + k)
    out = torch.full((m, n), float("nan"), dtype=dtype)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=3)
    assert c.data_ptr() == out.data_ptr()
    assert c.dtype == dtype
    assert not torch.isnan(c).any(), "some output elements were never written"
    assert _rel_error(c, a, b) < 1e-2


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape", [(45, 37, 29), (64, 33, 17), (7, 5, 3)])
def test_unaligned_strides_take_pointer_kernel(b_is_nk, shape):
    m, n, k = shape  # odd N or K: leading strides are not 16-byte multiples, TMA cannot run
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=11 + m)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=SMALL, num_programs=2)
    assert not torch.isnan(c).any()
    assert _rel_error(c, a, b) < 1e-2


def test_pointer_kernel_forced_on_aligned_shape():
    a, b = _operands(96, 64, 80, torch.float16, False, seed=5)
    c = gemm_module.gemm(a, b, config=SMALL, force_pointer_kernel=True, num_programs=4)
    assert _rel_error(c, a, b) < 1e-2


def test_non_contiguous_a_is_handled():
    a_big, b = _operands(64, 48, 128, torch.bfloat16, False, seed=9)
    a = a_big[:, ::2]  # [64, 64] with stride (128, 2): last dim not contiguous
    b = b[:64]
    c = gemm_module.gemm(a, b, config=SMALL, num_programs=4)
    assert _rel_error(c, a, b) < 1e-2


def test_linear_matches_weight_transpose():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 64, generator=gen).to(torch.bfloat16)
    w = torch.randn(48, 64, generator=gen).to(torch.bfloat16)
    c = gemm_module.linear(x, w)
    assert _rel_error(c, x, w.t()) < 1e-2


def test_errors_name_the_problem():
    a = torch.randn(8, 16).to(torch.bfloat16)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm_module.gemm(a, torch.randn(8, 8).to(torch.bfloat16))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        gemm_module.gemm(a.float(), torch.randn(16, 8))
    with pytest.raises(ValueError, match="out must be"):
        gemm_module.gemm(a, torch.randn(16, 8).to(torch.bfloat16), out=torch.empty(8, 9, dtype=torch.bfloat16))


def test_empty_k_gives_zeros():
    a = torch.empty(4, 0, dtype=torch.bfloat16)
    b = torch.empty(0, 6, dtype=torch.bfloat16)
    out = torch.full((4, 6), float("nan"), dtype=torch.bfloat16)
    assert torch.equal(gemm_module.gemm(a, b, out=out), torch.zeros(4, 6, dtype=torch.bfloat16))


@pytest.mark.parametrize("b_is_nk", [False, True])
def test_pointer_store_epilogue_matches_reference(b_is_nk):
    """The epilogue a fused producer uses (plain stores, complete before a notify)."""
    a, b = _operands(72, 40, 56, torch.bfloat16, b_is_nk, seed=21)
    out = torch.full((72, 40), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=SMALL, num_programs=3, c_store_pointers=True)
    assert not torch.isnan(c).any()
    assert _rel_error(c, a, b) < 1e-2


def test_annotations_follow_the_annotation_language():
    """The transformer reads these comments: each kernel has one tile block, one consume of A
    before its K loop (a `for`, or the call of the shared K loop helper `tma_k_loop`, whose
    reads the transformer follows) and one produce of C, naming kernel parameters
    (docs/ANNOTATIONS.md)."""
    source = (_REPO_PYTHON / "syncopate" / "kernels" / "gemm.py").read_text().splitlines()
    tiles = [i for i, line in enumerate(source) if line.strip().startswith("# @sy.tile(")]
    ends = [i for i, line in enumerate(source) if line.strip() == "# @sy.end"]
    consumes = [i for i, line in enumerate(source) if line.strip() == "# @sy.consume(a_ptr, m=pid_m)"]
    produces = [i for i, line in enumerate(source) if line.strip() == "# @sy.produce(c_ptr, m=pid_m, n=pid_n)"]
    assert len(tiles) == len(ends) == len(consumes) == len(produces) == 2
    for tile, end, consume, produce in zip(tiles, ends, consumes, produces):
        assert tile < end < consume < produce
        assert source[consume + 1].strip().startswith(("for ", "acc = tma_k_loop("))
        # One simple statement after produce: the notify goes right after it.
        assert not source[produce + 1].strip().startswith(("if ", "for ", "while ", "with "))


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape", [(40, 48, 160), (64, 32, 96)])
def test_split_k_matches_reference(split_k, b_is_nk, shape):
    m, n, k = shape  # K=160 in 32-blocks: 5 K-steps, split 2 or 3 ways unevenly
    cfg = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0, split_k=split_k)
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=split_k * 100 + m)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=5)
    assert not torch.isnan(c).any()
    assert _rel_error(c, a, b) < 1e-2


_kernel_configs = importlib.import_module("syncopate_kernels_under_test.configs")
_SMEM_H100 = 232448 - 1024


def test_model_picks_the_big_block_when_the_chip_is_full():
    cfg = _kernel_configs.choose_config(8192, 8192, 8192, 132, 2, _SMEM_H100)
    assert (cfg.block_m, cfg.block_n, cfg.split_k) == (128, 256, 1)


def test_model_splits_k_when_tiles_cannot_fill_the_chip():
    # 128 x 8192 x 5120: 40 tiles of 128x128, 160 of 64x64 (a wave and a fifth) with K = 8192.
    cfg = _kernel_configs.choose_config(128, 5120, 8192, 132, 2, _SMEM_H100)
    assert cfg.split_k > 1
    no_split = _kernel_configs.choose_config(128, 5120, 8192, 132, 2, _SMEM_H100, allow_split_k=False)
    assert no_split.split_k == 1


def test_model_reads_the_multiprocessor_count():
    # 4096x1536 in 128x256 blocks is 192 tiles: 2 waves on 132 SMs (the second 45% full), one
    # wave on 192 SMs. The smaller block wins only where the waves quantise badly.
    on_132 = _kernel_configs.choose_config(4096, 1536, 4096, 132, 2, _SMEM_H100)
    on_192 = _kernel_configs.choose_config(4096, 1536, 4096, 192, 2, _SMEM_H100)
    assert (on_192.block_m, on_192.block_n) == (128, 256)
    assert (on_132.block_m, on_132.block_n) != (128, 256)


def test_model_respects_shared_memory():
    cfg = _kernel_configs.choose_config(8192, 8192, 8192, 132, 2, 120 * 1024)
    assert cfg.shared_memory_bytes(2) <= 120 * 1024
    with pytest.raises(ValueError, match="no GEMM config fits"):
        _kernel_configs.choose_config(8192, 8192, 8192, 132, 2, 1024)
    with pytest.raises(ValueError, match="shape must be positive"):
        _kernel_configs.choose_config(0, 8, 8, 132, 2, _SMEM_H100)


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape,block_m", [((40, 48, 160), 32), ((64, 32, 96), 32), ((72, 40, 128), 64)])
def test_split_k_fixup_matches_reference_and_leaves_counters_zero(split_k, b_is_nk, shape, block_m):
    """The one-launch split-K: the last program of each tile sums the slices (BLOCK_M 64: in two
    passes of 32 rows); run twice on the same counters (each run must leave them at zero)."""
    m, n, k = shape
    cfg = GemmConfig(block_m, 32, 32, 2, 1, 4, False, 1, 1.0, split_k=split_k, split_fixup=True)
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=split_k * 10 + m)
    tiles = -(-m // block_m) * -(-n // 32)
    counters = torch.zeros(tiles, dtype=torch.int32)
    original = gemm_module._counters
    gemm_module._counters = lambda device, count: counters
    try:
        for _ in range(2):
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
            c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=5)
            assert not torch.isnan(c).any()
            assert _rel_error(c, a, b) < 1e-2
            assert int(counters.abs().sum()) == 0
    finally:
        gemm_module._counters = original


def test_model_offers_fixup_variants_only_when_asked():
    plain = _kernel_configs.candidate_configs(8192)
    with_fixup = _kernel_configs.candidate_configs(8192, fixup=True)
    assert not any(c.split_fixup for c in plain)
    assert {c.name for c in with_fixup if c.split_fixup} == {c.name + "f" for c in plain if c.split_k > 1}
    cfg = _kernel_configs.choose_config(128, 4096, 8192, 132, 2, _SMEM_H100, fixup=True)
    assert cfg.split_k > 1 and cfg.split_fixup  # cheaper per MB than the two-launch split


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize(
    "shape,num_programs",
    [
        ((40, 48, 160), 5),  # 4 tiles x 5 K-steps over 5 programs: every tile shared
        ((64, 96, 96), 4),  # 6 tiles < two waves: all stream-K, 4.5 K-steps per program
        ((128, 96, 64), 4),  # 12 tiles over 4 programs: 6 K-steps each, some tiles whole
        ((32, 32, 64), 7),  # 1 tile of 2 K-steps over 7 programs: five programs get nothing
    ],
)
def test_stream_k_matches_reference_and_leaves_counters_zero(b_is_nk, shape, num_programs):
    """Stream-K: whole waves of whole tiles, the rest's K-steps split evenly over the programs
    (tiles shared by 2-3 programs, summed by the last to finish); twice on the same counters."""
    m, n, k = shape
    cfg = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0, stream_k=True)
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=m + n + k)
    tiles = -(-m // 32) * -(-n // 32)
    counters = torch.zeros(tiles, dtype=torch.int32)
    original = gemm_module._counters
    gemm_module._counters = lambda device, count: counters
    try:
        for _ in range(2):
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
            c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=num_programs)
            assert not torch.isnan(c).any()
            assert _rel_error(c, a, b) < 1e-2
            assert int(counters.abs().sum()) == 0
    finally:
        gemm_module._counters = original


def test_stream_k_slots_cover_the_most_programs_a_tile_can_span():
    # 4 tiles x 5 K-steps over 5 programs: 4 K-steps each, a tile spans at most 3 programs
    # (slots rounded up to a power of two).
    assert one_launch_module.stream_k_slots(4, 5, 5) == 4
    assert one_launch_module.stream_k_slots(32, 112, 132) == 8  # 27 K-steps each: up to 6 programs
    assert one_launch_module.stream_k_slots(48, 64, 132) == 4  # 23 K-steps each: up to 4 programs
    assert one_launch_module.stream_k_slots(1, 2, 7) == 4  # 1 tile of 2 K-steps on 7: up to 3


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("cfg", [SMALL, SMALL_SPLIT], ids=["e1", "e2"])
def test_host_descriptor_kernels_match_reference(b_is_nk, split_k, cfg):
    """The kernels a GPU runs by default: descriptors made on the host (unsplit and split-K)."""
    m, n, k = 72, 64, 160
    cfg = dataclasses.replace(cfg, split_k=split_k)
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=split_k + 40)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=3, host_descriptors=True)
    assert not torch.isnan(c).any()
    assert _rel_error(c, a, b) < 1e-2


def test_model_fills_one_wave_with_narrow_blocks_on_decode_rows():
    """M = 128 (decode): 128x128 tiles leave the chip under a wave; the narrow blocks fill it
    without split-K partials where K is short, and split K where it is long (nvidia-h200
    2026-11-25: 64x64x128 12.6 us vs 14.6 us for 64x128 split 2 on 128 x 2048 x 4096)."""
    pick = _kernel_configs.choose_config(128, 4096, 2048, 132, 2, _SMEM_H100)
    assert (pick.block_m, pick.block_n, pick.block_k, pick.split_k) == (64, 64, 128, 1)
    pick = _kernel_configs.choose_config(128, 4096, 7168, 132, 2, _SMEM_H100)
    assert (pick.block_m, pick.block_n, pick.num_stages, pick.split_k) == (128, 64, 6, 2)
    pick = _kernel_configs.choose_config(128, 5120, 8192, 132, 2, _SMEM_H100)
    assert (pick.block_m, pick.block_n, pick.split_k) == (128, 128, 3)


def test_model_keeps_wide_blocks_where_tiles_fill_the_chip():
    for m, n, k, block in [
        (8192, 8192, 8192, (128, 256)),
        (1024, 8192, 2048, (128, 256)),  # 256 tiles of 128x256: two waves
        (2048, 3584, 2048, (128, 256)),
        (256, 8192, 8192, (128, 128)),  # 128 tiles of 128x128: one wave
        (512, 3072, 4096, (128, 128)),
    ]:
        pick = _kernel_configs.choose_config(m, n, k, 132, 2, _SMEM_H100)
        assert (pick.block_m, pick.block_n, pick.split_k) == (*block, 1), (m, n, k, pick.name)


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize(
    "shape, programs, split",
    [
        ((96, 96, 128), 4, 2),  # 9 tiles on 4 programs: 8 whole, 1 tile in 2 slices
        ((70, 100, 160), 5, 3),  # 12 tiles (ragged edges) on 5: 10 whole, 2 tiles in 3 slices
        ((64, 64, 96), 4, 2),  # 4 tiles on 4: a whole wave, nothing split
        ((32, 64, 128), 4, 2),  # 2 tiles on 4: under one wave, every tile split
    ],
)
def test_split_tail_matches_reference(b_is_nk, shape, programs, split):
    """gemm_split_tail_kernel + split_tail_reduce_kernel: whole tiles for the whole waves, the
    last partial wave's tiles split over K and summed by the second kernel."""
    m, n, k = shape
    a, b = _operands(m, n, k, torch.float16, b_is_nk, seed=m + n + k + split)
    cfg = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0, split_k=split, split_tail=True)
    out = torch.full((m, n), float("nan"), dtype=torch.float16)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=programs)
    assert not torch.isnan(c).any(), "some output elements were never written"
    assert _rel_error(c, a, b) < 1e-2


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize(
    "shape,programs,split",
    [
        ((70, 100, 160), 5, 3),  # 12 tiles (ragged edges) on 5: 10 whole, 2 tiles in 3 slices
        ((64, 64, 96), 4, 2),  # 4 tiles on 4: a whole wave, nothing split
        ((32, 64, 128), 4, 2),  # 2 tiles on 4: under one wave, every tile split
    ],
)
def test_split_tail_in_one_launch_matches_reference_and_leaves_counters_zero(b_is_nk, shape, programs, split):
    """gemm_tail_fixup_kernel with whole waves whole (split_tail + split_fixup): the tail tiles'
    slices summed by the last slice to finish, in the same launch; twice on the same counters."""
    m, n, k = shape
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=m + n + k + split + 1)
    cfg = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0, split_k=split, split_tail=True, split_fixup=True)
    counters = torch.zeros(-(-m // 32) * -(-n // 32), dtype=torch.int32)
    original = gemm_module._counters
    gemm_module._counters = lambda device, count: counters
    try:
        for _ in range(2):
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
            c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=programs)
            assert not torch.isnan(c).any(), "some output elements were never written"
            assert _rel_error(c, a, b) < 1e-2
            assert int(counters.abs().sum()) == 0
    finally:
        gemm_module._counters = original


def test_tail_fixup_split_keeps_whole_waves_only_for_the_split_tail():
    assert one_launch_module.tail_fixup_split(160, 132, True) == 132
    assert one_launch_module.tail_fixup_split(264, 132, True) == 264
    assert one_launch_module.tail_fixup_split(96, 132, True) == 0
    assert one_launch_module.tail_fixup_split(160, 132, False) == 0  # plain split-K: every tile split


def test_split_tail_work_keeps_whole_waves():
    assert gemm_module.split_tail_work(160, 132) == 132
    assert gemm_module.split_tail_work(264, 132) == 264  # two whole waves: nothing to split
    assert gemm_module.split_tail_work(96, 132) == 0


def test_local_model_takes_the_blocks_fitted_to_the_small_m_sweep():
    """The plain local GEMM's picks (local=True) on the rows of the nvidia-h200 sweep of
    2026-11-25 (bench/results/gemm18-nvidia-h200-2026-11-25/): the measured best of each."""

    def pick(m, n, k, wide=True):
        c = _kernel_configs.choose_config(m, n, k, 132, 2, _SMEM_H100, local=True, wide=wide)
        return (c.block_m, c.block_n, c.block_k, c.num_stages, c.split_k, c.split_tail)

    # 128x128 tiles about one wave: six stages (4-10% faster than four). (Where a wide tile fills
    # the wave better it takes the wide tile, test_local_model_takes_wide_tiles_...; wide=False
    # is the pick of a call that cannot run gemm_wide.)
    assert pick(256, 8192, 8192) == (128, 128, 64, 6, 1, False)
    assert pick(512, 3072, 4096, wide=False) == (128, 128, 64, 6, 1, False)
    # 1.2 waves of tiles: whole tiles for the first wave, the 28 tail tiles split in 4.
    assert pick(1024, 5120, 8192) == (128, 256, 64, 3, 4, True)
    # ... and 512 x 5120 x 8192's 28 tail tiles (0.21 of a wave): 128x128 with six stages, split 4
    # in one launch (the nvidia-h100-x1 sweep of the one-launch kernels, 2026-11-25 15:00).
    assert pick(512, 5120, 8192) == (128, 128, 64, 6, 4, True)
    # Decode, short K: 128x64 split 2 (one wave of 96 items).
    assert pick(128, 3072, 4096, wide=False) == (128, 64, 64, 6, 2, False)
    # Whole waves of 128x256 stay unsplit; many waves never take the split tail.
    assert pick(1024, 8192, 2048) == (128, 256, 64, 3, 1, False)
    assert pick(8192, 8192, 8192) == (128, 256, 64, 3, 1, False)


def test_local_model_takes_the_one_launch_split_tail_only_for_a_small_last_wave():
    """configs.ONE_LAUNCH_SPLIT_TAIL: the 128x128 s6 split tail in one launch is the pick only
    where there is a whole wave and the last partial wave holds <= a quarter of a wave (the rows
    of the one-launch sweep where it won); elsewhere the picks of the afternoon's rule stay."""

    def pick(m, n, k, wide=True):
        return _kernel_configs.choose_config(m, n, k, 132, 2, _SMEM_H100, local=True, wide=wide)

    won = pick(512, 5120, 8192)
    assert won.split_fixup and won.split_tail and won.num_stages == 6 and won.split_k == 4
    # 60 tail tiles of 128x128 (0.45 of a wave): 128x256 unsplit, as measured best (without the
    # wide tiles, which take this row since 2026-12-03).
    assert pick(1024, 3072, 4096, wide=False).name == "128x256x64_s3_w8_g8_ws_e2"
    # 56 tail tiles: 128x256's two-launch split tail (a tie with the one-launch one).
    assert pick(1024, 5120, 8192).name == "128x256x64_s3_w8_g8_ws_e2_t4"
    # No whole wave (M = 128): the two-launch split and the unsplit narrow blocks stay.
    assert pick(128, 4096, 7168).name == "128x64x64_s6_w4_g8_ws_e1_k2"
    assert pick(128, 3072, 4096, wide=False).name == "128x64x64_s6_w4_g8_ws_e1_k2"
    assert pick(128, 8192, 4096).name == "128x64x64_s6_w4_g8_ws_e1"
    tail = dataclasses.replace(_kernel_configs.LOCAL_CANDIDATES[0], split_k=2, split_tail=True, split_fixup=True)
    cost = _kernel_configs.estimated_cost
    assert cost(tail, 512, 5120, 8192, 132) < float("inf")  # 160 tiles: 28 past the wave
    assert cost(tail, 512, 4096, 8192, 132) == float("inf")  # 128 tiles: no whole wave
    assert cost(tail, 1024, 3072, 4096, 132) == float("inf")  # 192 tiles: 60 past the wave
    # The one-launch variants are the local GEMM's only: a fused caller never gets them.
    assert not _kernel_configs.choose_config(512, 5120, 8192, 132, 2, _SMEM_H100).split_fixup


def test_fp8_picks_are_unsplit_while_the_fp8_one_launch_rule_is_off():
    """configs.FP8_LOCAL_IN_MODEL is off (the one-launch splits lost on the FP8 rows): where no wide
    tile wins, the plain gemm_fp8 call's pick is the fused FP8 ops' unsplit pick, BLOCK_K doubled
    (the wide picks: test_fp8_model_takes_wide_tiles_...)."""
    assert not _kernel_configs.FP8_LOCAL_IN_MODEL
    for m, n, k in [(128, 4096, 2048), (1024, 3072, 4096), (256, 8192, 2048), (4096, 8192, 8192)]:
        local = _kernel_configs.choose_fp8_config(m, n, k, 132, _SMEM_H100, local=True)
        fused = _kernel_configs.choose_fp8_config(m, n, k, 132, _SMEM_H100)
        assert local == fused and local.split_k == 1 and not local.stream_k and local.block_k == 128


def test_fused_callers_never_get_local_blocks_or_the_split_tail():
    local_names = {c.name for c in _kernel_configs.LOCAL_CANDIDATES}
    for m, n, k in [(256, 8192, 8192), (1024, 5120, 8192), (512, 3072, 4096), (4096, 2560, 8192)]:
        for split in (True, False):
            c = _kernel_configs.choose_config(m, n, k, 132, 2, _SMEM_H100, allow_split_k=split)
            assert c.name not in local_names and not c.split_tail, (m, n, k, c.name)
    tail = GemmConfig(128, 256, 64, 8, 3, 8, True, 2, 1.0, split_k=2, split_tail=True)
    assert _kernel_configs.estimated_cost(tail, 8192, 8192, 8192, 132) == float("inf")  # 15.5 waves
    assert _kernel_configs.estimated_cost(tail, 1024, 5120, 8192, 132) < float("inf")


@pytest.mark.parametrize("split_k", [1, 2, 3])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape", [(40, 104, 160), (33, 48, 72)])
def test_wide_tiles_match_reference(split_k, b_is_nk, shape):
    """kernels/gemm_wide.py: tiles 32 x (32 + 16) columns; N = 104 leaves the last tile's second
    block wholly past N, N = 48 is one tile column; M = 33 a partial tile row; split 2-3 ways
    over 5 (or 3) K-steps, unevenly."""
    m, n, k = shape
    cfg = GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0, flatten=False, split_k=split_k, block_n2=16)
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=split_k * 10 + m)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=3)
    assert not torch.isnan(c).any(), "some output elements were never written"
    assert _rel_error(c, a, b) < 1e-2


def test_wide_config_counts_both_blocks():
    """A wide tile's width, name, shared memory and cost all count its second block."""
    wide = GemmConfig(128, 128, 64, 8, 4, 8, True, 1, 1.0, flatten=False, block_n2=64)
    assert wide.width == 192
    assert wide.name.startswith("128x128+64x64_")
    assert wide.shared_memory_bytes(2) == 4 * (128 + 192) * 64 * 2 + 128 * 192 * 2
    # 512 x 3072: 4 x 16 = 64 tiles of 128 x 192 (one wave) vs 4 x 24 = 96 of 128 x 128.
    narrow = dataclasses.replace(wide, block_n2=0)
    assert configs_module.estimated_cost(wide, 512, 3072, 4096, 132) == pytest.approx(
        configs_module.estimated_cost(narrow, 512, 3072, 4096, 132) * 1.5
    )


def test_wide_tiles_are_offered_only_to_calls_that_can_run_them(monkeypatch):
    """gemm_wide needs TMA descriptors for A, B and C and stores C through them: `gemm` asks the
    model for a wide tile only then (not with c_store_pointers, not for the pointer fallback)."""
    wide = GemmConfig(64, 128, 64, 8, 6, 4, True, 1, 0.82, flatten=False, block_n2=64)
    narrow = GemmConfig(128, 128, 64, 8, 6, 4, True, 1, 0.97)
    # 512 x 3072: 128 tiles of 64x192 (one wave) vs 96 of 128x128; wide=False drops the wide one.
    pick = _kernel_configs.choose_config
    assert pick(512, 3072, 4096, 132, 2, _SMEM_H100, candidates=(wide, narrow)) == wide
    assert pick(512, 3072, 4096, 132, 2, _SMEM_H100, candidates=(wide, narrow), wide=False) == narrow
    asked = []

    def select_config(*args, **kwargs):
        asked.append(kwargs["wide"])
        return SMALL

    monkeypatch.setattr(gemm_module, "select_config", select_config)
    a, b = _operands(64, 64, 64, torch.bfloat16, True, seed=5)
    gemm_module.gemm(a, b)
    gemm_module.gemm(a, b, c_store_pointers=True)
    gemm_module.gemm(a[:, :60], b[:60], force_pointer_kernel=True)
    assert asked == [True, False, False]


def test_local_model_takes_wide_tiles_where_they_fill_the_wave():
    """configs.WIDE_IN_MODEL: the 64-row wide tiles (widths 192 / 160 / 96) where their tile count,
    times the split, fills about one wave of the 132 multiprocessors and the power-of-two tiles
    do not; measured on nvidia-h200 (2026-12-03, bench/sweep_wide.py, time / cuBLAS, [N, K] B)."""

    def pick(m, n, k, sms=132):
        return _kernel_configs.choose_config(m, n, k, sms, 2, _SMEM_H100, local=True).name

    # 128 tiles of 64x192 fill 0.97 of a wave where 96 of 128x128 fill 0.73: 1.064 vs 1.199.
    assert pick(512, 3072, 4096) == "64x128+64x64_s6_w4_g8_ws_e1_nf"
    # 256 tiles of 64x192 are two waves at 0.97; 96 of 128x256 one at 0.73: 1.085 vs 1.186.
    assert pick(1024, 3072, 4096) == "64x128+64x64_s6_w4_g8_ws_e1_nf"
    # Decode: 64 tiles of 64x160 in 2 slices, 128 items (0.97 of a wave), vs 40 tiles of 128x128
    # in 3 (120): 1.104 vs 1.147; 40 tiles of 64x160 in 3 slices (120 items): 1.115 vs 1.151.
    assert pick(128, 5120, 8192) == "64x128+32x64_s6_w4_g8_ws_e1_nf_k2"
    assert pick(128, 3072, 4096) == "64x128+32x64_s6_w4_g8_ws_e1_nf_k3"
    # Where the wide tiles lost, the old picks stay:
    # 512 tiles of 64x160 (3.9 waves): every tile after a program's first refills the unflattened
    # kernel's pipeline (UNFLATTENED_TILE_STEPS): 1.335 vs 1.129 for 128x256's split tail.
    assert pick(1024, 5120, 8192) == "128x256x64_s3_w8_g8_ws_e2_t4"
    # 256 tiles of 64x160 (1.94 waves): 1.226 vs 1.156 for the one-launch split tail.
    assert pick(512, 5120, 8192) == "128x128x64_s6_w4_g8_ws_e1_t4f"
    # 44 tiles of 64x192 in 3 slices fill the wave exactly, but three slices of fp32 partials cost
    # more than 128x64's two: 1.083 vs 1.054. And short-K decode keeps 64x64x128 (1.291 vs 1.092).
    assert pick(128, 4096, 7168) == "128x64x64_s6_w4_g8_ws_e1_k2"
    assert pick(128, 4096, 2048) == "64x64x128_s4_w4_g8_ws_e1"
    # Many waves: the big blocks (64x192 at 7 waves: 1.274 vs 1.047).
    assert pick(4096, 2560, 8192) == "128x128x64_s6_w4_g8_ws_e1"
    assert pick(8192, 8192, 8192) == "128x256x64_s3_w8_g8_ws_e2"
    # The wave is read off the device: on 114 multiprocessors 128 tiles of 64x192 are 1.12 waves,
    # and 128x128's 96 tiles (0.84 of a wave) stay.
    assert pick(512, 3072, 4096, sms=114) == "128x128x64_s6_w4_g8_ws_e1"
    # The fused ops (no local) never get a wide tile: gemm_wide is not annotated.
    for m, n, k in [(512, 3072, 4096), (1024, 3072, 4096), (128, 5120, 8192), (128, 3072, 4096)]:
        for split in (True, False):
            assert not _kernel_configs.choose_config(m, n, k, 132, 2, _SMEM_H100, allow_split_k=split).block_n2


def test_unflattened_tiles_pay_a_pipeline_fill_per_extra_wave():
    """configs.UNFLATTENED_TILE_STEPS: a program of the wide kernel (tile loop not flattened) pays
    it for each tile after its first; with one tile per program (one wave) nothing changes."""
    wide = _kernel_configs.WIDE_CANDIDATES[1]  # 64 x 160
    cost = _kernel_configs.estimated_cost
    area = 64 * 160 / (128 * 256)
    one_wave = (4096 // 64 + _kernel_configs.TILE_FIXED_STEPS) * area / wide.efficiency
    assert cost(wide, 512, 2560, 4096, 132) == pytest.approx(one_wave)  # 128 tiles
    extra = _kernel_configs.UNFLATTENED_TILE_STEPS * area / wide.efficiency
    assert cost(wide, 1024, 5120, 4096, 132) == pytest.approx(4 * one_wave + 3 * extra)  # 512 tiles
    flat = dataclasses.replace(wide, flatten=True)
    assert cost(flat, 1024, 5120, 4096, 132) == pytest.approx(4 * one_wave)


def test_fp8_model_takes_wide_tiles_where_they_fill_the_wave():
    """configs.WIDE_FP8_IN_MODEL: the plain gemm_fp8 call takes the wide tiles (unsplit, or split
    in two launches with the scales applied by the reduction) with their FP8 efficiencies; the
    same nvidia-h200 sweep, time / torch._scaled_mm with per-tensor scales."""

    def pick(m, n, k):
        return _kernel_configs.choose_fp8_config(m, n, k, 132, _SMEM_H100, local=True).name

    # 44 tiles of 64x192 in 3 slices (132 items, one whole wave) vs 128 tiles of 64x64 each over
    # all of K: 1.105 vs 1.477.
    assert pick(128, 4096, 7168) == "64x128+64x128_s6_w4_g8_ws_e1_nf_k3"
    # 64 tiles of 64x96 in 2 slices (128 items): 1.152 vs 1.339.
    assert pick(128, 3072, 4096) == "64x64+32x128_s6_w4_g8_ws_e1_nf_k2"
    # 128 tiles of 64x192 (0.97 of a wave) vs 96 of 128x128: 1.081 vs 1.183.
    assert pick(512, 3072, 4096) == "64x128+64x128_s6_w4_g8_ws_e1_nf"
    # 256 tiles of 64x160 (1.94 waves) vs 80 of 128x256 (0.61): 1.223 vs 1.291.
    assert pick(512, 5120, 8192) == "64x128+32x128_s6_w4_g8_ws_e1_nf"
    # 64 tiles of 64x160 in 2 slices vs 80 of 128x64 unsplit: 1.168 vs 1.212.
    assert pick(128, 5120, 8192) == "64x128+32x128_s6_w4_g8_ws_e1_nf_k2"
    # FP8 has its own, lower efficiencies for 64x192 / 64x160 (an FP8 K-step moves the bf16
    # step's bytes in about half the MMA time): at 1024 x 3072 x 4096 bf16 takes 64x192 (8.5%
    # faster than 128x256), FP8 keeps 128x256 (a tie per tensor, 2.7% faster per row).
    assert pick(1024, 3072, 4096) == "128x256x128_s3_w8_g8_ws_e2"
    assert _kernel_configs.choose_config(1024, 3072, 4096, 132, 2, _SMEM_H100, local=True).block_n2 == 64
    # 3.9 waves of 64x160: 128x128 (1.146 vs 1.250); 128 x 4096 x 2048 keeps 64x64x128.
    assert pick(1024, 5120, 8192) == "128x128x128_s4_w4_g8_ws_e1"
    assert pick(128, 4096, 2048) == "64x64x128_s4_w4_g8_ws_e1"
    # The fused FP8 ops (no local) never get one.
    for m, n, k in [(128, 4096, 7168), (512, 3072, 4096), (512, 5120, 8192)]:
        assert not _kernel_configs.choose_fp8_config(m, n, k, 132, _SMEM_H100).block_n2


# Every wide config the model can pick (configs.wide_configs: WIDE_CANDIDATES x split 1-4), with
# its real blocks (the interpreter ignores stages, warps and warp specialisation).
MODEL_WIDE = [c for c in _kernel_configs.wide_configs(8192) if c.split_k <= 4]


@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("cfg", MODEL_WIDE, ids=lambda c: c.name)
def test_model_wide_configs_match_reference(cfg, b_is_nk):
    """The model's own wide tiles through `gemm`: two tile rows (the second 8 rows deep), two tile
    columns, the last one's first block partly and its second block wholly past N (even splits)
    or its second block partly past N (odd splits); K of 3.5 (or 5) K-steps split 1-4 ways; a
    grid of 3 persistent programs."""
    assert cfg.block_n2 and not cfg.flatten
    if cfg.split_k % 2 == 0:
        m, n, k = 72, cfg.width + cfg.block_n - 24, 224
    else:
        m, n, k = 72, 2 * cfg.width - 8, 320
    a, b = _operands(m, n, k, torch.bfloat16, b_is_nk, seed=cfg.width + cfg.split_k)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = gemm_module.gemm(a, b, out=out, config=cfg, num_programs=3)
    assert not torch.isnan(c).any(), "some output elements were never written"
    assert _rel_error(c, a, b) < 1e-2
