"""GEMM+RS: reduce_scatter(a @ b_shard, dim 0), the reduction overlapped with the GEMM.

    op = GemmRs(group, m=M, k=K_local, n=N, dtype=torch.bfloat16, backend="sm-copy")
    out = op(a, b_shard)          # a [M, K/w], b_shard [K/w, N]  ->  out [M/w, N]

How: the partial product C = a @ b_shard is written by the fused GEMM straight into the
symmetric heap (plan tensor "c"); every tile, once stored, raises the *ready* slots of the chunks
that carry it and the *dst-ready* slots of the chunks that will add into it. The executor's
chunks of a reduce-scatter plan (reduce-add) leave as soon as their source tiles are ready and
land (staging + add kernel, or an SM add) once the destination's own tiles are stored. The
stream then waits for every chunk landing here and copies this rank's reduced rows out.
Small M (fewer than BLOCK_M rows per rank) runs sequentially: torch.matmul, then the plan.

GemmAr (gemm_ar.py) is the same with an all-reduce plan: every rank ends with all of C.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.errors import ShapeError, UserError
from syncopate.ops.ag_gemm import (BACKENDS, BLOCK_M, BLOCK_N, CHECK_EACH_CALL, RESERVED_SMS, FusedGemmLauncher,
                                   _barrier, _group_rank_world, check_out, context_for, default_backend)
from syncopate.runtime import DEFAULT_WAIT_BOUND_NS, PlanWorkspace, plan_dtype


class ProducerGemm:
    """A GEMM whose output C [m, n] a collective plan on tensor "c" then carries (RS or AR)."""

    collective = "reduce-scatter"

    def __init__(self, group, *, m: int, k: int, n: int, dtype: torch.dtype,
                 device: Optional[torch.device] = None, backend: str = "copy-engine",
                 algorithm: str = "direct", split: int = 1, wait_bound_ns: int = DEFAULT_WAIT_BOUND_NS,
                 drop_chunk: int = -1, sequential: Optional[bool] = None):
        import syncopate as sy

        group, rank, world = _group_rank_world(group)
        name = type(self).__name__
        if backend not in BACKENDS:
            raise UserError(f"{name}: backend {backend!r} is not one of {BACKENDS}")
        if m % world != 0:
            raise ShapeError(f"{name}: m={m} rows cannot be split evenly over {world} ranks")
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self.m, self.k, self.n, self.dtype, self.rank, self.world = m, k, n, dtype, rank, world
        self.shard_rows = m // world
        self.sequential = self.shard_rows < BLOCK_M if sequential is None else bool(sequential)
        self.plan = sy.make_plan(self.collective, world_size=world, shape=[m, n], algorithm=algorithm,
                                 split=split, dtype=plan_dtype(dtype), dim=0, backend=backend, tensor="c")
        # Sequential: no kernel notifies, so no ready / dst-ready gates (landing slots only).
        accesses = [] if self.sequential else [("c", "produce", 0, 1)]
        self.ws = PlanWorkspace(self.plan, group, grid=(m, n, BLOCK_M, BLOCK_N), accesses=accesses,
                                device=self.device, wait_bound_ns=wait_bound_ns, drop_chunk=drop_chunk,
                                sm_copy_blocks=RESERVED_SMS["sm-copy"] - 4)
        self.c = self.ws.tensor("c", dtype)
        self.signals = self.ws.signals()
        self.gemm = None
        if not self.sequential:
            self.gemm = FusedGemmLauncher(self.plan, rank, m, n, k, accesses, self.device, backend, wait_bound_ns)
            a = torch.zeros((m, k), dtype=dtype, device=self.device)
            b = torch.zeros((k, n), dtype=dtype, device=self.device)
            # Warm-up output goes to scratch, never into "c" (a peer's first call may add into it).
            self.gemm.warm_up(a, b, torch.empty((m, n), dtype=dtype, device=self.device), self.signals)
        _barrier(group, self.device)

    @property
    def kernel_origin(self) -> str:
        return "sequential" if self.gemm is None else self.gemm.origin

    def _result_view(self) -> torch.Tensor:
        lo = self.rank * self.shard_rows
        return self.c[lo:lo + self.shard_rows]

    def __call__(self, a: torch.Tensor, b_shard: torch.Tensor, *, out: Optional[torch.Tensor] = None,
                 check: bool = CHECK_EACH_CALL) -> torch.Tensor:
        """The op's result, copied into `out` if given. check: synchronize and raise a
        WaitTimeoutError now (else errors surface at the next check())."""
        name = type(self).__name__
        if tuple(a.shape) != (self.m, self.k) or tuple(b_shard.shape) != (self.k, self.n):
            raise ShapeError(f"{name}: expected a [{self.m}, {self.k}] and b_shard [{self.k}, {self.n}], "
                             f"got {list(a.shape)} and {list(b_shard.shape)}")
        if a.dtype != self.dtype or b_shard.dtype != self.dtype:
            raise UserError(f"{name}: operands must be {self.dtype}, got {a.dtype} and {b_shard.dtype}")
        epoch = self.ws.next_epoch()
        self.ws.begin(epoch)
        if self.sequential:
            torch.matmul(a, b_shard, out=self.c)
            self.ws.issue(epoch, wait_landed=True)
        else:
            # Chunks are issued first (they wait on the tiles' ready slots on their own streams);
            # the GEMM follows on this stream, and only then does this stream wait for landings.
            self.ws.issue(epoch, wait_landed=False)
            self.gemm.launch(a, b_shard, self.c, self.signals, epoch)
            self.ws.wait_landed(epoch)
        result = self._result_view()
        out = check_out(out, tuple(result.shape), self.dtype, self.device, name)
        out.copy_(result)  # before end(): after it, peers may write into "c" again
        self.ws.end(epoch)
        if check:
            self.check()
        return out

    def check(self) -> None:
        """Synchronizes, then raises WaitTimeoutError naming rank, slot, expected, seen, chunk."""
        self.ws.check(synchronize=True)
        if self.gemm is not None:
            self.gemm.check()


class GemmRs(ProducerGemm):
    """Context of GEMM+RS: out [m / world, n] = this rank's rows of sum over ranks of a @ b_shard."""

    collective = "reduce-scatter"


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    ctx = context_for(GemmRs, group, (m, k, n, a.dtype, a.device, default_backend()),
                      m=m, k=k, n=n, dtype=a.dtype, device=a.device, backend=default_backend())
    return ctx(a.contiguous(), b)
