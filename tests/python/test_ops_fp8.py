"""FP8 (e4m3) operands in the op contexts, on the CPU (ops/fp8.py).

- the refusals by name: no scales, scales of the wrong dtype / shape / device, scales given to a
  bf16 context, a GPU without FP8 (capability < 8.9), k or n that break the 16-byte row pitch,
  plan= with FP8, the staged epilogue with FP8;
- the gathered row layout (A's K bytes, its fp32 scale, padding to K + 16) and that the FP8
  kernel reads it in place (strided A, strided scales) under the interpreter;
- whole contexts at world 1 (the runtime's workspace replaced by test_ops_fused.py's CPU
  stand-in): AgGemm / GemmRs / GemmAr with FP8 operands, fused (the transformer's FP8 kernel)
  and sequential, per-tensor and per-row scales, against an fp32 reference; the plan moves
  e4m3 rows of K + 16 bytes (AG) or bf16 C (RS/AR);
- the simulator's FP8 GEMM rate (measured on nvidia-h200, 1.75x bf16's) reaching the op's choice.
"""

import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate as sy  # noqa: E402
from syncopate.errors import ShapeError, UserError  # noqa: E402
from syncopate.ops import fp8 as ops_fp8  # noqa: E402
from syncopate.ops.ag_gemm import AgGemm  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402
from syncopate.ops.gemm_rs import GemmRs  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_fused import cpu_runtime  # noqa: E402,F401  (fixture)

E4M3 = torch.float8_e4m3fn
CONTEXTS = [AgGemm, GemmRs, GemmAr]
CPU = torch.device("cpu")


def _fp8(*shape, gen):
    return (torch.randn(*shape, generator=gen) * 2).to(E4M3)


def _b(k, n, layout, gen):
    return _fp8(n, k, gen=gen).t() if layout == "nk" else _fp8(k, n, gen=gen)


def _reference(a, b, sa, sb):
    return (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)


# --- refusals by name ---------------------------------------------------------------------------


def test_scales_are_checked_by_name():
    one = torch.ones(1)
    with pytest.raises(UserError, match=r"GemmRs: FP8 operands need scale_a .*it was not given"):
        ops_fp8.check_scales("GemmRs", None, one, 8, 16, CPU)
    with pytest.raises(UserError, match=r"AgGemm: FP8 operands need scale_b"):
        ops_fp8.check_scales("AgGemm", one, None, 8, 16, CPU)
    with pytest.raises(UserError, match=r"scale_a must be a float32 tensor, got torch.bfloat16"):
        ops_fp8.check_scales("GemmAr", one.bfloat16(), one, 8, 16, CPU)
    with pytest.raises(
        ShapeError,
        match=r"scale_a must have 1 element \(per tensor\) or 8 \(one per row of A: "
        r"shape \[8\] or \[8, 1\]\), got shape \[1, 8\]",
    ):
        ops_fp8.check_scales("GemmRs", torch.ones(1, 8), one, 8, 16, CPU)
    with pytest.raises(
        ShapeError,
        match=r"scale_b must have 1 element \(per tensor\) or 16 \(one per column "
        r"of B: shape \[16\] or \[1, 16\]\), got shape \[8\]",
    ):
        ops_fp8.check_scales("GemmRs", one, torch.ones(8), 8, 16, CPU)
    with pytest.raises(UserError, match=r"scale_b must be on meta, got cpu"):
        ops_fp8.check_scales("GemmRs", torch.ones(1, device="meta"), one, 8, 16, torch.device("meta"))
    sa, sb = ops_fp8.check_scales("GemmRs", torch.ones(8, 1), torch.tensor(2.0), 8, 16, CPU)
    assert sa.shape == (8,) and sb.shape == (1,)


@pytest.mark.parametrize("cls", CONTEXTS)
def test_a_gpu_without_fp8_is_refused_by_name(cls, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # "cuda" resolves to the current GPU
    with pytest.raises(
        UserError,
        match=rf"{cls.__name__}: NVIDIA A100-SXM4-80GB \(compute capability 8.0\) "
        r"has no FP8 tensor cores",
    ):
        cls(None, m=256, k=128, n=64, dtype=E4M3, device="cuda")


@pytest.mark.parametrize("cls", CONTEXTS)
def test_fp8_row_pitches_must_be_16_byte_multiples(cls):
    with pytest.raises(ShapeError, match=rf"{cls.__name__}: FP8 needs k and n multiples of 16 .*got k=40, n=64"):
        cls(None, m=256, k=40, n=64, dtype=E4M3, device="cpu")
    with pytest.raises(ShapeError, match=r"got k=64, n=40"):
        cls(None, m=256, k=64, n=40, dtype=E4M3, device="cpu")


def test_fp8_with_a_given_plan_is_refused():
    plan = sy.make_plan(
        "all-gather",
        world_size=1,
        shape=[64, 32],
        algorithm="direct",
        dtype="f8e4m3",
        backend="copy-engine",
        tensor="a",
    )
    with pytest.raises(UserError, match=r"AgGemm: plan= with FP8 operands is not supported yet"):
        AgGemm(None, m=64, k=32, n=64, dtype=E4M3, device="cpu", plan=plan)


@pytest.mark.parametrize("cls", [GemmRs, GemmAr])
def test_fp8_staged_epilogue_is_refused_by_name(cls, cpu_runtime):
    with pytest.raises(UserError, match=r"reduce='epilogue' cannot run here: FP8 operands: the staged epilogue"):
        cls(
            None,
            m=64,
            k=32,
            n=64,
            dtype=E4M3,
            device="cpu",
            mode="fused",
            reduce="epilogue",
            backend="copy-engine",
            algorithm="direct",
            split=1,
        )


# --- the gathered row layout ----------------------------------------------------------------------


def test_packed_rows_hold_a_then_its_scale_and_the_kernel_reads_them_in_place():
    from syncopate.kernels.configs import GemmConfig
    from syncopate.kernels.gemm_fp8 import gemm_fp8

    gen = torch.Generator().manual_seed(4)
    m, k, n = 48, 64, 32
    packed = torch.zeros(m, k + ops_fp8.ROW_TAIL_BYTES, dtype=E4M3)
    a, sa = _fp8(m, k, gen=gen), torch.rand(m, 1, generator=gen) + 0.5
    ops_fp8.pack_rows(packed[:16], a[:16], torch.tensor([3.0]))  # a shard with a per-tensor scale
    ops_fp8.pack_rows(packed[16:], a[16:], sa[16:])
    a_view, s_view = ops_fp8.packed_views(packed, k)
    assert a_view.stride() == (k + 16, 1) and s_view.shape == (m, 1) and s_view.stride(0) == (k + 16) // 4
    assert torch.equal(a_view.view(torch.uint8), a.view(torch.uint8))
    expected_scales = torch.cat([torch.full((16, 1), 3.0), sa[16:]])
    assert torch.equal(s_view, expected_scales)
    b, sb = _fp8(k, n, gen=gen), torch.rand(n, generator=gen) + 0.5
    c = gemm_fp8(a_view, b, s_view, sb, config=GemmConfig(16, 32, 32, 2, 1, 4, False, 1, 1.0), num_programs=3)
    ref = _reference(a, b, expected_scales, sb)
    assert ((c.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3


# --- whole contexts at world 1 ------------------------------------------------------------------


@pytest.mark.parametrize("cls", CONTEXTS)
@pytest.mark.parametrize("mode", ["fused", "sequential"])
@pytest.mark.parametrize("scales", ["tensor", "row"])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_fp8_context_at_world_one_matches_reference(cpu_runtime, cls, mode, scales, layout):
    m, k, n = 70, 48, 80
    ctx = cls(
        None,
        m=m,
        k=k,
        n=n,
        dtype=E4M3,
        device="cpu",
        mode=mode,
        b_layout=layout,
        backend="copy-engine",
        algorithm="direct",
        split=1,
        tile_order="row-major",
    )
    assert ctx.decision == mode and ctx.out_dtype == torch.bfloat16
    tensor = ctx.plan.tensors["a" if cls is AgGemm else "c"]
    if cls is AgGemm:  # e4m3 rows with their scales: K + 16 bytes each
        assert (list(tensor.shape), str(tensor.dtype)) == ([m, k + 16], "f8e4m3")
    else:  # the bf16 result is what travels and is reduced
        assert str(tensor.dtype) == "bf16"
    if mode == "fused":
        assert ctx.kernel_name == "gemm_fp8_tma_kernel"
        assert ctx.gemm.kwargs["C_STORE_POINTERS"] is (cls is not AgGemm)
    gen = torch.Generator().manual_seed(11)
    for _ in range(2):
        a, b = _fp8(m, k, gen=gen), _b(k, n, layout, gen)
        if scales == "tensor":
            sa, sb = torch.tensor(0.5), torch.tensor([1.5])
        else:
            sa, sb = torch.rand(m, 1, generator=gen) + 0.25, torch.rand(1, n, generator=gen) + 0.25
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        got = ctx(a, b, out=out, scale_a=sa, scale_b=sb, check=True)
        assert got is out
        ref = _reference(a, b, sa, sb)
        assert ((out.double() - ref.double()).norm() / ref.double().norm()).item() < 4e-3
    with pytest.raises(UserError, match=r"FP8 operands need scale_b"):
        ctx(a, b, scale_a=sa)
    with pytest.raises(UserError, match=r"operands must be torch.float8_e4m3fn"):
        ctx(a.bfloat16(), b, scale_a=sa, scale_b=sb)


@pytest.mark.parametrize("cls", CONTEXTS)
def test_scales_given_to_a_bf16_context_are_refused(cpu_runtime, cls):
    ctx = cls(
        None,
        m=64,
        k=32,
        n=32,
        dtype=torch.float16,
        device="cpu",
        mode="sequential",
        backend="copy-engine",
        algorithm="direct",
        split=1,
    )
    a, b = torch.ones(64, 32, dtype=torch.float16), torch.ones(32, 32, dtype=torch.float16)
    with pytest.raises(UserError, match=r"scale_a / scale_b are for FP8 operands"):
        ctx(a, b, scale_a=torch.ones(1))


# --- the simulator ------------------------------------------------------------------------------


def test_the_simulator_runs_fp8_gemms_at_the_fp8_rate():
    from syncopate.ops.choice import choose

    calib = sy.load_calibration(os.environ["SYNCOPATE_CALIBRATION"])
    assert not calib.fp8_estimated and calib.fp8_peak_tflops == 1380  # measured, nvidia-h200
    assert calib.tile_time_us(128, 256, 8192, "f8e4m3") < 0.65 * calib.tile_time_us(128, 256, 8192)
    common = dict(
        m=8192,
        n=8192,
        k=8192,
        world=4,
        block_m=128,
        block_n=256,
        backend="copy-engine",
        algorithm="direct",
        split=1,
        tile_order="row-major",
        mode="fused",
    )
    bf16 = choose("reduce-scatter", dtype="bf16", **common)
    fp8 = choose("reduce-scatter", dtype="bf16", gemm_dtype="f8e4m3", **common)
    assert fp8.predicted_us["gemm"] < 0.6 * bf16.predicted_us["gemm"]
    # The chunks of an FP8 all-gather move half the bytes of bf16's.
    ag16 = choose("all-gather", dtype="bf16", **common)
    ag8 = choose("all-gather", dtype="f8e4m3", gemm_dtype="f8e4m3", **common)
    assert ag8.predicted_us["comm"] < 0.6 * ag16.predicted_us["comm"]


def test_fp8_kernel_scale_reads_are_checked_against_their_storage(cpu_runtime):
    """The AG kernel reads A's scales with the packed rows' pitch: a scale tensor too short for
    that (the bug the first GPU run hit in the warm-up: an illegal address) is refused."""
    ctx = AgGemm(
        None,
        m=64,
        k=32,
        n=32,
        dtype=E4M3,
        device="cpu",
        mode="fused",
        backend="copy-engine",
        algorithm="direct",
        split=1,
    )
    assert ctx.gemm.stride_sa == (32 + ops_fp8.ROW_TAIL_BYTES) // 4
    ctx.gemm.check_scales(ctx.a_scales, ctx.sb)  # the heap's own views: fine
    from syncopate.errors import InternalError

    with pytest.raises(InternalError, match=r"would read 757 float32 of scale_a, whose storage holds 64"):
        ctx.gemm.check_scales(torch.ones(64, 1), ctx.sb)
