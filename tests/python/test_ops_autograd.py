"""Autograd of the fused ops, on the CPU: the registration (torch.library.opcheck), the backward
graphs traced with fake tensors at world 2 and 4 (which op each gradient runs), gradients at
world 1 against float64 torch (the contexts' torch path, and the fused kernels in Triton's
interpreter), and the ops with no torch.distributed at all. The multi-rank gradients (gloo,
several processes) are test_tp_multirank.py.

The kernels take fp16 and bf16 only, so every gradient is checked against a float64 reference
of the same (rounded) inputs with a tolerance of the operand dtype; gradcheck's float64 finite
differences cannot run through them.
"""

import os
import zlib
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (see test_gemm_interpret.py)
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate  # noqa: E402
import syncopate.ops as sops  # noqa: E402
from syncopate.ops import custom_ops  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_fused import FakeWorkspace  # noqa: E402

BF16, F16 = torch.bfloat16, torch.float16
OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm_gathered")
# Relative error of a gradient (fp32 accumulation of rounded operands) against float64.
TOLERANCE = {BF16: 2e-2, F16: 3e-3}


def rel_error(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def operands(op, m, k, n, dtype, layout, seed=0, requires_grad=True):
    """a, b as the op takes them at world 1; b is [K, N], given as weight.t() for "nk"."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    w = torch.randn(n, k, generator=gen).to(dtype) if layout == "nk" else torch.randn(k, n, generator=gen).to(dtype)
    a.requires_grad_(requires_grad)
    w.requires_grad_(requires_grad)
    return a, w, (w.t() if layout == "nk" else w)


def run_op(op, a, b):
    out = getattr(torch.ops.syncopate, op)(a, b, 1, custom_ops.NO_GROUP)
    return out[0] if op == "ag_gemm_gathered" else out


@pytest.fixture(autouse=True)
def no_process_group():
    import torch.distributed as dist

    assert not dist.is_initialized(), "a previous test left a process group initialized"
    from syncopate.ops import common

    saved = dict(common._CONTEXTS)
    common._CONTEXTS.clear()
    yield
    common._CONTEXTS.clear()
    common._CONTEXTS.update(saved)


@pytest.fixture
def fused_contexts(monkeypatch):
    """The contexts the ops build run the fused kernel (Triton's interpreter) over a CPU stand-in
    of the workspace, instead of auto's choice (torch.matmul at world 1)."""
    import importlib

    import syncopate.runtime
    from syncopate.ops import fused_gemm

    # The modules, not the public functions of the same name (syncopate.ops keeps those).
    ag_module = importlib.import_module("syncopate.ops.ag_gemm")
    rs_module = importlib.import_module("syncopate.ops.gemm_rs")

    monkeypatch.setattr(syncopate.runtime, "PlanWorkspace", FakeWorkspace)
    monkeypatch.setattr(fused_gemm, "num_sms", lambda device: 8)
    built = []

    def fused_context_for(cls, group, key, **kwargs):
        from syncopate.ops import common

        kwargs.update(mode="fused", backend="copy-engine", algorithm="direct", split=1, tile_order="row-major")
        ctx = common.context_for(cls, group, key + ("fused",), **kwargs)
        built.append(ctx)
        return ctx

    monkeypatch.setattr(ag_module, "context_for", fused_context_for)
    monkeypatch.setattr(rs_module, "context_for", fused_context_for)
    return built


# --- registration ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_opcheck(op):
    """Schema, fake tensor, autograd registration and AOT dispatch, on real CPU tensors at world 1."""
    a, _, b = operands(op, 8, 16, 24, BF16, "kn")
    torch.library.opcheck(getattr(torch.ops.syncopate, op).default, (a, b, 1, custom_ops.NO_GROUP))


# --- backward graphs with fake tensors ------------------------------------------------------------


def fake(*shape, dtype=BF16, requires_grad=True):
    """A tensor to create under FakeTensorMode. On the CPU (accepted under the interpreter): the
    autograd engine asks the CUDA driver about a CUDA device even for fake tensors."""
    return torch.empty(*shape, device="cpu", dtype=dtype, requires_grad=requires_grad)


def joint_graph_ops(fn, *shapes, grads=None):
    """The op names of fn's forward + backward traced by make_fx on fake tensors of the
    given shapes (bf16; grads[i]: whether input i requires grad), in order."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    grads = grads or [True] * len(shapes)
    with FakeTensorMode():
        args = [fake(*shape, requires_grad=g) for shape, g in zip(shapes, grads)]
        gm = make_fx(fn)(*args)
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def named(ops, prefix):
    return [o for o in ops if o.startswith(prefix)]


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_backward_is_gemm_rs_and_a_regather(world):
    def f(x, w):
        y = torch.ops.syncopate.ag_gemm(x, w.t(), world, "tp")
        return torch.autograd.grad(y.float().sum(), [x, w])

    ops = joint_graph_ops(f, (4, 16), (24, 16))
    assert named(ops, "syncopate.") == ["syncopate.ag_gemm.default", "syncopate.gemm_rs.default"], ops
    # The weight gradient's gather is issued before the GEMM+RS and waited for after it.
    gather = ops.index("_c10d_functional.all_gather_into_tensor.default")
    wait = ops.index("_c10d_functional.wait_tensor.default")
    assert gather < ops.index("syncopate.gemm_rs.default") < wait, ops
    assert named(ops, "_c10d_functional.reduce_scatter") == []


@pytest.mark.parametrize("world", [2, 4])
def test_gemm_rs_backward_is_one_ag_gemm_that_keeps_the_gathered_gradient(world):
    def f(x, w):
        y = torch.ops.syncopate.gemm_rs(x, w.t(), world, "tp")
        return torch.autograd.grad(y.float().sum(), [x, w])

    ops = joint_graph_ops(f, (4 * world, 16), (24, 16))
    assert named(ops, "syncopate.") == ["syncopate.gemm_rs.default", "syncopate.ag_gemm_gathered.default"], ops
    assert named(ops, "_c10d_functional.") == [], ops  # no collective besides the fused op's


@pytest.mark.parametrize("needs", ["x", "w"])
def test_gemm_rs_backward_of_one_input(needs):
    def f(x, w):
        y = torch.ops.syncopate.gemm_rs(x, w.t(), 2, "tp")
        return torch.autograd.grad(y.float().sum(), [x] if needs == "x" else [w])

    ops = joint_graph_ops(f, (8, 16), (24, 16), grads=[needs == "x", needs == "w"])
    if needs == "x":
        assert named(ops, "syncopate.") == ["syncopate.gemm_rs.default", "syncopate.ag_gemm.default"], ops
    else:  # the weight gradient alone needs the gathered grad_Y, not the AG+GEMM
        assert named(ops, "syncopate.") == ["syncopate.gemm_rs.default"], ops
        assert "_c10d_functional.all_gather_into_tensor.default" in ops


def test_gemm_ar_backward_has_no_collective():
    def f(x, w):
        y = torch.ops.syncopate.gemm_ar(x, w.t(), 4, "tp")
        return torch.autograd.grad(y.float().sum(), [x, w])

    ops = joint_graph_ops(f, (8, 16), (24, 16))
    assert named(ops, "syncopate.") == ["syncopate.gemm_ar.default"], ops
    assert named(ops, "_c10d_functional.") == [], ops


def test_ag_gemm_gathered_backward_needs_no_collective_for_the_weight():
    def f(x, w):
        y, _ = torch.ops.syncopate.ag_gemm_gathered(x, w.t(), 2, "tp")
        return torch.autograd.grad(y.float().sum(), [x, w])

    ops = joint_graph_ops(f, (4, 16), (24, 16))
    assert named(ops, "syncopate.") == ["syncopate.ag_gemm_gathered.default", "syncopate.gemm_rs.default"], ops
    assert named(ops, "_c10d_functional.") == [], ops


def test_ag_gemm_gathered_gradient_of_the_gathered_output_is_reduce_scattered():
    def f(x, w):
        y, g = torch.ops.syncopate.ag_gemm_gathered(x, w.t(), 2, "tp")
        return torch.autograd.grad(y.float().sum() + g.float().sum(), [x])

    ops = joint_graph_ops(f, (4, 16), (24, 16))
    assert "_c10d_functional.reduce_scatter_tensor.default" in ops, ops


@pytest.mark.parametrize("world", [1, 2, 4])
def test_fake_backward_shapes(world):
    """Gradient shapes and dtypes of a column- then row-parallel MLP, each weight a Linear's."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = fake(3, 32)  # [S/w, H]
        w_up, w_down = fake(48, 32), fake(32, 48)
        h = torch.ops.syncopate.ag_gemm(x, w_up.t(), world, "tp")
        y = torch.ops.syncopate.gemm_rs(torch.relu(h), w_down.t(), world, "tp")
        assert tuple(y.shape) == (3, 32)
        y.float().sum().backward()
        for t in (x, w_up, w_down):
            assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == BF16


@pytest.mark.parametrize("world", [2, 4])
def test_compiled_training_step_traces_fused_ops_in_both_graphs(world):
    """torch.compile(fullgraph) with AOT autograd: the forward graph holds the forward ops, the
    backward graph their duals, each one opaque node."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs = {"fw": [], "bw": []}

    from functorch.compile import make_boxed_func

    def recorder(kind):
        def compiler(gm, example_inputs):
            graphs[kind].extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
            return make_boxed_func(gm.forward)

        return compiler

    def mlp(x, w_up, w_down):
        h = torch.ops.syncopate.ag_gemm(x, w_up.t(), world, "tp")
        return torch.ops.syncopate.gemm_rs(torch.nn.functional.silu(h), w_down.t(), world, "tp")

    torch._dynamo.reset()
    try:
        compiled = torch.compile(
            mlp, fullgraph=True, backend=aot_autograd(fw_compiler=recorder("fw"), bw_compiler=recorder("bw"))
        )
        with FakeTensorMode():
            x, w_up, w_down = fake(2, 32), fake(48, 32), fake(32, 48)
            compiled(x, w_up, w_down).float().sum().backward()
            assert w_up.grad.shape == w_up.shape and x.grad.shape == x.shape
    finally:
        torch._dynamo.reset()
    assert named(graphs["fw"], "syncopate.") == ["syncopate.ag_gemm.default", "syncopate.gemm_rs.default"]
    assert sorted(named(graphs["bw"], "syncopate.")) == [
        "syncopate.ag_gemm_gathered.default",
        "syncopate.gemm_rs.default",
    ], graphs["bw"]


# --- gradients at world 1, against float64 -----------------------------------------------------------


def reference(op, a, b):
    """The op at world 1 in float64: every collective is the identity."""
    return a.double() @ b.double()


def check_gradients(op, dtype, layout, m=32, k=40, n=48):
    a, w, b = operands(op, m, k, n, dtype, layout, seed=zlib.crc32(f"{op} {layout}".encode()))
    out = run_op(op, a, b)
    gen = torch.Generator().manual_seed(7)
    grad_out = torch.randn(out.shape, generator=gen).to(dtype)
    out.backward(grad_out)
    ar = a.detach().double().requires_grad_(True)
    wr = w.detach().double().requires_grad_(True)
    ref = reference(op, ar, wr.t() if layout == "nk" else wr)
    ref.backward(grad_out.double())
    assert out.dtype == dtype and a.grad.dtype == dtype and w.grad.dtype == dtype
    assert rel_error(out, ref) < TOLERANCE[dtype]
    assert rel_error(a.grad, ar.grad) < TOLERANCE[dtype], "input gradient"
    assert rel_error(w.grad, wr.grad) < TOLERANCE[dtype], "weight gradient"
    # The weight's own gradient has the weight's layout (row-major), whichever way b was passed.
    assert w.grad.is_contiguous()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_gradients_at_world_one(op, dtype, layout):
    check_gradients(op, dtype, layout)


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar"])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_gradients_through_the_fused_kernels(fused_contexts, op, layout):
    """Forward and both backward ops run the transformed GEMM (Triton's interpreter)."""
    check_gradients(op, BF16, layout, m=64, k=40, n=48)
    assert fused_contexts and all(
        ctx.decision == "fused" and ctx.kernel_origin == "transformer" for ctx in fused_contexts
    )
    # Forward, input gradient (the dual op: for ag_gemm a GEMM+RS and vice versa; gemm_ar's
    # backward is a plain matmul).
    kinds = [type(ctx).__name__ for ctx in fused_contexts]
    assert kinds[0] == {"ag_gemm": "AgGemm", "gemm_rs": "GemmRs", "gemm_ar": "GemmAr"}[op]
    if op == "ag_gemm":
        assert "GemmRs" in kinds
    if op == "gemm_rs":
        assert "AgGemm" in kinds


def test_bf16_gradients_against_an_fp32_reference():
    """A two-layer tensor-parallel MLP at world 1 in bf16 vs the same in float32."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(16, 32, generator=gen)
    w_up = torch.randn(64, 32, generator=gen) / 32**0.5
    w_down = torch.randn(32, 64, generator=gen) / 64**0.5

    def mlp(x, w_up, w_down, fused):
        if fused:
            h = sops.ag_gemm(x, w_up.t())
            return sops.gemm_rs(torch.nn.functional.silu(h), w_down.t())
        return torch.nn.functional.silu(x @ w_up.t()) @ w_down.t()

    leaves = [t.to(BF16).requires_grad_(True) for t in (x, w_up, w_down)]
    mlp(*leaves, fused=True).float().square().sum().backward()
    ref_leaves = [t.to(BF16).float().requires_grad_(True) for t in (x, w_up, w_down)]
    mlp(*ref_leaves, fused=False).square().sum().backward()
    for got, ref in zip(leaves, ref_leaves):
        assert rel_error(got.grad, ref.grad) < TOLERANCE[BF16]


def test_no_gradient_asked_runs_no_backward_op(monkeypatch):
    calls = []
    real = custom_ops._run_on_gpu
    monkeypatch.setattr(custom_ops, "_run_on_gpu", lambda op, *a: (calls.append(op), real(op, *a))[1])
    a, w, b = operands("ag_gemm", 8, 16, 24, BF16, "kn")
    w.requires_grad_(False)
    torch.ops.syncopate.ag_gemm(a, b, 1, custom_ops.NO_GROUP).float().sum().backward()
    assert calls == ["ag_gemm", "gemm_rs"] and w.grad is None and a.grad is not None
    calls.clear()
    with torch.no_grad():
        torch.ops.syncopate.gemm_rs(a, b, 1, custom_ops.NO_GROUP)
    assert calls == ["gemm_rs"]


# --- world 1 without torch.distributed -----------------------------------------------------------


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_public_functions_run_at_world_one_without_torch_distributed(op):
    a, _, b = operands(op, 8, 16, 24, BF16, "kn", requires_grad=False)
    out = getattr(sops, op)(a, b)
    assert rel_error(out, a.double() @ b.double()) < TOLERANCE[BF16]


def test_public_ag_gemm_gathered_at_world_one():
    a, _, b = operands("ag_gemm", 8, 16, 24, BF16, "kn", requires_grad=False)
    out, gathered = sops.ag_gemm_gathered(a, b)
    assert torch.equal(gathered, a) and gathered.data_ptr() != a.data_ptr()
    assert rel_error(out, a.double() @ b.double()) < TOLERANCE[BF16]


def test_no_group_is_one_rank_only():
    a, _, b = operands("ag_gemm", 8, 16, 24, BF16, "kn", requires_grad=False)
    with pytest.raises(
        syncopate.UserError, match=r"world_size=2 with no process group \(group name '' means one rank\)"
    ):
        torch.ops.syncopate.ag_gemm(a, b, 2, custom_ops.NO_GROUP)


def test_no_group_refused_while_torch_distributed_is_initialized(single_rank_group):
    a, _, b = operands("gemm_rs", 8, 16, 24, BF16, "kn", requires_grad=False)
    with pytest.raises(
        syncopate.UserError,
        match=r"group name '' \(one rank without torch.distributed\) was "
        r"given while torch.distributed is initialized",
    ):
        torch.ops.syncopate.gemm_rs(a, b, 1, custom_ops.NO_GROUP)


def test_public_functions_use_the_default_group_once_initialized(single_rank_group):
    a, _, b = operands("gemm_ar", 8, 16, 24, BF16, "kn", requires_grad=False)
    assert custom_ops.group_args("gemm_ar", None) == (single_rank_group.group_name, 1)
    out = sops.gemm_ar(a, b)  # the gloo group's torch path at world 1
    assert rel_error(out, a.double() @ b.double()) < TOLERANCE[BF16]


def test_cpu_operands_need_the_interpreter(monkeypatch):
    a, _, b = operands("ag_gemm", 8, 16, 24, BF16, "kn", requires_grad=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(
        syncopate.UserError,
        match=r"must be on a CUDA device \(or the CPU under Triton's "
        r"interpreter, TRITON_INTERPRET=1\), got cpu",
    ):
        sops.ag_gemm(a, b)


# --- ag_gemm_gathered's hand-over to the runtime ---------------------------------------------------


def test_gathered_variant_hands_gathered_out_to_the_runtime(monkeypatch):
    """A runtime forward() taking gathered_out fills it (the fused path, copied before the heap
    is reused); ag_gemm_gathered then returns that tensor and runs nothing else."""
    import types

    seen = {}

    def forward(a, b, *, group, gathered_out=None):
        seen["group"], seen["gathered_out"] = group, gathered_out
        gathered_out.fill_(3)
        return a.new_full((a.shape[0], b.shape[1]), 5)

    monkeypatch.setattr(custom_ops, "_runtime_module", lambda op: types.SimpleNamespace(forward=forward))
    a, _, b = operands("ag_gemm", 8, 16, 24, BF16, "kn", requires_grad=False)
    out, gathered = torch.ops.syncopate.ag_gemm_gathered(a, b, 1, custom_ops.NO_GROUP)
    assert gathered is not None and bool((gathered == 3).all()) and bool((out == 5).all())
    assert tuple(seen["gathered_out"].shape) == (8, 16) and seen["group"].size() == 1
