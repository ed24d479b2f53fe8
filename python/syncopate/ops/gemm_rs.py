"""GEMM+RS: reduce_scatter(a @ b_shard, dim 0), the reduction overlapped with the GEMM.

    op = GemmRs(group, m=M, k=K_local, n=N, dtype=torch.bfloat16)     # everything else "auto"
    out = op(a, b_shard)          # a [M, K/w], b_shard [K/w, N]  ->  out [M/w, N]

How: the partial product C = a @ b_shard is written by the fused GEMM (ops/fused_gemm.py, the
persistent TMA GEMM rewritten by the transformer, storing C with plain stores) straight into the
symmetric heap (plan tensor "c"); every tile, once stored, raises the *ready* slots of the chunks
that carry it and the *dst-ready* slots of the chunks that will add into it. The executor's
chunks of a reduce-scatter plan (reduce-add) leave as soon as their source tiles are ready and
land (staging + add kernel, or an SM add) once the destination's own tiles are stored. The
stream then waits for every chunk landing here and copies this rank's reduced rows out.
Where the simulator predicts that overlap does not pay (ops/choice.py), the context runs
sequentially: torch.matmul, then the plan.

GemmAr (gemm_ar.py) is the same with an all-reduce plan: every rank ends with all of C.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.ops.ag_gemm import OpContext
from syncopate.ops.common import (CHECK_EACH_CALL, PRODUCER_ADD_BLOCKS, SM_COPY_BLOCKS, check_out, context_for,
                                  default_backend, forward_operands)


class ProducerGemm(OpContext):
    """A GEMM whose output C [m, n] a collective plan on tensor "c" then carries (RS or AR)."""

    collective = "reduce-scatter"

    def _build(self, drop_chunk: int) -> None:
        from syncopate.runtime import PlanWorkspace

        self.plan = self._make_plan([self.m, self.n], "c")
        # Sequential: no kernel notifies, so no ready / dst-ready gates (landing slots only).
        accesses = [] if self.decision == "sequential" else [("c", "produce", 0, 1)]
        self.ws = PlanWorkspace(self.plan, self.group, grid=(self.m, self.n, self.config.block_m,
                                                             self.config.block_n),
                                accesses=accesses, device=self.device, wait_bound_ns=self.wait_bound_ns,
                                drop_chunk=drop_chunk,
                                sm_copy_blocks=SM_COPY_BLOCKS if self.backend == "sm-copy" else PRODUCER_ADD_BLOCKS)
        self.c = self.ws.tensor("c", self.dtype)
        self.signals = self.ws.signals()
        self.result = self._result_view()
        if self.decision == "fused":
            self.gemm = self._make_gemm(accesses, producer=True)
            a = torch.zeros((self.m, self.k), dtype=self.dtype, device=self.device)
            # Warm-up output goes to scratch, never into "c" (a peer's first call may add into it).
            self.gemm.warm_up(a, self._scratch_b(),
                              torch.empty((self.m, self.n), dtype=self.dtype, device=self.device), self.signals)

    def _build_fallback(self) -> None:
        self.c = torch.empty((self.m, self.n), dtype=self.dtype, device=self.device)
        self.result = self._result_view()

    def _fallback_call(self, a: torch.Tensor, b_shard: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """NCCL + torch.matmul, what the user would run without Syncopate (see OpContext)."""
        if self.group is None:
            return torch.matmul(a, b_shard, out=out)
        import torch.distributed as dist

        if self.collective == "all-reduce":
            torch.matmul(a, b_shard, out=out)
            dist.all_reduce(out, group=self.group)
        else:
            torch.matmul(a, b_shard, out=self.c)
            dist.reduce_scatter_tensor(out, self.c, group=self.group)
        return out

    def _result_view(self) -> torch.Tensor:
        lo = self.rank * self.shard_rows
        return self.c[lo:lo + self.shard_rows]

    def __call__(self, a: torch.Tensor, b_shard: torch.Tensor, *, out: Optional[torch.Tensor] = None,
                 check: bool = CHECK_EACH_CALL) -> torch.Tensor:
        """The op's result, copied into `out` if given (else a new tensor). check: synchronize and
        raise a WaitTimeoutError now (else errors surface at the next check())."""
        self._check_operands(a, "a", (self.m, self.k), b_shard, "b_shard", a_to_kernel=True)
        result = self.result
        out = check_out(out, tuple(result.shape), self.dtype, self.device, type(self).__name__)
        if self.torch_fallback:
            return self._fallback_call(a, b_shard, out)
        ws = self.ws
        epoch = ws.next_epoch()
        ws.begin(epoch)
        if self.gemm is None:
            torch.matmul(a, b_shard, out=self.c)
            ws.issue(epoch, wait_landed=True)
        else:
            # Chunks are issued first (they wait on the tiles' ready slots on their own streams);
            # the GEMM follows on this stream, and only then does this stream wait for landings.
            ws.issue(epoch, wait_landed=False)
            self.gemm.launch(a, b_shard, self.c, self.signals, epoch)
            ws.wait_landed(epoch)
        out.copy_(result)  # before end(): after it, peers may write into "c" again
        ws.end(epoch)
        if check:
            self.check()
        return out


class GemmRs(ProducerGemm):
    """Context of GEMM+RS: out [m / world, n] = this rank's rows of sum over ranks of a @ b_shard."""

    collective = "reduce-scatter"


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup.
    Contexts are cached per (group, shapes, dtype, device, backend, B layout)."""
    return producer_forward(GemmRs, a, b, group)


def producer_forward(cls, a, b, group):
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a, b, layout = forward_operands(a, b)
    backend = default_backend()
    ctx = context_for(cls, group, (m, k, n, a.dtype, a.device, backend, layout),
                      m=m, k=k, n=n, dtype=a.dtype, device=a.device, backend=backend, b_layout=layout)
    return ctx(a, b)
