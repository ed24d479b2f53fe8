"""syncopate.nn's ColumnParallelLinear / RowParallelLinear on the CPU: every argument check (with
a stand-in world size where the rule needs more than one rank), the weight shards and their
initialisation, and forward + backward at world 1 against nn.Linear, through the contexts' torch
path and through the fused kernels in Triton's interpreter. Several ranks: test_tp_multirank.py."""

import math
import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

import syncopate  # noqa: E402
import syncopate.nn as snn  # noqa: E402
from syncopate.nn import parallel_linear  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_autograd import fused_contexts, no_process_group  # noqa: E402,F401  (fixtures)

BF16 = torch.bfloat16
LAYERS = [snn.ColumnParallelLinear, snn.RowParallelLinear]


@pytest.fixture
def world_of(monkeypatch):
    """Pretend the layers' group has `world` ranks, this one being `rank` (no collective runs:
    only the constructor's checks and shapes are looked at)."""

    def set_world(world, rank=0):
        monkeypatch.setattr(parallel_linear, "group_args", lambda who, group: ("tp", world))
        monkeypatch.setattr(parallel_linear, "_group_rank", lambda group: rank)

    return set_world


# --- argument checks -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize(
    "name,value", [("in_features", 0), ("out_features", -8), ("in_features", 8.0), ("out_features", True)]
)
def test_features_must_be_positive_integers(cls, name, value):
    kwargs = dict(in_features=16, out_features=32)
    kwargs[name] = value
    with pytest.raises(
        syncopate.UserError, match=rf"^{cls.__name__}: {name} must be a positive integer, got {value!r}"
    ):
        cls(**kwargs)


@pytest.mark.parametrize(
    "cls,name,features",
    [(snn.ColumnParallelLinear, "out_features", (16, 30)), (snn.RowParallelLinear, "in_features", (30, 16))],
)
def test_split_features_must_divide_by_the_world_size(world_of, cls, name, features):
    world_of(4)
    with pytest.raises(
        syncopate.ShapeError,
        match=rf"^{cls.__name__}: {name}=30 is not divisible by the "
        r"tensor-parallel world size 4",
    ):
        cls(*features)
    cls(*(f if f != 30 else 32 for f in features))  # 32 splits


@pytest.mark.parametrize("cls", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_dtype_must_be_one_the_ops_take(cls, dtype):
    with pytest.raises(
        syncopate.UserError,
        match=rf"{cls.__name__}: dtype {dtype} is not supported; the fused "
        r"ops take torch.float16, torch.bfloat16",
    ):
        cls(16, 32, dtype=dtype)


@pytest.mark.parametrize("cls", LAYERS)
def test_default_dtype_is_bf16_and_fp16_works(cls):
    assert cls(16, 32).weight.dtype == BF16
    assert cls(16, 32, dtype=torch.float16).weight.dtype == torch.float16


@pytest.mark.parametrize("cls", LAYERS)
def test_cpu_device_needs_the_interpreter(cls, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(
        syncopate.UserError,
        match=rf"{cls.__name__}: device cpu is not supported; the fused ops "
        r"run on CUDA devices",
    ):
        cls(16, 32, device="cpu")
    assert cls(16, 32, device="meta").weight.device.type == "meta"  # deferred initialisation


@pytest.mark.parametrize("cls", LAYERS)
def test_init_method_must_be_callable(cls):
    with pytest.raises(syncopate.UserError, match=rf"{cls.__name__}: init_method must be callable"):
        cls(16, 32, init_method="normal")


def test_group_must_be_a_process_group():
    with pytest.raises(
        syncopate.UserError,
        match=r"ColumnParallelLinear: group must be a torch.distributed "
        r"ProcessGroup or None, got str",
    ):
        snn.ColumnParallelLinear(16, 32, group="tp")


@pytest.mark.parametrize("cls,good_in", [(snn.ColumnParallelLinear, 16), (snn.RowParallelLinear, 16)])
def test_input_checks(cls, good_in):
    layer = cls(16, 32)
    who = cls.__name__
    with pytest.raises(
        syncopate.ShapeError,
        match=rf"{who}: input must be \[S.*, 16\] or \[S.*, batch, 16\] "
        r"\(sequence first\), got \[4, 12\]",
    ):
        layer(torch.randn(4, 12).to(BF16))
    with pytest.raises(syncopate.ShapeError, match=rf"{who}: input must be .* got \[16\]"):
        layer(torch.randn(16).to(BF16))
    with pytest.raises(syncopate.UserError, match=rf"{who}: input is torch.float32 but the weight is torch.bfloat16"):
        layer(torch.randn(4, good_in))
    with pytest.raises(syncopate.UserError, match=rf"{who}: input is on meta but the weight is on cpu"):
        layer(torch.empty(4, good_in, dtype=BF16, device="meta"))


def test_row_parallel_sequence_must_divide_by_the_world_size(world_of):
    world_of(2)
    layer = snn.RowParallelLinear(16, 32)
    with pytest.raises(
        syncopate.ShapeError,
        match=r"RowParallelLinear: the sequence length 3 \(input dim 0\) is "
        r"not divisible by the tensor-parallel world size 2",
    ):
        layer(torch.randn(3, 8).to(BF16))


def test_load_full_checks_shapes():
    col = snn.ColumnParallelLinear(16, 32)
    with pytest.raises(
        syncopate.ShapeError,
        match=r"ColumnParallelLinear.load_full: weight must be the full "
        r"\[32, 16\], got \[16, 32\]",
    ):
        col.load_full(torch.zeros(16, 32))
    with pytest.raises(syncopate.UserError, match=r"layer has bias but bias=None was given"):
        col.load_full(torch.zeros(32, 16))
    with pytest.raises(syncopate.ShapeError, match=r"bias must be \[32\], got \[16\]"):
        col.load_full(torch.zeros(32, 16), torch.zeros(16))
    row = snn.RowParallelLinear(16, 32, bias=False)
    with pytest.raises(syncopate.UserError, match=r"layer has no bias but bias=a tensor was given"):
        row.load_full(torch.zeros(32, 16), torch.zeros(32))


# --- shards and initialisation --------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 3])
def test_shards_are_megatron_layout_with_linear_init(world_of, rank):
    world_of(4, rank)
    col = snn.ColumnParallelLinear(64, 32)
    row = snn.RowParallelLinear(64, 32)
    assert tuple(col.weight.shape) == (8, 64) and tuple(col.bias.shape) == (8,)
    assert tuple(row.weight.shape) == (32, 16) and tuple(row.bias.shape) == (32,)
    bound = 1 / math.sqrt(64)  # nn.Linear(64, 32)'s, for both: the full layer's fan-in
    for t in (col.weight, col.bias, row.weight, row.bias):
        assert t.abs().max() <= bound and t.abs().max() > bound / 2
    assert getattr(row.bias, "sequence_parallel", False) and not getattr(col.bias, "sequence_parallel", False)
    full_w, full_b = torch.randn(32, 64).to(BF16), torch.randn(32).to(BF16)
    col.load_full(full_w, full_b)
    row.load_full(full_w, full_b)
    mine = slice(8 * rank, 8 * (rank + 1))
    assert torch.equal(col.weight, full_w[mine]) and torch.equal(col.bias, full_b[mine])
    assert torch.equal(row.weight, full_w[:, 16 * rank : 16 * (rank + 1)]) and torch.equal(row.bias, full_b)
    assert "world_size=4, rank=" + str(rank) in repr(col)


def test_init_method_gets_the_shard(world_of):
    world_of(2)
    seen = []
    layer = snn.RowParallelLinear(16, 8, init_method=lambda w: (seen.append(tuple(w.shape)), w.fill_(0.5)))
    assert seen == [(8, 8)] and bool((layer.weight == 0.5).all())


def test_row_parallel_without_sequence_parallelism_has_a_plain_bias():
    assert not getattr(snn.RowParallelLinear(16, 8, sequence_parallel=False).bias, "sequence_parallel", False)


# --- forward and backward at world 1 ------------------------------------------------------------


def rel(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def mlp_against_linear(sp: bool, shape):
    gen = torch.Generator().manual_seed(4)
    hidden, ffn = 32, 64
    ref_up, ref_down = torch.nn.Linear(hidden, ffn), torch.nn.Linear(ffn, hidden)
    up = snn.ColumnParallelLinear(hidden, ffn, sequence_parallel=sp)
    down = snn.RowParallelLinear(ffn, hidden, sequence_parallel=sp)
    up.load_full(ref_up.weight, ref_up.bias)
    down.load_full(ref_down.weight, ref_down.bias)
    x = torch.randn(*shape, hidden, generator=gen).to(BF16).requires_grad_(True)
    y = down(F.silu(up(x)))
    assert y.shape == x.shape and y.dtype == BF16
    gy = torch.randn(y.shape, generator=gen).to(BF16)
    y.backward(gy)
    params = [
        p.detach().to(BF16).double().requires_grad_(True)
        for p in (ref_up.weight, ref_up.bias, ref_down.weight, ref_down.bias)
    ]
    xr = x.detach().double().requires_grad_(True)
    yr = F.linear(F.silu(F.linear(xr, params[0], params[1])), params[2], params[3])
    yr.backward(gy.double())
    assert rel(y, yr) < 2e-2
    assert rel(x.grad, xr.grad) < 2e-2
    for got, ref in zip((up.weight, up.bias, down.weight, down.bias), params):
        assert got.grad is not None and got.grad.shape == got.shape
        assert rel(got.grad, ref.grad) < 2e-2
    return up, down


@pytest.mark.parametrize("sp", [True, False])
@pytest.mark.parametrize("shape", [(24,), (12, 2)])
def test_mlp_matches_linear_at_world_one(sp, shape):
    mlp_against_linear(sp, shape)


def test_mlp_through_the_fused_kernels(fused_contexts):
    mlp_against_linear(True, (32,))
    kinds = sorted({type(ctx).__name__ for ctx in fused_contexts})
    assert kinds == ["AgGemm", "GemmRs"] and all(ctx.decision == "fused" for ctx in fused_contexts)


def test_allreduce_sequence_parallel_grads_at_world_one():
    up, down = mlp_against_linear(True, (8,))
    before = down.bias.grad.clone()
    assert snn.allreduce_sequence_parallel_grads(torch.nn.ModuleList([up, down])) == 1
    assert torch.equal(down.bias.grad, before)


def test_lazy_attribute():
    assert syncopate.nn is snn
