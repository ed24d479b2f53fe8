"""The PyTorch tensor-parallel linear layers that bench_tp_block.py times against Syncopate's.

Both pairs have the constructor, weight shards and sequence-parallel layouts of
syncopate.nn.ColumnParallelLinear / RowParallelLinear (they subclass them and replace forward),
so the same TPBlock runs on each:

- TorchColumn / TorchRow ("torch_tp"): NCCL collectives + cuBLAS GEMMs, one after the other, as
  Megatron-LM runs sequence parallelism. Column forward: all-gather x, then the GEMM; backward:
  the re-gather of x is issued before the input-gradient GEMM, the reduce-scatter of that
  gradient before the weight-gradient GEMM, so each collective overlaps the GEMM after it
  (Megatron's async communication). Row forward: the GEMM, then reduce-scatter; backward:
  all-gather grad_y, then both GEMMs. The collectives are torch's functional collectives, so
  torch.compile traces them and Inductor's micro-pipeline TP pass
  (torch._inductor.config._micro_pipeline_tp) can fuse them with the GEMMs: that is the
  "async_tp_compile" variant.
- AsyncTPColumn / AsyncTPRow ("async_tp"): PyTorch's async-TP ops in eager mode,
  torch.ops.symm_mem.fused_all_gather_matmul and fused_matmul_reduce_scatter (symmetric memory),
  forward and backward each through the fused op of their direction; the gathered input of the
  forward is kept for the weight gradient (return_A=True).
"""

from __future__ import annotations

import torch

from syncopate.nn import ColumnParallelLinear, RowParallelLinear


def _funcol():
    return torch.ops._c10d_functional


def _all_gather(x, world, group_name):
    if world == 1:
        return x
    return _funcol().wait_tensor(_funcol().all_gather_into_tensor(x.contiguous(), world, group_name))


def _reduce_scatter(x, world, group_name):
    if world == 1:
        return x
    return _funcol().wait_tensor(_funcol().reduce_scatter_tensor(x.contiguous(), "sum", world, group_name))


class _TorchColumnFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, world, group_name):
        ctx.save_for_backward(x, weight)
        ctx.world, ctx.group_name = world, group_name
        return _all_gather(x, world, group_name) @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        world, group = ctx.world, ctx.group_name
        f = _funcol()
        gathered = x if world == 1 else f.all_gather_into_tensor(x.contiguous(), world, group)  # in flight
        grad_in = grad @ weight  # overlaps it
        if world > 1:
            grad_in = f.reduce_scatter_tensor(grad_in, "sum", world, group)  # in flight
            gathered = f.wait_tensor(gathered)
        grad_w = grad.t() @ gathered  # overlaps the RS
        if world > 1:
            grad_in = f.wait_tensor(grad_in)
        return grad_in, grad_w, None, None


class _TorchRowFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, world, group_name):
        ctx.save_for_backward(x, weight)
        ctx.world, ctx.group_name = world, group_name
        return _reduce_scatter(x @ weight.t(), world, group_name)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gathered = _all_gather(grad, ctx.world, ctx.group_name)
        return gathered @ weight, gathered.t() @ x, None, None


class _SequenceParallelOnly:
    """The baselines cover the layers' sequence-parallel form only (what the block uses)."""

    def __init__(self, *args, **kwargs):
        if not kwargs.get("sequence_parallel", True):
            raise ValueError(f"{type(self).__name__}: only sequence_parallel=True is implemented")
        super().__init__(*args, **kwargs)


class TorchColumn(_SequenceParallelOnly, ColumnParallelLinear):
    def forward(self, x):
        self._check_input(x, self.in_features, "S/w")
        y = _TorchColumnFn.apply(x.reshape(-1, self.in_features), self.weight, self.world_size, self.group_name)
        return y.reshape(x.shape[0] * self.world_size, *x.shape[1:-1], self.out_per_rank)


class TorchRow(_SequenceParallelOnly, RowParallelLinear):
    def forward(self, x):
        self._check_input(x, self.in_per_rank, "S")
        y = _TorchRowFn.apply(x.reshape(-1, self.in_per_rank), self.weight, self.world_size, self.group_name)
        return y.reshape(x.shape[0] // self.world_size, *x.shape[1:-1], self.out_features)


def _symm():
    import torch.distributed._symmetric_memory as symm_mem  # noqa: F401  (registers torch.ops.symm_mem)

    return torch.ops.symm_mem


def enable_symmetric_memory(group_name: str) -> str | None:
    """Prepares async-TP for the group; the reason it cannot run, or None."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(group_name)
        _symm()
        return None
    except Exception as error:  # a torch without symmetric memory, or no P2P between the GPUs
        return f"{type(error).__name__}: {error}"


class _AsyncTPColumnFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, group_name):
        gathered, outs = _symm().fused_all_gather_matmul(x, [weight.t()], 0, group_name, return_A=True)
        ctx.save_for_backward(gathered, weight)
        ctx.group_name = group_name
        return outs[0]

    @staticmethod
    def backward(ctx, grad):
        gathered, weight = ctx.saved_tensors
        grad_in = _symm().fused_matmul_reduce_scatter(grad.contiguous(), weight, "sum", 0, ctx.group_name)
        return grad_in, grad.t() @ gathered, None


class _AsyncTPRowFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, group_name):
        ctx.save_for_backward(x, weight)
        ctx.group_name = group_name
        return _symm().fused_matmul_reduce_scatter(x, weight.t(), "sum", 0, group_name)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        gathered, outs = _symm().fused_all_gather_matmul(grad.contiguous(), [weight], 0, ctx.group_name, return_A=True)
        return outs[0], gathered.t() @ x, None


class AsyncTPColumn(_SequenceParallelOnly, ColumnParallelLinear):
    def forward(self, x):
        self._check_input(x, self.in_features, "S/w")
        y = _AsyncTPColumnFn.apply(x.reshape(-1, self.in_features), self.weight, self.group_name)
        return y.reshape(x.shape[0] * self.world_size, *x.shape[1:-1], self.out_per_rank)


class AsyncTPRow(_SequenceParallelOnly, RowParallelLinear):
    def forward(self, x):
        self._check_input(x, self.in_per_rank, "S")
        y = _AsyncTPRowFn.apply(x.reshape(-1, self.in_per_rank), self.weight, self.group_name)
        return y.reshape(x.shape[0] // self.world_size, *x.shape[1:-1], self.out_features)
