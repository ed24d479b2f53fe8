"""The FP8 local GEMM (kernels/gemm_fp8.py) run by Triton's CPU interpreter on small shapes.

e4m3 operands with per-tensor and per-row (A) / per-column (B) scales, both layouts of B, shapes
that are not multiples of the block and a persistent grid smaller than the tile count, against
an fp32 reference of the dequantised product; the output is poisoned with NaN first. The
interpreter computes an e4m3 tl.dot by widening the operands (exact: every e4m3 value is a
float32), so the only error left is the bf16 rounding of C. Also the refusals by name.
"""

import dataclasses
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton.runtime import interpreter  # noqa: E402

_REPO_PYTHON = Path(__file__).resolve().parents[2] / "python"
_spec = importlib.util.spec_from_file_location(
    "syncopate_fp8_kernels_under_test",
    _REPO_PYTHON / "syncopate" / "kernels" / "__init__.py",
    submodule_search_locations=[str(_REPO_PYTHON / "syncopate" / "kernels")],
)
_kernels = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _kernels
_spec.loader.exec_module(_kernels)
fp8 = importlib.import_module("syncopate_fp8_kernels_under_test.gemm_fp8")
configs = importlib.import_module("syncopate_fp8_kernels_under_test.configs")

E4M3 = torch.float8_e4m3fn
SMALL = configs.GemmConfig(32, 32, 32, 2, 1, 4, False, 1, 1.0)
SMALL_SPLIT = configs.GemmConfig(32, 32, 32, 2, 1, 4, False, 2, 1.0)


@pytest.fixture(autouse=True)
def _interpreter_fix(monkeypatch):
    """Triton 3.6's interpreter turns a scalar into an int with int(1-element array), which
    NumPy >= 2.4 refuses (every loop with a run-time bound fails): take the element."""
    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


def _operands(m, n, k, b_is_nk, seed):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) * 2).to(E4M3)
    if b_is_nk:
        b = (torch.randn(n, k, generator=gen) * 2).to(E4M3).t()
    else:
        b = (torch.randn(k, n, generator=gen) * 2).to(E4M3)
    return a, b, gen


def _scales(m, n, mode, gen):
    if mode == "tensor":
        return torch.tensor([0.37]), torch.tensor(1.9)  # shapes [1] and [] (both one element)
    return (torch.rand(m, 1, generator=gen) + 0.1), (torch.rand(1, n, generator=gen) + 0.1)


def _reference(a, b, sa, sb):
    return (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("shape", [(64, 64, 64), (72, 48, 96), (40, 16, 32)])
@pytest.mark.parametrize("cfg", [SMALL, SMALL_SPLIT], ids=["e1", "e2"])
def test_fp8_kernel_matches_fp32_reference(mode, b_is_nk, shape, cfg):
    m, n, k = shape
    a, b, gen = _operands(m, n, k, b_is_nk, seed=m + 3 * n + 7 * k)
    sa, sb = _scales(m, n, mode, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=cfg, num_programs=3)
    assert c.data_ptr() == out.data_ptr() and c.dtype == torch.bfloat16
    assert not torch.isnan(c).any(), "some output elements were never written"
    ref = _reference(a, b, sa, sb)
    err = ((c.double() - ref.double()).norm() / ref.double().norm()).item()
    assert err < 4e-3  # bf16 rounding of C only (operands are exact in fp32)


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("cfg", [SMALL, SMALL_SPLIT], ids=["e1", "e2"])
def test_host_descriptor_kernel_matches_fp32_reference(mode, b_is_nk, cfg):
    """gemm_fp8_tma_host_kernel (descriptors made on the host, the GPU default): edges that are
    not multiples of the block, a grid smaller than the tile count, both B layouts."""
    m, n, k = 72, 48, 96
    a, b, gen = _operands(m, n, k, b_is_nk, seed=5)
    sa, sb = _scales(m, n, mode, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=cfg, num_programs=3, host_descriptors=True)
    assert not torch.isnan(c).any(), "some output elements were never written"
    ref = _reference(a, b, sa, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize(
    "cfg",
    [
        dataclasses.replace(SMALL, stream_k=True),
        dataclasses.replace(SMALL, split_k=2, split_fixup=True),
        dataclasses.replace(SMALL, split_k=3, split_fixup=True, split_tail=True),
    ],
    ids=["stream-k", "split-k-one-launch", "split-tail-one-launch"],
)
def test_one_launch_kernels_apply_the_scales_after_the_sum(mode, b_is_nk, cfg):
    """kernels/gemm_one_launch.py with FP8 operands: 72 x 48 x 160 is 6 tiles of 32x32 with 5
    K-steps on 4 programs (stream-K: tiles shared by 2 programs; the split tail: 4 whole, 2 split);
    the row/column scales multiply the summed tile (a scale applied to each partial would be
    the same only for per-tensor scales)."""
    m, n, k = 72, 48, 160
    a, b, gen = _operands(m, n, k, b_is_nk, seed=11)
    sa, sb = _scales(m, n, mode, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=cfg, num_programs=4)
    assert not torch.isnan(c).any(), "some output elements were never written"
    ref = _reference(a, b, sa, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("split_k", [1, 3])
def test_wide_tiles_apply_the_scales_after_the_sum(mode, b_is_nk, split_k):
    """kernels/gemm_wide.py with FP8 operands: 48-column tiles (32 + 16) over N = 104 (the last
    tile's second block past N), 5 K-steps; split 3 ways, the scales multiply the summed
    partials in the reduction."""
    cfg = dataclasses.replace(SMALL, block_k=32, flatten=False, split_k=split_k, block_n2=16)
    m, n, k = 40, 104, 160
    a, b, gen = _operands(m, n, k, b_is_nk, seed=13 + split_k)
    sa, sb = _scales(m, n, mode, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=cfg, num_programs=3)
    assert not torch.isnan(c).any(), "some output elements were never written"
    ref = _reference(a, b, sa, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


def test_two_launch_split_k_is_refused_for_fp8():
    a, b, gen = _operands(32, 32, 64, True, seed=2)
    sa, sb = _scales(32, 32, "tensor", gen)
    with pytest.raises(ValueError, match="one launch"):
        fp8.gemm_fp8(a, b, sa, sb, config=dataclasses.replace(SMALL, split_k=2))


def test_scales_change_the_result_per_row_and_column():
    """A per-row scale must scale its row only (catches a kernel reading the first scale)."""
    a, b, _ = _operands(32, 32, 32, False, seed=1)
    ones = torch.ones(32)
    base = fp8.gemm_fp8(a, b, ones, ones, config=SMALL)
    sa = ones.clone()
    sa[5] = 4.0
    sb = ones.clone()
    sb[7] = 0.5
    scaled = fp8.gemm_fp8(a, b, sa, sb, config=SMALL)
    expected = base.float() * sa[:, None] * sb[None, :]
    assert torch.allclose(scaled.float(), expected, rtol=1e-2, atol=1e-2)
    assert not torch.allclose(scaled.float(), base.float())


def test_pointer_store_epilogue_matches_reference():
    """The epilogue a fused producer uses (plain stores, complete before a notify)."""
    a, b, gen = _operands(72, 40, 64, True, seed=21)
    sa, sb = _scales(72, 40, "rowwise", gen)
    out = torch.full((72, 40), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=SMALL, num_programs=3, c_store_pointers=True)
    ref = _reference(a, b, sa, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


def test_refusals_name_the_problem():
    a, b, _ = _operands(32, 48, 64, False, seed=2)
    one = torch.ones(1)
    with pytest.raises(ValueError, match="need their scales: scale_a not given"):
        fp8.gemm_fp8(a, b, None, one)
    with pytest.raises(ValueError, match="scale_b not given"):
        fp8.gemm_fp8(a, b, one, None)
    with pytest.raises(ValueError, match=r"scale_a must have 1 element \(per tensor\) or 32"):
        fp8.gemm_fp8(a, b, torch.ones(48), one)
    with pytest.raises(ValueError, match=r"scale_b must have 1 element \(per tensor\) or 48 .*got shape \[48, 1\]"):
        fp8.gemm_fp8(a, b, one, torch.ones(48, 1))
    with pytest.raises(TypeError, match="scale_a must be float32"):
        fp8.gemm_fp8(a, b, one.half(), one)
    with pytest.raises(TypeError, match="must both be torch.float8_e4m3fn"):
        fp8.gemm_fp8(a.to(torch.bfloat16), b, one, one)
    with pytest.raises(ValueError, match="inner dimensions"):
        fp8.gemm_fp8(a, b[:32], one, one)
    with pytest.raises(ValueError, match="out must be 32x48 torch.bfloat16"):
        fp8.gemm_fp8(a, b, one, one, out=torch.empty(32, 48, dtype=torch.float16))


def test_a_gpu_without_fp8_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    with pytest.raises(ValueError, match=r"A100 \(compute capability 8.0\) has no FP8 tensor cores"):
        fp8.check_fp8_capability(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    fp8.check_fp8_capability(torch.device("cuda", 0))  # Hopper: accepted


def test_annotations_match_the_bf16_kernel():
    """The transformer reads the same annotation lines as gemm_tma_kernel's, in the same order,
    with the K loop (gemm.py's tma_k_loop, imported) right under the consume."""
    source = (_REPO_PYTHON / "syncopate" / "kernels" / "gemm_fp8.py").read_text().splitlines()
    marks = [line.strip() for line in source if line.strip().startswith("# @sy.")]
    assert marks == [
        "# @sy.tile(index=tile_id, m=pid_m, n=pid_n)",
        "# @sy.end",
        "# @sy.consume(a_ptr, m=pid_m)",
        "# @sy.produce(c_ptr, m=pid_m, n=pid_n)",
    ]
    consume = next(i for i, line in enumerate(source) if line.strip() == marks[2])
    assert source[consume + 1].strip().startswith("acc = tma_k_loop(a_desc, b_desc, ")


def test_kn_b_is_read_through_one_kept_k_major_copy():
    """B stored [K, N] is transposed once and kept (the FP8 MMA reads B K-major); the copy is
    refreshed when B is written in place, and dropped with B."""
    copies = fp8.k_major_copies
    copies.clear()
    a, b, gen = _operands(40, 48, 64, False, seed=8)
    sa, sb = _scales(40, 48, "rowwise", gen)
    first = fp8.gemm_fp8(a, b, sa, sb, config=SMALL)
    assert len(copies) == 1
    kept = copies.get(b)
    assert kept.shape == (48, 64) and kept.is_contiguous() and torch.equal(kept.t().float(), b.float())
    assert copies.get(b) is kept  # the same tensor, not a new transpose
    err = ((first.double() - _reference(a, b, sa, sb).double()).norm() / _reference(a, b, sa, sb).norm()).item()
    assert err < 4e-3
    b.copy_((torch.randn(64, 48, generator=gen) * 2).to(E4M3))  # in place: the version moves
    second = fp8.gemm_fp8(a, b, sa, sb, config=SMALL)
    ref = _reference(a, b, sa, sb)
    assert ((second.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3
    assert copies.get(b) is not kept
    in_place = fp8.gemm_fp8(a, b, sa, sb, config=SMALL, k_major_b=False)  # the in-kernel path
    assert ((in_place.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3
    del b
    assert len(copies) == 0


def test_fp8_config_doubles_block_k_up_to_128(monkeypatch):
    """FP8 takes the bf16 choice with BLOCK_K doubled (same bytes per K-step), at most 128."""
    configs = sys.modules[fp8.GemmConfig.__module__]
    for bf16_k, fp8_k in ((64, 128), (128, 128)):
        cfg = fp8.GemmConfig(64, 64, bf16_k, 8, 4, 4, True, 1, 1.0)
        monkeypatch.setattr(configs, "choose_config", lambda *args, cfg=cfg, **kwargs: cfg)
        for local in (False, True):
            assert configs.choose_fp8_config(128, 4096, 2048, 132, 227 * 1024, local=local).block_k == fp8_k


# Every wide config the FP8 model can pick: configs.wide_configs with BLOCK_K doubled to 128, as
# choose_fp8_config returns it (split 1-4: two launches, the scales applied after the sum).
MODEL_WIDE_FP8 = [dataclasses.replace(c, block_k=128) for c in configs.wide_configs(8192, fp8=True) if c.split_k <= 4]


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("cfg", MODEL_WIDE_FP8, ids=lambda c: c.name)
def test_model_wide_configs_apply_the_scales(cfg, b_is_nk, mode):
    """The FP8 model's own wide tiles through gemm_fp8: two tile rows (the second 8 deep), two tile
    columns whose last one's second block lies wholly (even splits) or partly (odd) past N, K of
    3.5 or 5 K-steps of 128 split 1-4 ways, 3 persistent programs."""
    assert cfg.block_n2 and cfg.block_k == 128
    if cfg.split_k % 2 == 0:
        m, n, k = 72, cfg.width + cfg.block_n - 24, 448
    else:
        m, n, k = 72, 2 * cfg.width - 8, 640
    a, b, gen = _operands(m, n, k, b_is_nk, seed=cfg.width + cfg.split_k)
    sa, sb = _scales(m, n, mode, gen)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    c = fp8.gemm_fp8(a, b, sa, sb, out=out, config=cfg, num_programs=3)
    assert not torch.isnan(c).any(), "some output elements were never written"
    ref = _reference(a, b, sa, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


def test_fp8_model_picks_are_runnable_wide_configs():
    """Where the FP8 model takes a wide tile, it is one of MODEL_WIDE_FP8 and gemm_fp8 runs it
    (fp8_runnable: split in two launches only with wide tiles)."""
    for m, n, k in [(128, 4096, 7168), (128, 3072, 4096), (512, 3072, 4096), (512, 5120, 8192), (128, 5120, 8192)]:
        cfg = configs.choose_fp8_config(m, n, k, 132, 232448 - 1024, local=True)
        assert cfg.block_n2 and configs.fp8_runnable(cfg), (m, n, k, cfg.name)
        assert cfg.name in {c.name for c in MODEL_WIDE_FP8}
