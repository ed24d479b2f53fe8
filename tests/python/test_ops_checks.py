"""Argument checking of the fused ops, on the CPU: fake CUDA tensors exercise the fake (meta)
implementations, real CPU tensors the eager path, which must refuse before any GPU work."""

import types

import pytest

torch = pytest.importorskip("torch")

import syncopate
import syncopate.ops as sops
from syncopate.ops import custom_ops

BF16 = torch.bfloat16
F16 = torch.float16


def cuda(*shape, dtype=BF16):
    """A fake CUDA tensor (call inside the fake_mode fixture)."""
    return torch.empty(*shape, device="cuda", dtype=dtype)


# --- output shapes of the fake implementations ---------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_ag_gemm_output_shape(fake_mode, world, dtype):
    out = torch.ops.syncopate.ag_gemm(cuda(5, 24, dtype=dtype), cuda(24, 40, dtype=dtype), world, "g")
    assert tuple(out.shape) == (5 * world, 40)
    assert out.dtype == dtype
    assert out.device.type == "cuda"


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_gemm_rs_output_shape(fake_mode, world):
    out = torch.ops.syncopate.gemm_rs(cuda(12 * world, 7), cuda(7, 33), world, "g")
    assert tuple(out.shape) == (12, 33)
    assert out.dtype == BF16


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_gemm_ar_output_shape(fake_mode, world):
    out = torch.ops.syncopate.gemm_ar(cuda(10 * world, 7, dtype=F16), cuda(7, 33, dtype=F16), world, "g")
    assert tuple(out.shape) == (10 * world, 33)
    assert out.dtype == F16


# --- bad arguments: each rule, each op, with a message naming the op and the rule -----------------

OPS = ["ag_gemm", "gemm_rs", "gemm_ar"]


def call(op, a, b, world=2):
    return getattr(torch.ops.syncopate, op)(a, b, world, "g")


@pytest.mark.parametrize("op", OPS)
def test_inner_dimension_mismatch(fake_mode, op):
    with pytest.raises(syncopate.ShapeError, match=rf"syncopate\.ops\.{op}: inner dimensions differ: .*K=16.*K=15"):
        call(op, cuda(8, 16), cuda(15, 32))


@pytest.mark.parametrize("op", OPS)
def test_not_a_matrix(fake_mode, op):
    with pytest.raises(syncopate.ShapeError, match=r"must be a 2-D matrix, got shape \[8, 16, 2\]"):
        call(op, cuda(8, 16, 2), cuda(16, 32))
    with pytest.raises(syncopate.ShapeError, match=r"must be a 2-D matrix, got shape \[16\]"):
        call(op, cuda(8, 16), cuda(16))


@pytest.mark.parametrize("op", OPS)
def test_empty_dimension(fake_mode, op):
    with pytest.raises(syncopate.ShapeError, match=r"empty dimension, shape \[0, 16\]"):
        call(op, cuda(0, 16), cuda(16, 32))


@pytest.mark.parametrize("op", OPS)
def test_dtype_mismatch(fake_mode, op):
    with pytest.raises(syncopate.UserError, match=r"is torch.bfloat16 but .* is torch.float16; they must match"):
        call(op, cuda(8, 16, dtype=BF16), cuda(16, 32, dtype=F16))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64])
def test_unsupported_dtype(fake_mode, op, dtype):
    with pytest.raises(
        syncopate.UserError, match=rf"dtype {dtype} is not supported; use one of torch.float16, torch.bfloat16"
    ):
        call(op, cuda(8, 16, dtype=dtype), cuda(16, 32, dtype=dtype))


@pytest.mark.parametrize("op", OPS)
def test_device_mismatch(fake_mode, op):
    with pytest.raises(syncopate.UserError, match=r"is on cuda:0 but .* is on cpu"):
        call(op, cuda(8, 16), torch.empty(16, 32, dtype=BF16))


@pytest.mark.parametrize("op", OPS)
def test_cpu_operands_refused(fake_mode, op, monkeypatch):
    # The CPU is accepted only while Triton's interpreter is on (other test modules set it).
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(
        syncopate.UserError,
        match=r"must be on a CUDA device \(or the CPU under Triton's "
        r"interpreter, TRITON_INTERPRET=1\), got cpu",
    ):
        call(op, torch.empty(8, 16, dtype=BF16), torch.empty(16, 32, dtype=BF16))


@pytest.mark.parametrize("op", OPS)
def test_cpu_operands_accepted_under_the_interpreter(fake_mode, op, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert call(op, torch.empty(8, 16, dtype=BF16), torch.empty(16, 32, dtype=BF16)).device.type == "cpu"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("world", [0, -3])
def test_bad_world_size(fake_mode, op, world):
    with pytest.raises(syncopate.UserError, match=rf"world_size must be an integer >= 1, got {world}"):
        call(op, cuda(8, 16), cuda(16, 32), world)


@pytest.mark.parametrize("op", ["gemm_rs", "gemm_ar"])
@pytest.mark.parametrize("world", [3, 4, 5])
def test_reduced_rows_must_divide_by_world(fake_mode, op, world):
    rows = 2 * world + 1
    with pytest.raises(
        syncopate.ShapeError, match=rf"{op}: a has M={rows} rows.*world size {world}; M must be a multiple of {world}"
    ):
        getattr(torch.ops.syncopate, op)(cuda(rows, 16), cuda(16, 32), world, "g")


def test_ag_gemm_takes_any_shard_rows(fake_mode):
    # The gathered M is shard rows x world: no divisibility rule to break.
    assert tuple(torch.ops.syncopate.ag_gemm(cuda(7, 16), cuda(16, 8), 3, "g").shape) == (21, 8)


def test_checks_are_value_errors(fake_mode):
    # Generic callers that catch ValueError keep working.
    with pytest.raises(ValueError):
        call("ag_gemm", cuda(8, 16), cuda(15, 32))
    with pytest.raises(ValueError):
        call("gemm_ar", cuda(8, 16, dtype=torch.float32), cuda(16, 32, dtype=torch.float32))


# --- the eager path refuses before any GPU work ------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_eager_checks_shapes_before_anything_else(op):
    # Real CPU tensors with a K mismatch: the shape rule is reported (not the device, not a
    # missing process group, not a missing GPU implementation).
    a = torch.randn(8, 16).to(BF16)
    b = torch.randn(15, 32).to(BF16)
    with pytest.raises(syncopate.ShapeError, match="inner dimensions differ"):
        call(op, a, b)


@pytest.mark.parametrize("op", OPS)
def test_eager_refuses_cpu_tensors(op, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    a = torch.randn(8, 16).to(BF16)
    b = torch.randn(16, 32).to(BF16)
    with pytest.raises(syncopate.UserError, match="must be on a CUDA device .*, got cpu"):
        call(op, a, b)


# --- the public functions ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_public_function_without_torch_distributed_is_one_rank(fake_mode, op):
    import torch.distributed as dist

    assert not dist.is_initialized()
    assert custom_ops.group_args(op, None) == (custom_ops.NO_GROUP, 1)
    assert tuple(getattr(sops, op)(cuda(8, 16), cuda(16, 32)).shape) == (8, 32)


@pytest.mark.parametrize("op", OPS)
def test_no_group_name_needs_world_one(fake_mode, op):
    # The fake implementation only checks shapes; the real one refuses (test_ops_autograd.py).
    with pytest.raises(syncopate.UserError, match=r"world_size=2 with no process group"):
        custom_ops._run_on_gpu(op, cuda(8, 16), cuda(16, 32), 2, custom_ops.NO_GROUP)


@pytest.mark.parametrize("op", OPS)
def test_public_function_rejects_a_non_group(single_rank_group, op):
    with pytest.raises(syncopate.UserError, match="group must be a torch.distributed ProcessGroup or None, got str"):
        getattr(sops, op)(torch.empty(8, 16, dtype=BF16), torch.empty(16, 32, dtype=BF16), "0")


def test_public_functions_pass_the_group(single_rank_group, fake_mode):
    a, b = cuda(6, 16), cuda(16, 24)
    assert tuple(sops.ag_gemm(a, b).shape) == (6, 24)
    assert tuple(sops.gemm_rs(a, b, single_rank_group).shape) == (6, 24)
    assert tuple(sops.gemm_ar(a, b).shape) == (6, 24)


# --- package plumbing --------------------------------------------------------------------------------


def test_ops_are_registered_in_the_syncopate_namespace():
    for op in OPS:
        packet = getattr(torch.ops.syncopate, op)
        schema = str(packet.default._schema)
        assert schema.startswith(f"syncopate::{op}(Tensor "), schema
        assert schema.endswith("-> Tensor"), schema


def test_lazy_ops_attribute():
    assert syncopate.ops is sops


@pytest.mark.parametrize("op", OPS)
def test_submodule_import_does_not_shadow_the_op(op):
    # Importing syncopate.ops.<op> (the runtime's implementation) makes Python set the module as
    # an attribute of the package; the public function must stay.
    public = getattr(sops, op)
    setattr(sops, op, types.ModuleType(f"syncopate.ops.{op}"))
    assert getattr(sops, op) is public
    assert callable(public) and public is getattr(custom_ops, op)


# --- the eager implementation's hand-over to the runtime ------------------------------------------
# Fake CUDA tensors pass the device check, so the real implementation's later steps (process
# group lookup, hand-over to syncopate.ops.<op>.forward) can be checked on a CPU.


def test_real_impl_needs_torch_distributed(fake_mode):
    with pytest.raises(syncopate.UserError, match="torch.distributed is not initialized"):
        custom_ops._run_on_gpu("ag_gemm", cuda(8, 16), cuda(16, 32), 1, "0")


def test_real_impl_unknown_group(single_rank_group, fake_mode):
    with pytest.raises(syncopate.UserError, match="no process group named 'no-such-group'"):
        custom_ops._run_on_gpu("gemm_rs", cuda(8, 16), cuda(16, 32), 1, "no-such-group")


def test_real_impl_world_size_must_match_group(single_rank_group, fake_mode):
    name = single_rank_group.group_name
    with pytest.raises(syncopate.UserError, match=rf"world_size=2 but process group '{name}' has 1 ranks"):
        custom_ops._run_on_gpu("gemm_ar", cuda(8, 16), cuda(16, 32), 2, name)


@pytest.mark.parametrize("op", OPS)
def test_real_impl_hands_over_to_runtime_forward(single_rank_group, fake_mode, monkeypatch, op):
    calls = []

    def forward(a, b, *, group):
        calls.append((a, b, group))
        return a.new_empty((a.shape[0], b.shape[1]))

    monkeypatch.setattr(custom_ops, "_runtime_module", lambda name: types.SimpleNamespace(forward=forward))
    a, b = cuda(8, 16), cuda(16, 32)
    out = custom_ops._run_on_gpu(op, a, b, 1, single_rank_group.group_name)
    assert len(calls) == 1
    assert calls[0][0] is a and calls[0][1] is b
    assert calls[0][2].group_name == single_rank_group.group_name
    assert tuple(out.shape) == (8, 32)
