"""torch.compile(fullgraph=True) traces the fused ops as single graph nodes, on the CPU: inputs
are fake CUDA tensors, so only the fake implementations run and no GPU is needed."""

import pytest

torch = pytest.importorskip("torch")

import syncopate
import syncopate.ops as sops

BF16 = torch.bfloat16


def cuda(*shape, dtype=BF16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


class GraphRecorder:
    """A torch.compile backend that keeps each FX graph and runs it as traced (on fake tensors)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self):
        return [str(n.target) for gm in self.graphs for n in gm.graph.nodes if n.op == "call_function"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tensor_parallel_mlp(x_shard, w_up, w_down):
    """Column-parallel then row-parallel layer, as a model would write it."""
    h = sops.ag_gemm(x_shard, w_up)
    h = torch.nn.functional.gelu(h)
    return sops.gemm_rs(h, w_down)


@pytest.mark.parametrize("dynamic", [False, True])
def test_fullgraph_trace_of_public_functions(single_rank_group, fake_mode, dynamic):
    recorder = GraphRecorder()
    compiled = torch.compile(tensor_parallel_mlp, fullgraph=True, backend=recorder, dynamic=dynamic)
    out = compiled(cuda(16, 64), cuda(64, 96), cuda(96, 64))
    assert tuple(out.shape) == (16, 64)
    assert out.dtype == BF16 and out.device.type == "cuda"
    assert len(recorder.graphs) == 1, "fullgraph must give one graph"
    targets = recorder.targets()
    assert "syncopate.ag_gemm.default" in targets or "syncopate.ag_gemm" in targets, targets
    assert any(t.startswith("syncopate.gemm_rs") for t in targets), targets


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_compiled_ops_give_fake_output_shapes(fake_mode, backend, world):
    # The raw ops with an explicit world size: what a multi-rank graph looks like on one CPU.
    def layer(x_shard, w_up, w_down, w_out):
        h = torch.ops.syncopate.ag_gemm(x_shard, w_up, world, "tp")
        y = torch.ops.syncopate.gemm_rs(h, w_down, world, "tp")
        return torch.ops.syncopate.gemm_ar(y, w_out, world, "tp")

    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    shard = 2 * world  # so that gemm_rs's output rows still split evenly for gemm_ar
    out = compiled(cuda(shard, 32), cuda(32, 48), cuda(48, 40), cuda(40, 24))
    # ag_gemm: [shard*w, 48]; gemm_rs: [shard, 40]; gemm_ar: [shard, 24]
    assert tuple(out.shape) == (shard, 24)
    assert out.dtype == BF16


def test_aot_eager_graph_keeps_the_custom_ops(fake_mode):
    seen = []

    def inner(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=inner)

    def f(a, b):
        return torch.ops.syncopate.gemm_ar(a, b, 2, "tp") * 2

    out = torch.compile(f, fullgraph=True, backend=backend)(cuda(8, 16), cuda(16, 8))
    assert tuple(out.shape) == (8, 8)
    # After AOT autograd the op is still one opaque node (not decomposed).
    assert any("syncopate.gemm_ar" in t for t in seen), seen


def test_bad_shapes_are_reported_while_tracing(fake_mode):
    def f(a, b):
        return torch.ops.syncopate.gemm_rs(a, b, 4, "tp")

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    # Dynamo wraps the error raised by the fake implementation; the message must survive.
    with pytest.raises(Exception, match=r"a has M=10 rows.*world size 4"):
        compiled(cuda(10, 16), cuda(16, 8))


def test_public_function_bad_shapes_eager(single_rank_group, fake_mode):
    with pytest.raises(syncopate.ShapeError, match="inner dimensions differ"):
        sops.ag_gemm(cuda(8, 16), cuda(12, 8))
