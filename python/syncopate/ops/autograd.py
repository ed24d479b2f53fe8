"""Backward formulas of the fused ops (torch.library.register_autograd), so that tensor-parallel
layers built on them train. Imported by custom_ops.py, which registers the ops.

Tensor parallelism pairs the ops: the input gradient of one is the other.

    ag_gemm            Y = AG(x) @ W              x [M/w, K], W [K, N], Y [M, N]
        grad_x = RS(grad_Y @ W^T)                 the fused GEMM+RS (gemm_rs)
        grad_W = AG(x)^T @ grad_Y                 x re-gathered, overlapped with that GEMM+RS
    ag_gemm_gathered   (Y, G) = (AG(x) @ W, AG(x))
        grad_x = RS(grad_Y @ W^T) (+ RS(grad_G))  gemm_rs
        grad_W = G^T @ grad_Y                     G kept from the forward: no collective
    gemm_rs            Y = RS(x @ W)              x [M, K/w], W [K/w, N], Y [M/w, N]
        grad_x = AG(grad_Y) @ W^T                 the fused AG+GEMM ...
        grad_W = x^T @ AG(grad_Y)                 ... whose gathered grad_Y it also returns
                                                  (ag_gemm_gathered): one all-gather for both
    gemm_ar            Y = AR(x @ W)              Y [M, N] on every rank
        grad_x = grad_Y @ W^T, grad_W = x^T @ grad_Y   (grad_Y is the same on every rank, as the
                                                  backward of Megatron's all-reduce assumes)

Each fused op of a backward is the op itself, so its context decides between fused and
sequential (mode "auto", the simulator) exactly as in a forward: no second decision here.

The weight gradient of ag_gemm re-gathers x (Megatron's choice with sequence parallelism) instead
of keeping AG(x) from the forward: no [M, K] activation is held per layer between forward and
backward, and the gather is issued before the GEMM+RS and waited for only by the weight-gradient
GEMM after it, so it overlaps that op. It goes through torch's functional collectives, which
torch.compile traces. ag_gemm_gathered is the other choice (keep G, no collective in the
backward), used by gemm_rs's backward where the gather is needed anyway.

At world size 1 there is no collective: AG and RS are the identity.
"""

from __future__ import annotations

import torch

from syncopate.ops.common import refuse_gloo_capture
from syncopate.ops.custom_ops import ag_gemm_gathered_op, ag_gemm_op, gemm_ar_op, gemm_rs_op


def _issue_all_gather(x: torch.Tensor, world: int, group_name: str) -> torch.Tensor:
    """AG(x) along dim 0, issued now and not waited for (pass the result to _wait)."""
    if world == 1:
        return x
    if x.device.type == "cuda" and _is_gloo(group_name):
        return gather_by_all_reduce(x, world, group_name)
    return torch.ops._c10d_functional.all_gather_into_tensor(x.contiguous(), world, group_name)


def _group(group_name: str):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


def _is_gloo(group_name: str) -> bool:
    import torch.distributed as dist

    return dist.get_backend(_group(group_name)) == "gloo"


def gather_by_all_reduce(x: torch.Tensor, world: int, group_name: str) -> torch.Tensor:
    """AG(x) along dim 0 as the all-reduce of this rank's rows placed in zeros (exact: x + 0).

    For gloo with CUDA tensors, which only the tests with ranks sharing one GPU use: there the
    functional all-gather (gloo's allgather_into_tensor_coalesced) hands CUDA pointers to host
    code and the process segfaults (torch 2.11), while gloo's all-reduce stages CUDA tensors
    through host memory correctly. It moves `world` times the bytes; a test mode can pay that."""
    import torch.distributed as dist

    group = _group(group_name)
    refuse_gloo_capture("the backward's all-gather (syncopate.ops)", group, x.device)
    rank = dist.get_rank(group)
    rows = x.shape[0]
    padded = x.new_zeros((rows * world,) + tuple(x.shape[1:]))
    padded[rank * rows : (rank + 1) * rows] = x
    return torch.ops._c10d_functional.all_reduce(padded, "sum", group_name)


def _wait(t: torch.Tensor, world: int) -> torch.Tensor:
    return t if world == 1 else torch.ops._c10d_functional.wait_tensor(t)


def _reduce_scatter(x: torch.Tensor, world: int, group_name: str) -> torch.Tensor:
    if world == 1:
        return x
    if x.device.type == "cuda":  # refused only while capturing, over gloo
        refuse_gloo_capture("the backward's reduce-scatter (syncopate.ops)", _group(group_name), x.device)
    out = torch.ops._c10d_functional.reduce_scatter_tensor(x.contiguous(), "sum", world, group_name)
    return torch.ops._c10d_functional.wait_tensor(out)


def _weight_grad(left: torch.Tensor, right: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """left^T @ right ([M, K]^T @ [M, N]), the gradient of b [K, N]. When b is the transpose view
    of a row-major [N, K] weight (an nn.Linear weight passed as weight.t()), it is computed as
    (right^T @ left)^T, so that the weight's own gradient comes out row-major."""
    if not b.is_contiguous() and b.t().is_contiguous():
        return (right.t() @ left).t()
    return left.t() @ right


# --- ag_gemm ---------------------------------------------------------------------------------------


def _ag_gemm_setup(ctx, inputs, output):
    a_shard, b, world_size, group_name = inputs
    ctx.world, ctx.group = world_size, group_name
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(a_shard if need_b else None, b if need_a or need_b else None)


def _ag_gemm_backward(ctx, grad):
    a_shard, b = ctx.saved_tensors
    world, group = ctx.world, ctx.group
    grad_a = grad_b = None
    # The gather for the weight gradient is issued first so that it overlaps the GEMM+RS.
    gathered = _issue_all_gather(a_shard, world, group) if ctx.needs_input_grad[1] else None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.syncopate.gemm_rs(grad, b.t(), world, group)
    if gathered is not None:
        grad_b = _weight_grad(_wait(gathered, world), grad, b)
    return grad_a, grad_b, None, None


ag_gemm_op.register_autograd(_ag_gemm_backward, setup_context=_ag_gemm_setup)


# --- ag_gemm_gathered ------------------------------------------------------------------------------


def _ag_gemm_gathered_setup(ctx, inputs, output):
    _, b, world_size, group_name = inputs
    ctx.world, ctx.group = world_size, group_name
    ctx.set_materialize_grads(False)  # an unused output's gradient stays None: no collective for it
    ctx.save_for_backward(b, output[1] if ctx.needs_input_grad[1] else None)


def _ag_gemm_gathered_backward(ctx, grad, grad_gathered):
    b, gathered = ctx.saved_tensors
    world, group = ctx.world, ctx.group
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        if grad is not None:
            grad_a = torch.ops.syncopate.gemm_rs(grad, b.t(), world, group)
        if grad_gathered is not None:
            scattered = _reduce_scatter(grad_gathered, world, group)
            grad_a = scattered if grad_a is None else grad_a + scattered
    if ctx.needs_input_grad[1] and grad is not None:
        grad_b = _weight_grad(gathered, grad, b)
    return grad_a, grad_b, None, None


ag_gemm_gathered_op.register_autograd(_ag_gemm_gathered_backward, setup_context=_ag_gemm_gathered_setup)


# --- gemm_rs ---------------------------------------------------------------------------------------


def _gemm_rs_setup(ctx, inputs, output):
    a, b, world_size, group_name = inputs
    ctx.world, ctx.group = world_size, group_name
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(a if need_b else None, b if need_a or need_b else None)


def _gemm_rs_backward(ctx, grad):
    a, b = ctx.saved_tensors
    world, group = ctx.world, ctx.group
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    grad_a = grad_b = None
    if need_a and need_b and world > 1:
        # One all-gather of grad_Y feeds both: the AG+GEMM's, handed out with its result.
        grad_a, gathered = torch.ops.syncopate.ag_gemm_gathered(grad, b.t(), world, group)
        grad_b = _weight_grad(a, gathered, b)
    else:
        if need_a:
            grad_a = torch.ops.syncopate.ag_gemm(grad, b.t(), world, group)
        if need_b:
            gathered = _wait(_issue_all_gather(grad, world, group), world)
            grad_b = _weight_grad(a, gathered, b)
    return grad_a, grad_b, None, None


gemm_rs_op.register_autograd(_gemm_rs_backward, setup_context=_gemm_rs_setup)


# --- gemm_ar ---------------------------------------------------------------------------------------


def _gemm_ar_setup(ctx, inputs, output):
    a, b, world_size, group_name = inputs
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(a if need_b else None, b if need_a else None)


def _gemm_ar_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = grad @ b.t() if ctx.needs_input_grad[0] else None
    grad_b = _weight_grad(a, grad, b) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None, None


gemm_ar_op.register_autograd(_gemm_ar_backward, setup_context=_gemm_ar_setup)
