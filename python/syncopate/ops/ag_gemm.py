"""AG+GEMM: C = all_gather(a_shard, dim 0) @ b, the gather overlapped with the GEMM.

    op = AgGemm(group, m=M, k=K, n=N, dtype=torch.bfloat16)     # everything else "auto"
    c = op(a_shard, b)            # a_shard [M/w, K] on this rank, b [K, N]  ->  c [M, N]
    op.decision, op.backend, op.algorithm, op.split, op.tile_order, op.predicted_us

How: the gathered A lives in the symmetric heap (plan tensor "a"). Each call advances the
device epoch, launches the fused GEMM at once (ops/fused_gemm.py: the persistent TMA GEMM
rewritten by the transformer) and only then has the executor issue every chunk of an all-gather
plan with the chosen backend on high-priority side streams; each tile waits (bounded) for the
chunks holding its rows, in the chosen tile order (arrival: local rows first). This rank's own
rows are chunks too: the plan gathers from an input tensor (make_plan(..., input="a_in")) that
the executor reads straight from the caller's a_shard (bind_source), a local copy-engine chunk
per piece beside the kernel, so nothing is copied before the GEMM starts and a peer reads a
piece once it is in place (docs/RUNTIME.md, "The call path"). FP8 and a user plan without an
input (plan=) copy the shard into the heap first, on the call's stream. By default the whole
call is one replay of the context's CUDA graph (ops/call_graphs.py; graph=False enqueues it
eagerly), and it can be captured in the caller's torch.cuda.graph. Where the simulator predicts
that overlap does not pay (ops/choice.py; small M), the
context runs sequentially: the gather, then torch.matmul.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.errors import UserError
from syncopate.ops.common import (
    CHECK_EACH_CALL,
    SM_COPY_BLOCKS,
    check_out,
    context_for,
    default_backend,
    forward_operands,
    refuse_gloo_capture,
)
from syncopate.ops.call_graphs import FusedCall
from syncopate.ops.context import OpContext
from syncopate.ops.fp8 import ROW_TAIL_BYTES, check_scales, pack_rows, packed_views, refuse_scales

# The plan tensor that holds this rank's shard (the caller's a_shard, read in place).
INPUT = "a_in"


class AgGemm(OpContext):
    """Context of AG+GEMM for fixed shapes: owns the heap (gathered A, signals), the executor
    and the fused kernel. Call it with a_shard [m / world, k] and b [k, n]."""

    collective = "all-gather"

    def _build(self, drop_chunk: int) -> None:
        from syncopate.runtime import PlanWorkspace

        # FP8: each gathered row carries its scale (ops/fp8.py), so the plan's rows are longer and
        # this rank's rows are assembled in the heap (no input tensor read in place).
        row = self.k + ROW_TAIL_BYTES if self.fp8 else self.k
        self.plan = self._make_plan([self.m, row], "a", input="" if self.fp8 else INPUT)
        # The local chunks read the caller's shard in place; "" for FP8 and for a user plan
        # without an input (the shard is then copied into the heap first).
        self.input = "" if self.fp8 else self.plan.collective.input
        accesses = [("a", "consume", 0, -1)]
        self.ws = PlanWorkspace(
            self.plan,
            self.group,
            grid=(self.m, self.n, self.config.block_m, self.config.block_n),
            accesses=accesses,
            device=self.device,
            wait_bound_ns=self.wait_bound_ns,
            drop_chunk=drop_chunk,
            sm_copy_blocks=SM_COPY_BLOCKS,
        )
        self.signals = self.ws.signals()
        lo = self.rank * self.shard_rows
        if self.fp8:
            self._build_fp8_rows(self.ws.tensor("a", self.dtype))
        else:
            self.a_full = self.ws.tensor("a", self.dtype)
            self.a_local = self.a_full[lo : lo + self.shard_rows]
        self.a_input = self.ws.tensor(self.input, self.dtype) if self.input else None
        if self.decision == "fused":
            out = torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device)
            if self.fp8:
                self.gemm = self._make_gemm(
                    accesses, producer=False, a_pitch=self.k + ROW_TAIL_BYTES, stride_sa=self.a_scales.stride(0)
                )
                # Scratch rows in the packed layout: the kernel reads A's scales with the packed
                # pitch, so the warm-up's scales must live in rows of that pitch too.
                scratch_a, scratch_scales = packed_views(torch.zeros_like(self.packed), self.k)
                scratch_scales.fill_(1.0)
                self.gemm.warm_up(
                    scratch_a, self._scratch_b(), out, self.signals, scratch_scales, torch.ones_like(self.sb)
                )
            else:
                self.gemm = self._make_gemm(accesses, producer=False)
                self.gemm.warm_up(self.a_full, self._scratch_b(), out, self.signals)

    def _operand_shapes(self):
        return (self.shard_rows, self.k), (self.m, self.n)

    def _build_fp8_rows(self, packed: torch.Tensor) -> None:
        """FP8: the gathered rows [M, K + 16] (A, then each row's fp32 scale), their views, this
        rank's rows, and the per-column buffer of B's scales (ops/fp8.py)."""
        lo = self.rank * self.shard_rows
        self.packed = packed
        self.a_full, self.a_scales = packed_views(packed, self.k)
        self.packed_local = packed[lo : lo + self.shard_rows]
        self.sb = torch.empty(self.n, dtype=torch.float32, device=self.device)

    def _build_fallback(self) -> None:
        if self.fp8:
            self._build_fp8_rows(torch.empty((self.m, self.k + ROW_TAIL_BYTES), dtype=self.dtype, device=self.device))
            return
        self.a_full = torch.empty((self.m, self.k), dtype=self.dtype, device=self.device)

    def __call__(
        self,
        a_shard: torch.Tensor,
        b: torch.Tensor,
        *,
        out: Optional[torch.Tensor] = None,
        gathered_out: Optional[torch.Tensor] = None,
        check: bool = CHECK_EACH_CALL,
        scale_a: Optional[torch.Tensor] = None,
        scale_b: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """c = all_gather(a_shard) @ b, into `out` if given (else a new tensor). gathered_out: an
        [m, k] tensor that receives the gathered A too (the backward of GEMM+RS reads it; the
        heap's copy is overwritten by the next call). check: synchronize and raise a
        WaitTimeoutError now (else errors surface at the next check()). scale_a / scale_b: the
        FP8 scales (ops/fp8.py; required with FP8 operands, refused otherwise); c is then bf16."""
        if not check and gathered_out is None and scale_a is None and scale_b is None:
            done = self._fast_call(a_shard, b, out)  # a repeated call: one guarded replay
            if done is not None:
                return done
        self._check_operands(a_shard, "a_shard", (self.shard_rows, self.k), b, "b", a_to_kernel=False)
        if self.fp8:
            sa, sb = check_scales("AgGemm", scale_a, scale_b, self.shard_rows, self.n, self.device)
            if gathered_out is not None:
                raise UserError(
                    "AgGemm: gathered_out is not supported with FP8 operands (the gathered rows "
                    "carry their scales in the heap's own layout)"
                )
            out = check_out(out, (self.m, self.n), self.out_dtype, self.device, "AgGemm")
            return self._call_fp8(a_shard, b, sa, sb, out, check)
        refuse_scales("AgGemm", self.dtype, scale_a, scale_b)
        out = check_out(out, (self.m, self.n), self.dtype, self.device, "AgGemm")
        if gathered_out is not None:
            gathered_out = check_out(gathered_out, (self.m, self.k), self.dtype, self.device, "AgGemm")
        if self.torch_fallback:
            if self.group is None:
                if gathered_out is not None:
                    gathered_out.copy_(a_shard)
                return torch.matmul(a_shard, b, out=out)
            import torch.distributed as dist

            refuse_gloo_capture("AgGemm", self.group, self.device)
            full = self.a_full if gathered_out is None else gathered_out
            dist.all_gather_into_tensor(full, a_shard, group=self.group)
            return torch.matmul(full, b, out=out)
        # The operands' addresses (what the graph bakes in), as _fast_call looks them up.
        key = (a_shard.data_ptr(), b.data_ptr(), out.data_ptr())
        if gathered_out is not None:
            key += (gathered_out.data_ptr(),)
        self._run_call(key, self._steps(a_shard, b, out, gathered_out), check)
        return out

    def _steps(self, a_shard, b, out, gathered_out) -> object:
        """One call's device work: a FusedCall on the common path (the fused GEMM, the shard
        read in place), else a closure enqueuing it (_enqueue)."""
        if self.gemm is not None and gathered_out is None and self.input and a_shard.is_contiguous():
            ws, gemm, a_full, signals, epoch = self.ws, self.gemm, self.a_full, self.signals, self.ws.epoch_word

            def start() -> None:
                # Nothing to put in place on the device (the local chunks read the caller's
                # shard where it is): begin and publish are one kernel, and the GEMM follows it.
                ws.bind_source(self.input, a_shard)
                ws.begin_and_publish()

            return FusedCall(ws, start, lambda: gemm.launch(a_full, b, out, signals, epoch))
        return lambda: self._enqueue(a_shard, b, out, gathered_out)

    def _call_fp8(self, a_shard, b, sa, sb, out, check: bool) -> torch.Tensor:
        from syncopate.kernels.gemm_fp8 import gemm_fp8

        if self.torch_fallback:
            if self.group is None:
                return gemm_fp8(a_shard, b, sa, sb, out=out)
            import torch.distributed as dist

            refuse_gloo_capture("AgGemm", self.group, self.device)
            pack_rows(self.packed_local, a_shard, sa)
            # Bytes, not e4m3: the rows carry their fp32 scales too.
            dist.all_gather_into_tensor(
                self.packed.view(torch.uint8), self.packed_local.view(torch.uint8), group=self.group
            )
            self.sb.copy_(sb.expand(self.n))
            return gemm_fp8(self.a_full, b, self.a_scales, self.sb, out=out)
        key = ("fp8", a_shard.data_ptr(), b.data_ptr(), out.data_ptr(), sa.data_ptr(), sb.data_ptr())
        self._run_call(key, lambda: self._enqueue_fp8(a_shard, b, sa, sb, out), check)
        return out

    def _enqueue_fp8(self, a_shard, b, sa, sb, out) -> None:
        """One FP8 call's device work: this rank's rows and scales into the heap's packed rows,
        B's scales into their buffer, then as _enqueue."""
        from syncopate.kernels.gemm_fp8 import gemm_fp8

        ws = self.ws
        ws.begin()
        pack_rows(self.packed_local, a_shard, sa)
        self.sb.copy_(sb.expand(self.n))
        if self.gemm is None:
            ws.issue(wait_landed=True)
            gemm_fp8(self.a_full, b, self.a_scales, self.sb, out=out)
        else:
            ws.publish()
            ws.fork()
            self.gemm.launch(self.a_full, b, out, self.signals, ws.epoch_word, self.a_scales, self.sb)
            ws.issue_chunks()
        ws.end()

    def _enqueue(
        self, a_shard: torch.Tensor, b: torch.Tensor, out: torch.Tensor, gathered_out: Optional[torch.Tensor] = None
    ) -> None:
        """One call's device work on the current stream; the GEMM is launched before the host
        issues any chunk (its tiles wait for them on the device)."""
        ws = self.ws
        in_place = bool(self.input) and a_shard.is_contiguous()
        if in_place and self.gemm is not None:
            # Nothing to put in place on the device (the local chunks read the caller's shard
            # where it is): begin and publish are one kernel, and the GEMM follows it.
            ws.bind_source(self.input, a_shard)
            ws.begin_and_publish()
        else:
            ws.begin()
            if in_place:
                ws.bind_source(self.input, a_shard)
            elif self.input:  # a strided shard: into the heap's input first (its local chunk reads it there)
                ws.bind_source(self.input, None)
                self.a_input.copy_(a_shard)
            else:
                self.a_local.copy_(a_shard)
            if self.gemm is not None:
                ws.publish()
        if self.gemm is None:
            ws.issue(wait_landed=True)
            torch.matmul(self.a_full, b, out=out)
        else:
            ws.fork()
            self.gemm.launch(self.a_full, b, out, self.signals, ws.epoch_word)
            ws.issue_chunks()
            if gathered_out is not None:
                ws.wait_landed()  # every chunk is in the heap before the copy reads it
        if gathered_out is not None:
            gathered_out.copy_(self.a_full)  # before end(): after it, peers may write into "a" again
        ws.end()


def forward(a, b, *, group, gathered_out=None):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup;
    gathered_out (ag_gemm_gathered): an [M, K] tensor to receive the gathered A.
    Contexts are cached per (group, shapes, dtype, device, backend, B layout)."""
    world = group.size()
    m, k, n = a.shape[0] * world, a.shape[1], b.shape[1]
    a, b, layout = forward_operands(a, b)
    backend = default_backend()
    ctx = context_for(
        AgGemm,
        group,
        (m, k, n, a.dtype, a.device, backend, layout),
        m=m,
        k=k,
        n=n,
        dtype=a.dtype,
        device=a.device,
        backend=backend,
        b_layout=layout,
    )
    return ctx(a, b, gathered_out=gathered_out)
