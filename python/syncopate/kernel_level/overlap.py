"""Kernel-level overlap: a chunked collective on a communication stream beside a chunked GEMM.

    ag = KernelLevelAgGemm(group, m=8192, k=8192, n=2048, dtype=torch.bfloat16, chunks=4,
                           priority=True, residency=None, sm_carveout=16, gemm="cublas")
    out = ag(a_shard, b)                  # [m, n]: a_shard [m/w, k], b [k, n]
    rs = KernelLevelGemmRs(group, m=8192, k=1024, n=8192, dtype=torch.bfloat16, chunks=4)
    out = rs(a, b_shard)                  # [m/w, n]: a [m, k_local], b_shard [k_local, n]

For kernels Syncopate cannot transform (cuBLAS, third-party): the collective is cut into
`chunks` pieces per shard and issued on NCCL's stream of a process group made for this
purpose; the GEMM is cut to match and runs on the caller's stream, each piece after the
collective piece it reads (AG: local shard first, then in arrival order) or before the one that
carries it (RS). The controls (docs/KERNEL_LEVEL.md):

- priority: the group's NCCL stream at the device's greatest priority
  (ProcessGroupNCCL.Options.is_high_priority_stream) or at normal priority;
- residency (gemm="triton" only): the Triton GEMM padded with shared memory to at most this
  many blocks per SM, so NCCL's blocks fit beside it (shaped_gemm.ShapedGemm);
- sm_carveout: SMs the GEMM leaves free: cuBLASLt's SM count target (torch's experimental
  carveout, with the BLAS backend switched to cuBLASLt for the call) or fewer Triton programs.

Constructing an object is collective over the default group (it may create a process group).
choose_residency asks the simulator; sweep_residency measures on the GPU.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Callable, Optional, Sequence

import torch

from syncopate.errors import UserError
from syncopate.runtime import resolve_device

GEMMS = ("cublas", "triton")
_GROUPS: dict[tuple, object] = {}


def comm_group(group, high_priority: bool):
    """A process group over `group`'s ranks whose NCCL stream has the greatest priority
    (high_priority) or normal priority. Cached; creating one is collective over the default group."""
    import torch.distributed as dist

    ranks = tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
    key = (ranks, bool(high_priority))
    if key not in _GROUPS:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = bool(high_priority)
        _GROUPS[key] = dist.new_group(ranks=list(ranks), backend="nccl", pg_options=options)
    return _GROUPS[key]


@contextlib.contextmanager
def cublas_sm_carveout(sms: Optional[int]):
    """cuBLAS GEMMs launched inside leave `sms` SMs free (None or 0: no change).

    torch's experimental carveout reaches only cuBLASLt (it sets CUBLASLT_MATMUL_DESC_SM_COUNT_
    TARGET; the plain cuBLAS path never calls cublasSetSmCountTarget), so the preferred BLAS
    backend is cuBLASLt for the duration. Both settings are process-wide and restored on exit.
    """
    if not sms:
        yield
        return
    previous_carveout = torch._C._get_sm_carveout_experimental()
    previous_library = torch.backends.cuda.preferred_blas_library()
    torch._C._set_sm_carveout_experimental(int(sms))
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(previous_carveout)
        torch.backends.cuda.preferred_blas_library(previous_library)


def even_bounds(total: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) of `parts` nearly equal pieces of range(total), earlier pieces larger by one."""
    base, extra = divmod(total, parts)
    out, lo = [], 0
    for p in range(parts):
        hi = lo + base + (1 if p < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


class _KernelLevelOp:
    """What AG+GEMM and GEMM+RS share: arguments, the communication group, the GEMM runner."""

    def __init__(
        self,
        group,
        *,
        m: int,
        k: int,
        n: int,
        dtype: torch.dtype,
        chunks: int = 4,
        priority: bool = True,
        residency: Optional[int] = None,
        sm_carveout: Optional[int] = None,
        gemm: str = "cublas",
        device: Optional[torch.device] = None,
        gemm_config=None,
    ):
        import torch.distributed as dist

        name = type(self).__name__
        if gemm not in GEMMS:
            raise UserError(f"{name}: gemm={gemm!r}: expected one of {GEMMS}")
        if dtype not in (torch.float16, torch.bfloat16):
            raise UserError(f"{name}: dtype {dtype}: expected torch.float16 or torch.bfloat16")
        if residency is not None and gemm != "triton":
            raise UserError(
                f"{name}: residency={residency} needs gemm='triton': a cuBLAS kernel's shared memory "
                "cannot be set from outside (use sm_carveout for cuBLAS; docs/KERNEL_LEVEL.md)"
            )
        if sm_carveout is not None and int(sm_carveout) < 0:
            raise UserError(f"{name}: sm_carveout={sm_carveout}: expected None or >= 0 SMs")
        self.group = group if group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.m, self.k, self.n = int(m), int(k), int(n)
        if min(self.m, self.k, self.n) <= 0:
            raise UserError(f"{name}: m, k, n must be > 0, got {m}, {k}, {n}")
        if self.m % self.world:
            raise UserError(f"{name}: m={m} is not divisible by the world size {self.world}")
        self.rows = self.m // self.world
        if not 1 <= int(chunks) <= self.rows:
            raise UserError(f"{name}: chunks={chunks}: expected 1 <= chunks <= m/world = {self.rows}")
        self.chunks = int(chunks)
        self.pieces = even_bounds(self.rows, self.chunks)
        self.dtype = dtype
        self.device = resolve_device(device)
        self.priority = bool(priority)
        self.residency = residency
        self.sm_carveout = int(sm_carveout) if sm_carveout else None
        self.gemm_kind = gemm
        self.comm = comm_group(self.group, self.priority)
        if gemm == "triton":
            from syncopate.kernel_level.shaped_gemm import ShapedGemm

            self.triton_gemm = ShapedGemm(self.device, residency, self.sm_carveout, gemm_config)
        else:
            self.triton_gemm = None

    def _gemm(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        if self.triton_gemm is not None:
            self.triton_gemm(a, b, out)
        else:
            torch.mm(a, b, out=out)

    def _gemm_context(self):
        return cublas_sm_carveout(self.sm_carveout if self.triton_gemm is None else None)

    def _check(self, name: str, t: torch.Tensor, shape: Sequence[int]) -> None:
        if tuple(t.shape) != tuple(shape) or t.dtype != self.dtype or t.device != self.device:
            raise UserError(
                f"{type(self).__name__}: {name} must be {list(shape)} {self.dtype} on {self.device}, got "
                f"{list(t.shape)} {t.dtype} on {t.device}"
            )


class KernelLevelAgGemm(_KernelLevelOp):
    """out [m, n] = all_gather(a_shard) @ b; a_shard [m/w, k], b [k, n] (replicated)."""

    def __init__(self, group, **kwargs):
        super().__init__(group, **kwargs)
        # Piece c of every rank lands in gathered[c] ([w, piece, k]); the GEMM reads it there.
        self.gathered = [
            torch.empty((self.world, hi - lo, self.k), dtype=self.dtype, device=self.device) for lo, hi in self.pieces
        ]

    def __call__(self, a_shard: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        import torch.distributed as dist

        self._check("a_shard", a_shard, (self.rows, self.k))
        self._check("b", b, (self.k, self.n))
        if out is None:
            out = torch.empty((self.m, self.n), dtype=self.dtype, device=self.device)
        self._check("out", out, (self.m, self.n))
        a_shard = a_shard.contiguous()
        works = []
        for (lo, hi), staged in zip(self.pieces, self.gathered):  # the same order on every rank
            works.append(
                dist.all_gather_into_tensor(staged.view(-1, self.k), a_shard[lo:hi], group=self.comm, async_op=True)
            )
        own = self.rank * self.rows
        with self._gemm_context():
            self._gemm(a_shard, b, out[own : own + self.rows])  # local rows first: no wait
            for (lo, hi), staged, work in zip(self.pieces, self.gathered, works):
                work.wait()  # the compute stream waits for this piece only
                for src in range(self.world):
                    if src != self.rank:
                        base = src * self.rows
                        self._gemm(staged[src], b, out[base + lo : base + hi])
        return out


class KernelLevelGemmRs(_KernelLevelOp):
    """out [m/w, n] = rows of rank r of sum over ranks (a @ b_shard); a [m, k], b_shard [k, n]
    (k is the local depth K/w)."""

    def __init__(self, group, **kwargs):
        super().__init__(group, **kwargs)
        # Piece c's partial products for every destination ([w, piece, n]) before they leave.
        self.partials = [
            torch.empty((self.world, hi - lo, self.n), dtype=self.dtype, device=self.device) for lo, hi in self.pieces
        ]

    def __call__(self, a: torch.Tensor, b_shard: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        import torch.distributed as dist

        self._check("a", a, (self.m, self.k))
        self._check("b_shard", b_shard, (self.k, self.n))
        if out is None:
            out = torch.empty((self.rows, self.n), dtype=self.dtype, device=self.device)
        self._check("out", out, (self.rows, self.n))
        works = []
        # Other ranks' rows first, own rows last: a piece leaves once all its rows exist anyway,
        # but this keeps the order the same as the fused op's producer order.
        order = [(self.rank + 1 + i) % self.world for i in range(self.world)]
        with self._gemm_context():
            for (lo, hi), partial in zip(self.pieces, self.partials):
                for dst in order:
                    base = dst * self.rows
                    self._gemm(a[base + lo : base + hi], b_shard, partial[dst])
                works.append(
                    dist.reduce_scatter_tensor(out[lo:hi], partial.view(-1, self.n), group=self.comm, async_op=True)
                )
        for work in works:
            work.wait()
        return out


def choose_residency(
    op: str,
    *,
    world: int,
    m: int,
    k: int,
    n: int,
    chunks: int,
    natural_residency: int,
    calib=None,
    backend: str = "nccl",
    block_share: float = 0.9,
    comm_sms: int = -1,
    block_m: int = 128,
    block_n: int = 256,
) -> tuple[Optional[int], dict]:
    """The simulator's choice of residency for kernel-level mode: None (do not shape) or a
    number of blocks per SM below natural_residency, and {residency or 0: predicted us}.

    op: "ag_gemm" (m x k gathered, per-rank GEMM m x n x k) or "gemm_rs" (k local; per-rank
    GEMM m x n x k, reduce-scatter of the m x n product). The plan is the ring template split
    into `chunks` on `backend`. Ties keep the unshaped choice.
    """
    import syncopate as sy

    if op not in ("ag_gemm", "gemm_rs"):
        raise UserError(f"choose_residency: op={op!r}: expected 'ag_gemm' or 'gemm_rs'")
    if natural_residency < 1:
        raise UserError(f"choose_residency: natural_residency={natural_residency}: expected >= 1")
    calib = calib if calib is not None else sy.calibration("h200")
    if op == "ag_gemm":
        plan = sy.make_plan("all-gather", world_size=world, shape=[m, k], split=chunks, backend=backend)
    else:
        plan = sy.make_plan("reduce-scatter", world_size=world, shape=[m, n], split=chunks, backend=backend)
    gemm = sy.GemmShape(m, n, k, block_m, block_n)
    predicted = {}
    for r in [0] + list(range(1, natural_residency)):
        p = sy.simulate(
            plan,
            gemm,
            calib,
            kernel_level_residency=r,
            natural_residency=natural_residency,
            block_share=block_share,
            comm_sms=comm_sms,
        )
        predicted[r] = p.kernel_level_us
    best = min(predicted, key=lambda r: (predicted[r], r != 0))
    return (None if best == 0 else best), predicted


def sweep_residency(
    make_op: Callable[[Optional[int]], Callable[[], object]],
    residencies: Sequence[Optional[int]],
    samples: int = 10,
    warmup: int = 2,
) -> tuple[Optional[int], dict]:
    """Measures kernel-level time per residency on the GPU: make_op(r) returns a callable that
    runs the op once (collective over the group). Returns (fastest residency, {r: median ms}),
    the time of each being the max over ranks of each rank's median."""
    import torch.distributed as dist

    times = {}
    for r in residencies:
        fn = make_op(r)
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        values = []
        for _ in range(samples):
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            values.append(start.elapsed_time(end))
        t = torch.tensor([statistics.median(values)], dtype=torch.float64, device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times[r] = t.item()
    best = min(times, key=lambda r: times[r])
    return best, times
