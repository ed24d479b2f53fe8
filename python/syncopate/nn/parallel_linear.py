"""Tensor-parallel linear layers on the fused ops, with Megatron-style sequence parallelism.

    col = ColumnParallelLinear(4096, 14336, bias=False, group=tp)   # x [S/w, (B,) 4096] -> [S, (B,) 14336/w]
    row = RowParallelLinear(14336, 4096, bias=False, group=tp)      # [S, (B,) 14336/w] -> [S/w, (B,) 4096]

Between the two the activations are split by features (each rank holds out/w columns); outside
them by sequence (each rank holds S/w positions): the column-parallel layer gathers the
sequence while it multiplies (AG+GEMM, sy.ops.ag_gemm) and the row-parallel one reduces the
partial products while it scatters the sequence (GEMM+RS, sy.ops.gemm_rs). Their backwards are
the dual ops (ops/autograd.py). The sequence is the first dimension (Megatron's [s, b, h]
layout), so the rows of the flattened [S/w * B, H] input are whole sequence positions.

Weights are shards of an nn.Linear's weight [out, in], in the same layout as Megatron's layers:
ColumnParallelLinear holds rows [r * out/w, (r+1) * out/w) of it (and of the bias), and
RowParallelLinear columns [r * in/w, (r+1) * in/w) (and the whole bias, added after the
reduction). Both are initialised with nn.Linear's distribution for the full layer (uniform in
+-1/sqrt(in_features)), or by `init_method(shard)` as in Megatron. Unlike Megatron's layers,
forward returns the output tensor (as nn.Linear does), not an (output, bias) pair.

With sequence parallelism a replicated parameter (RowParallelLinear's bias, a norm's weight)
sees only this rank's positions, so its gradient is partial on every rank; such parameters
carry `sequence_parallel = True` (Megatron's marker) and allreduce_sequence_parallel_grads()
sums their gradients over the group.

sequence_parallel=False gives the layers without it: ColumnParallelLinear then takes the whole
replicated input [S, (B,) in] (its input gradient is all-reduced in the backward) and
RowParallelLinear returns the whole reduced output [S, (B,) out] (GEMM+AR, sy.ops.gemm_ar).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from syncopate.errors import ShapeError, UserError
from syncopate.runtime import resolve_device
from syncopate.ops.custom_ops import NO_GROUP, SUPPORTED_DTYPES, device_supported, group_args

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "allreduce_sequence_parallel_grads"]


def _group_rank(group) -> int:
    import torch.distributed as dist

    if group is None and not (dist.is_available() and dist.is_initialized()):
        return 0
    return dist.get_rank(group)


def _check_features(who: str, **features) -> None:
    for name, value in features.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{who}: {name} must be a positive integer, got {value!r}")


def _default_device() -> torch.device:
    """The current CUDA device, as Megatron's layers use; the CPU where there is none."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _check_device(who: str, device: torch.device) -> None:
    # "meta": built without storage, materialised later (deferred initialisation).
    if device.type != "meta" and not device_supported(device):
        raise UserError(
            f"{who}: device {device} is not supported; the fused ops run on CUDA devices "
            "(the CPU only under Triton's interpreter, TRITON_INTERPRET=1)"
        )


class _ParallelLinear(nn.Module):
    """What the two layers share: the group, the checks, the weight shard and its initialisation."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        group=None,
        sequence_parallel: bool = True,
        dtype: Optional[torch.dtype] = None,
        device=None,
        init_method: Optional[Callable[[torch.Tensor], None]] = None,
    ):
        super().__init__()
        who = type(self).__name__
        _check_features(who, in_features=in_features, out_features=out_features)
        dtype = torch.bfloat16 if dtype is None else dtype
        if dtype not in SUPPORTED_DTYPES:
            raise UserError(
                f"{who}: dtype {dtype} is not supported; the fused ops take "
                f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}"
            )
        device = _default_device() if device is None else resolve_device(device)
        _check_device(who, device)
        if init_method is not None and not callable(init_method):
            raise UserError(
                f"{who}: init_method must be callable (it is given the weight shard), got {type(init_method).__name__}"
            )
        group_name, world = group_args(who, group)
        self.group = group
        self.group_name = group_name
        self.world_size = world
        self.rank = _group_rank(group) if group_name != NO_GROUP else 0
        self.in_features, self.out_features = in_features, out_features
        self.sequence_parallel = bool(sequence_parallel)
        self.init_method = init_method
        shard_in, shard_out = self._shard_features(who)
        self.weight = nn.Parameter(torch.empty(shard_out, shard_in, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(self._bias_features(), dtype=dtype, device=device)) if bias else None
        if self.bias is not None and self.sequence_parallel and self._bias_grad_covers_own_positions:
            self.bias.sequence_parallel = True  # its gradient covers this rank's positions only
        self.reset_parameters()

    # A layer whose sequence-parallel output is this rank's positions (RowParallelLinear) has a
    # bias whose gradient sums over those positions only: Megatron's optimiser all-reduces such
    # parameters, which it finds by this attribute.
    _bias_grad_covers_own_positions = False

    def _shard_features(self, who: str):
        raise NotImplementedError

    def _bias_features(self) -> int:
        raise NotImplementedError

    def _divisible(self, who: str, name: str, value: int) -> int:
        if value % self.world_size != 0:
            raise ShapeError(
                f"{who}: {name}={value} is not divisible by the tensor-parallel world size "
                f"{self.world_size}; every rank holds {name} / {self.world_size}"
            )
        return value // self.world_size

    def reset_parameters(self) -> None:
        """nn.Linear's distribution for the full layer (uniform in +-1/sqrt(in_features)), or
        init_method(weight shard); the bias always from nn.Linear's."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            if self.init_method is not None:
                self.init_method(self.weight)
            else:
                self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def _check_input(self, x: torch.Tensor, features: int, what: str) -> None:
        who = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise UserError(f"{who}: input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() not in (2, 3) or x.shape[-1] != features:
            raise ShapeError(
                f"{who}: input must be [{what}, {features}] or [{what}, batch, {features}] "
                f"(sequence first), got {list(x.shape)}"
            )
        if x.dtype != self.weight.dtype:
            raise UserError(f"{who}: input is {x.dtype} but the weight is {self.weight.dtype}; they must match")
        if x.device != self.weight.device:
            raise UserError(f"{who}: input is on {x.device} but the weight is on {self.weight.device}")

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, world_size={self.world_size}, rank={self.rank}, "
            f"sequence_parallel={self.sequence_parallel}"
        )


class ColumnParallelLinear(_ParallelLinear):
    """y = x @ W^T (+ b), W split by output features: [out/w, in] on each rank.

    sequence_parallel=True (default): x [S/w, (B,) in], this rank's positions -> y [S, (B,) out/w]
    through the fused AG+GEMM (the sequence gathered while multiplying). False: x [S, (B,) in]
    replicated -> y [S, (B,) out/w], a local GEMM whose input gradient is all-reduced.
    """

    def _shard_features(self, who: str):
        self.out_per_rank = self._divisible(who, "out_features", self.out_features)
        return self.in_features, self.out_per_rank

    def _bias_features(self) -> int:
        return self.out_per_rank

    def load_full(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        """Copy this rank's shard of a full nn.Linear weight [out, in] (and bias [out])."""
        lo, hi = self.rank * self.out_per_rank, (self.rank + 1) * self.out_per_rank
        _load(self, weight, (self.out_features, self.in_features), lambda w: w[lo:hi], bias, lambda b: b[lo:hi])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x, self.in_features, "S/w" if self.sequence_parallel else "S")
        rows = x.reshape(-1, self.in_features)
        if self.sequence_parallel:
            y = torch.ops.syncopate.ag_gemm(rows, self.weight.t(), self.world_size, self.group_name)
            seq = x.shape[0] * self.world_size
        else:
            y = _copy_to_parallel_region(rows, self.world_size, self.group_name) @ self.weight.t()
            seq = x.shape[0]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(seq, *x.shape[1:-1], self.out_per_rank)


class RowParallelLinear(_ParallelLinear):
    """y = x @ W^T (+ b), W split by input features: [out, in/w] on each rank; x is this rank's
    in/w features (a ColumnParallelLinear's output).

    sequence_parallel=True (default): x [S, (B,) in/w] -> y [S/w, (B,) out], this rank's positions
    of the sum over ranks (the fused GEMM+RS); S must be a multiple of the world size. False:
    y [S, (B,) out], the whole sum on every rank (GEMM+AR). The bias (whole, [out]) is added after
    the reduction.
    """

    _bias_grad_covers_own_positions = True

    def _shard_features(self, who: str):
        self.in_per_rank = self._divisible(who, "in_features", self.in_features)
        return self.in_per_rank, self.out_features

    def _bias_features(self) -> int:
        return self.out_features

    def load_full(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
        """Copy this rank's shard of a full nn.Linear weight [out, in] (and the whole bias [out])."""
        lo, hi = self.rank * self.in_per_rank, (self.rank + 1) * self.in_per_rank
        _load(self, weight, (self.out_features, self.in_features), lambda w: w[:, lo:hi], bias, lambda b: b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        who = type(self).__name__
        self._check_input(x, self.in_per_rank, "S")
        if self.sequence_parallel and x.shape[0] % self.world_size != 0:
            raise ShapeError(
                f"{who}: the sequence length {x.shape[0]} (input dim 0) is not divisible by the "
                f"tensor-parallel world size {self.world_size}; each rank keeps S / "
                f"{self.world_size} positions"
            )
        rows = x.reshape(-1, self.in_per_rank)
        if self.sequence_parallel:
            y = torch.ops.syncopate.gemm_rs(rows, self.weight.t(), self.world_size, self.group_name)
            seq = x.shape[0] // self.world_size
        else:
            y = torch.ops.syncopate.gemm_ar(rows, self.weight.t(), self.world_size, self.group_name)
            seq = x.shape[0]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(seq, *x.shape[1:-1], self.out_features)


def _load(module: _ParallelLinear, weight, full_shape, take_weight, bias, take_bias) -> None:
    who = type(module).__name__
    if tuple(weight.shape) != tuple(full_shape):
        raise ShapeError(
            f"{who}.load_full: weight must be the full [{full_shape[0]}, {full_shape[1]}], got {list(weight.shape)}"
        )
    if (bias is None) != (module.bias is None):
        raise UserError(
            f"{who}.load_full: the layer {'has' if module.bias is not None else 'has no'} bias "
            f"but bias={'None' if bias is None else 'a tensor'} was given"
        )
    with torch.no_grad():
        module.weight.copy_(take_weight(weight))
        if bias is not None:
            if tuple(bias.shape) != (full_shape[0],):
                raise ShapeError(f"{who}.load_full: bias must be [{full_shape[0]}], got {list(bias.shape)}")
            module.bias.copy_(take_bias(bias))


class _CopyToParallelRegion(torch.autograd.Function):
    """Identity forward; the backward sums the input gradient over the group (every rank's
    column-parallel GEMM used the whole replicated input)."""

    @staticmethod
    def forward(ctx, x, world, group_name):
        ctx.world, ctx.group_name = world, group_name
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.world == 1:
            return grad, None, None
        out = torch.ops._c10d_functional.all_reduce(grad.contiguous(), "sum", ctx.group_name)
        return torch.ops._c10d_functional.wait_tensor(out), None, None


def _copy_to_parallel_region(x: torch.Tensor, world: int, group_name: str) -> torch.Tensor:
    if world == 1:
        return x
    return _CopyToParallelRegion.apply(x, world, group_name)


def allreduce_sequence_parallel_grads(module: nn.Module, group=None) -> int:
    """Sums, over `group`, the gradients of the parameters marked `sequence_parallel = True`
    (replicated parameters used on this rank's positions only); returns how many. Call after
    backward, before the optimizer step. Nothing to do at world size 1."""
    import torch.distributed as dist

    params = [p for p in module.parameters() if getattr(p, "sequence_parallel", False) and p.grad is not None]
    if params and dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        for p in params:
            dist.all_reduce(p.grad, group=group)
    return len(params)
