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

reduce="epilogue" ("auto" takes it where it applies and the simulator predicts it faster)
moves the reduction out of the communication path: a staged plan ships every other rank's
partial of this rank's rows by plain copy chunks into the staging tensor "p", and the fused
kernel (ops/staged_gemm.py, kernels/gemm_reduce.py) computes the other ranks' row boxes first,
this rank's box last, adding the staged partials in each own tile's epilogue and storing the sum
once: GemmRs straight into `out` (no add kernel, no dst-ready gate, no copy-out); GemmAr into
its own box of the heap's C, from where gather chunks push it to every other rank, and then
copies all of C out.

GemmAr (gemm_ar.py) is the same with an all-reduce plan: every rank ends with all of C. The
`reduce` keyword and both paths live in ProducerGemm, shared by the two.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.errors import UserError
from syncopate.ops.call_graphs import FusedCall
from syncopate.ops.context import OpContext
from syncopate.ops.fp8 import check_scales, refuse_scales
from syncopate.ops.common import (
    CHECK_EACH_CALL,
    PRODUCER_ADD_BLOCKS,
    SM_COPY_BLOCKS,
    check_out,
    context_for,
    default_backend,
    forward_operands,
    refuse_gloo_capture,
)

# GemmRs / GemmAr(reduce=...): where the partial sums are added.
REDUCE_CHOICES = ("auto", "epilogue", "chunks")


class ProducerGemm(OpContext):
    """A GEMM whose output C [m, n] a collective plan on tensor "c" then carries (RS or AR).

    reduce: "chunks" (reduce-add chunks land in the heap's C, then this rank's result is copied
    out), "epilogue" (staged partials added in the fused kernel's epilogue; needs the shard
    m / world to be a multiple of the GEMM's BLOCK_M, TMA-describable operands, algorithm direct
    and a fused run, else UserError saying which) or "auto" (the epilogue where it applies and
    is predicted faster, and SYNCOPATE_AUTO_STAGED is set; `.reason` says why not where it is
    not).
    """

    collective = "reduce-scatter"
    plan_holds_operand = False  # the plan moves C (bf16 for FP8 operands), not A
    # The staged kernel stores the reduced own rows straight into the caller's `out` (GEMM+RS);
    # False: into the heap's C, which the call then copies out (GEMM+AR: gather chunks read it).
    staged_writes_out = True
    _staged = False  # set by _build: the staged fused kernel runs

    def __init__(self, group, *, reduce: str = "auto", **kwargs):
        if reduce not in REDUCE_CHOICES:
            raise UserError(
                f"{type(self).__name__}: reduce={reduce!r} is not one of {REDUCE_CHOICES} "
                "(\"epilogue\": add the staged partials in the GEMM's epilogue; \"chunks\": "
                "reduce-add chunks)"
            )
        self._reduce_request = reduce
        self._reduce_why = None
        super().__init__(group, **kwargs)

    def _choice_options(self, *, mode: str, algorithm: str) -> dict:
        why = self._epilogue_refusal(mode, algorithm)
        if why is None:
            return dict(reduce=self._reduce_request)
        if self._reduce_request == "epilogue":
            raise UserError(f"{type(self).__name__}: reduce='epilogue' cannot run here: {why}")
        self._reduce_why = why
        return dict(reduce="chunks")

    def _epilogue_refusal(self, mode: str, algorithm: str):
        """Why the staged epilogue cannot run (a phrase), or None."""
        from syncopate.ops.staged_gemm import AUTO_STAGED_ENV, staged_in_auto, staged_unsupported

        if self._reduce_request == "chunks":
            return "reduce='chunks' given"
        if self._reduce_request == "auto" and not staged_in_auto():
            return (
                f"the staged epilogue has not run on a GPU yet, so auto leaves it out (set "
                f"{AUTO_STAGED_ENV}=1, or pass reduce='epilogue')"
            )
        if mode == "sequential":
            return "mode='sequential' runs torch.matmul, then the plan's reduce-add chunks"
        if algorithm not in ("auto", "direct"):
            return f"algorithm={algorithm!r} was given and the staged plan is direct only"
        if self.fp8:
            return "FP8 operands: the staged epilogue kernel (kernels/gemm_reduce.py) has no FP8 variant yet"
        why = staged_unsupported(self.m, self.n, self.k, self.world, self.config.block_m, self.dtype)
        if why is not None:
            return why
        return None

    @property
    def reduce(self) -> str:
        """ "epilogue" when the staged fused kernel runs, else "chunks" (reduce-add chunks, or a
        sequential path)."""
        return self.choice.reduce

    @property
    def reason(self) -> str:
        if self._reduce_why is None:
            return self.choice.reason
        return f"{self.choice.reason}; reduction by reduce-add chunks: {self._reduce_why}"

    def _build(self, drop_chunk: int) -> None:
        if self.reduce == "epilogue":
            self._build_staged(drop_chunk)
            return
        from syncopate.runtime import PlanWorkspace

        self.plan = self._make_plan([self.m, self.n], "c")
        # Sequential: no kernel notifies, so no ready / dst-ready gates (landing slots only).
        accesses = [] if self.decision == "sequential" else [("c", "produce", 0, 1)]
        self.ws = PlanWorkspace(
            self.plan,
            self.group,
            grid=(self.m, self.n, self.config.block_m, self.config.block_n),
            accesses=accesses,
            device=self.device,
            wait_bound_ns=self.wait_bound_ns,
            drop_chunk=drop_chunk,
            sm_copy_blocks=SM_COPY_BLOCKS if self.backend == "sm-copy" else PRODUCER_ADD_BLOCKS,
        )
        self.c = self.ws.tensor("c", self.out_dtype)
        self.signals = self.ws.signals()
        self.result = self._result_view()
        self._build_scales()
        if self.decision == "fused":
            self.gemm = self._make_gemm(accesses, producer=True)
            a = torch.zeros((self.m, self.k), dtype=self.dtype, device=self.device)
            # Warm-up output goes to scratch, never into "c" (a peer's first call may add into it).
            scales = (torch.ones_like(self.sa), torch.ones_like(self.sb)) if self.fp8 else ()
            self.gemm.warm_up(
                a,
                self._scratch_b(),
                torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device),
                self.signals,
                *scales,
            )

    def _build_scales(self) -> None:
        """FP8: per-row / per-column buffers the scales are copied into each call (the kernel's
        scale strides stay fixed: ops/fp8.py)."""
        if self.fp8:
            self.sa = torch.empty(self.m, dtype=torch.float32, device=self.device)
            self.sb = torch.empty(self.n, dtype=torch.float32, device=self.device)

    def _build_fallback(self) -> None:
        self.c = torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device)
        self.result = self._result_view()
        self._build_scales()

    def _local_gemm(self, a: torch.Tensor, b_shard: torch.Tensor, out: torch.Tensor) -> None:
        """out = a @ b_shard: torch.matmul, or for FP8 the local FP8 kernel with the scale buffers."""
        if self.fp8:
            from syncopate.kernels.gemm_fp8 import gemm_fp8

            gemm_fp8(a, b_shard, self.sa, self.sb, out=out)
        else:
            torch.matmul(a, b_shard, out=out)

    def _fallback_call(self, a: torch.Tensor, b_shard: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """NCCL + torch.matmul, what the user would run without Syncopate (see OpContext)."""
        if self.group is None:
            self._local_gemm(a, b_shard, out)
            return out
        import torch.distributed as dist

        refuse_gloo_capture(type(self).__name__, self.group, self.device)
        if self.collective == "all-reduce":
            self._local_gemm(a, b_shard, out)
            dist.all_reduce(out, group=self.group)
        else:
            self._local_gemm(a, b_shard, self.c)
            dist.reduce_scatter_tensor(out, self.c, group=self.group)
        return out

    def _operand_shapes(self):
        rows = self.m if self.collective == "all-reduce" else self.shard_rows
        return (self.m, self.k), (rows, self.n)

    def _result_view(self) -> torch.Tensor:
        lo = self.rank * self.shard_rows
        return self.c[lo : lo + self.shard_rows]

    def __call__(
        self,
        a: torch.Tensor,
        b_shard: torch.Tensor,
        *,
        out: Optional[torch.Tensor] = None,
        check: bool = CHECK_EACH_CALL,
        scale_a: Optional[torch.Tensor] = None,
        scale_b: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """The op's result, copied into `out` if given (else a new tensor). check: synchronize and
        raise a WaitTimeoutError now (else errors surface at the next check()). scale_a / scale_b:
        the FP8 scales (ops/fp8.py: A's per tensor or per row of a, B's per tensor or per column);
        required with FP8 operands, refused otherwise. The result is then bf16, reduced in bf16."""
        if not check and scale_a is None and scale_b is None:
            done = self._fast_call(a, b_shard, out)  # a repeated call: one guarded replay
            if done is not None:
                return done
        who = type(self).__name__
        self._check_operands(a, "a", (self.m, self.k), b_shard, "b_shard", a_to_kernel=True)
        key = (a.data_ptr(), b_shard.data_ptr())
        if self.fp8:
            sa, sb = check_scales(who, scale_a, scale_b, self.m, self.n, self.device)
            key += (sa.data_ptr(), sb.data_ptr())
        else:
            refuse_scales(who, self.dtype, scale_a, scale_b)
        out = check_out(out, self._operand_shapes()[1], self.out_dtype, self.device, who)
        if self.fp8:
            # Captured with the call when it runs through the context's graph (_run_call).
            def set_scales():
                self.sa.copy_(sa.expand(self.m))
                self.sb.copy_(sb.expand(self.n))
        else:

            def set_scales():
                pass

        if self.torch_fallback:
            set_scales()
            return self._fallback_call(a, b_shard, out)
        if self.gemm is not None:
            work = self._steps(a, b_shard, out, set_scales)
        else:

            def work():
                set_scales()
                self._enqueue(a, b_shard, out)

        self._run_call(key + (out.data_ptr(),), work, check)
        return out

    def _steps(self, a: torch.Tensor, b_shard: torch.Tensor, out: torch.Tensor, set_scales) -> FusedCall:
        """One fused call's device work as steps (call_graphs.FusedCall): the reduce-add chunks'
        path, or the staged one (why no chunk of this call or the next overwrites what a kernel
        still reads: docs/RUNTIME.md, "Staged epilogue"). The side streams fork before the GEMM
        starts, so the chunks (which wait on the tiles' ready slots on their own streams) do not
        wait for the whole GEMM, and the host issues them only after its launch."""
        ws, gemm, signals, epoch = self.ws, self.gemm, self.signals, self.ws.epoch_word

        def start() -> None:
            # begin and publish in one kernel (no inputs to put in place: the GEMM reads `a`).
            set_scales()
            ws.begin_and_publish()

        def copy_out() -> None:
            ws.wait_landed()
            out.copy_(self.result)  # before end(): after it, peers may write into "c" again

        if self._staged:
            rows = out if self.staged_writes_out else self.own_rows
            launch = lambda: gemm.launch(a, b_shard, self.c, signals, epoch, self.p, rows)  # noqa: E731
            return FusedCall(ws, start, launch, None if self.staged_writes_out else copy_out)
        scales = (self.sa, self.sb) if self.fp8 else ()
        return FusedCall(ws, start, lambda: gemm.launch(a, b_shard, self.c, signals, epoch, *scales), copy_out)

    def _enqueue(self, a: torch.Tensor, b_shard: torch.Tensor, out: torch.Tensor) -> None:
        """One call's device work on the sequential path (no fused kernel) on the current stream;
        the fused path's is _steps."""
        ws = self.ws
        ws.begin()
        self._local_gemm(a, b_shard, self.c)
        ws.issue(wait_landed=True)
        out.copy_(self.result)  # before end(): after it, peers may write into "c" again
        ws.end()

    def _build_staged(self, drop_chunk: int) -> None:
        self._staged = True
        from syncopate.ops.fused_gemm import persistent_programs
        from syncopate.ops.staged_gemm import STAGED_ACCESSES, StagedReduceGemm, staged_plan
        from syncopate.runtime import PlanWorkspace, plan_dtype

        self.plan = staged_plan(
            world=self.world,
            m=self.m,
            n=self.n,
            split=self.split,
            dtype=plan_dtype(self.dtype),
            backend=self.backend,
            collective=self.collective,
        )
        self.ws = PlanWorkspace(
            self.plan,
            self.group,
            grid=(self.m, self.n, self.config.block_m, self.config.block_n),
            accesses=STAGED_ACCESSES,
            device=self.device,
            wait_bound_ns=self.wait_bound_ns,
            drop_chunk=drop_chunk,
            sm_copy_blocks=SM_COPY_BLOCKS,
        )
        self.c = self.ws.tensor("c", self.dtype)[0]  # [M, N]: the row boxes of C
        self.p = self.ws.tensor("p", self.dtype)  # [W, M / W, N]: staged partials
        self.signals = self.ws.signals()
        lo = self.rank * self.shard_rows
        # Where the own tiles store their reduced rows: `out` itself (reduce-scatter: None here),
        # or this rank's own box of the heap's C (all-reduce: the gather chunks push it from
        # there; the kernel's one annotated store statement covers these rows, so the notify
        # after it announces them to the gather chunks' ready slots).
        self.own_rows = None if self.staged_writes_out else self.c[lo : lo + self.shard_rows]
        self.result = None if self.staged_writes_out else self._result_view()
        # No add kernel runs beside the GEMM: it leaves the backend only the SMs a consumer does.
        self.gemm = StagedReduceGemm(
            plan=self.plan,
            rank=self.rank,
            world=self.world,
            m=self.m,
            n=self.n,
            k=self.k,
            dtype=self.dtype,
            b_layout=self.b_layout,
            config=self.config,
            tile_order=self.tile_order,
            device=self.device,
            wait_bound_ns=self.wait_bound_ns,
            num_programs=persistent_programs(self.device, self.backend, producer=False),
        )

        def scratch(*shape):
            return torch.zeros(shape, dtype=self.dtype, device=self.device)

        # Warm-up reads and writes scratch only: a peer may pull from "c" once its first call runs.
        self.gemm.warm_up(
            scratch(self.m, self.k),
            self._scratch_b(),
            scratch(self.m, self.n),
            self.signals,
            scratch(*self.p.shape),
            scratch(self.shard_rows, self.n),
        )


class GemmRs(ProducerGemm):
    """Context of GEMM+RS: out [m / world, n] = this rank's rows of sum over ranks of a @ b_shard.

    reduce (see ProducerGemm): "epilogue" writes the reduced rows straight into `out`.
    """

    collective = "reduce-scatter"


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup.
    Contexts are cached per (group, shapes, dtype, device, backend, B layout)."""
    return producer_forward(GemmRs, a, b, group)


def producer_forward(cls, a, b, group):
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a, b, layout = forward_operands(a, b)
    backend = default_backend()
    ctx = context_for(
        cls,
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
    return ctx(a, b)
