"""AG+GEMM: C = all_gather(a_shard, dim 0) @ b, the gather overlapped with the GEMM.

    op = AgGemm(group, m=M, k=K, n=N, dtype=torch.bfloat16, backend="copy-engine")
    c = op(a_shard, b)            # a_shard [M/w, K] on this rank, b [K, N]  ->  c [M, N]

How: the gathered A lives in the symmetric heap (plan tensor "a"). Each call (epoch e, no reset)
puts this rank's shard in place, lets the executor move every chunk of an all-gather plan with
the chosen backend on high-priority side streams, and launches the fused GEMM at once; each of
its tiles waits (bounded) for the chunks holding its rows, in the arrival order the scheduler
chose (local rows first). Small M (fewer than BLOCK_M rows per rank) runs sequentially: the
gather, then torch.matmul.

The fused kernel is `syncopate/kernels/gemm.py:gemm_pointer_kernel` rewritten by the
transformer when syncopate._core binds it; otherwise FALLBACK_FUSED_GEMM below, a hand-written
copy of what the transformer emits for it (same parameters, same primitives). `kernel_origin`
says which one a context uses.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import tempfile
from typing import Optional

import torch
import triton
import triton.language as tl

import syncopate.language as syl
from syncopate.errors import ShapeError, UserError
from syncopate.launch import TileTables, _unspecialize, check_error, launch, new_error_record
from syncopate.runtime import DEFAULT_WAIT_BOUND_NS, PlanWorkspace, plan_dtype

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8
NUM_WARPS, NUM_STAGES = 8, 3
BACKENDS = ("copy-engine", "sm-copy", "nccl")
# SMs left free for communication kernels (wait/signal kernels, SM copies, NCCL) while the
# persistent GEMM runs: a spinning tile must never keep the chunk it waits for from moving.
RESERVED_SMS = {"copy-engine": 4, "sm-copy": 20, "nccl": 24}
CHECK_EACH_CALL = os.environ.get("SYNCOPATE_CHECK_EACH_CALL", "1") not in ("", "0")

# The transformer's description of FALLBACK_FUSED_GEMM (docs/ANNOTATIONS.md, "What the output gets").
__syncopate__ = {
    "version": 1,
    "kernel": "fallback_fused_gemm",
    "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots",
               "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns",
               "sy_rank", "sy_error"],
    "accesses": [{"tensor": "a", "param": "a_ptr", "role": "consume", "m_dim": 0, "n_dim": -1},
                 {"tensor": "c", "param": "c_ptr", "role": "produce", "m_dim": 0, "n_dim": 1}],
}


@triton.jit
def fallback_fused_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, num_programs, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                        sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots,
                        sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch,
                        sy_wait_bound_ns, sy_rank, sy_error):
    """gemm_pointer_kernel as the transformer rewrites it: tiles in TileOrder, a bounded wait
    before a tile reads A, a release notify after it stores C."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    for tile_id in range(tl.program_id(0), num_tiles, num_programs):
        sy_tile = syl.tile_at(sy_tile_order, tile_id)
        pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        syl.wait_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch,
                      sy_wait_bound_ns, sy_rank, sy_error)
        for off_k in range(0, K, BLOCK_K):
            ks = off_k + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                        mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))
        syl.notify_tile(sy_signals, sy_notify_offsets, sy_notify_slots, sy_tile)


def _transformer():
    """The transformer entry point of syncopate._core, or None where this build lacks it."""
    from syncopate import _core

    for name in ("transform_kernel", "transform"):
        fn = getattr(_core, name, None)
        if callable(fn):
            return fn
    return None


@functools.lru_cache(maxsize=None)
def fused_gemm_kernel():
    """(kernel, origin): the fused GEMM every op launches, made once per process.

    origin is "transformer" (gemm_pointer_kernel rewritten by syncopate._core) or "fallback"
    (FALLBACK_FUSED_GEMM, when the bindings have no transformer or it fails)."""
    transform = _transformer()
    if transform is not None:
        try:
            # importlib: the package re-exports a function named gemm over the module name
            gemm_module = importlib.import_module("syncopate.kernels.gemm")

            with open(gemm_module.__file__, encoding="utf-8") as f:
                source = f.read()
            result = transform(source, gemm_module.__file__, "gemm_pointer_kernel")
            text = result if isinstance(result, str) else getattr(result, "source")
            # Triton reads a kernel's source through inspect, so the module needs a real file.
            path = os.path.join(tempfile.mkdtemp(prefix="syncopate-"), "fused_gemm.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            # Named inside syncopate.kernels so that gemm.py's relative imports resolve.
            name = "syncopate.kernels._gemm_transformed"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module.gemm_pointer_kernel, "transformer"
        except Exception as exc:  # noqa: BLE001 - any failure falls back, and says so
            import warnings

            warnings.warn(f"syncopate: the transformer could not build the fused GEMM ({exc}); "
                          "using the hand-written fallback kernel")
    return fallback_fused_gemm, "fallback"


def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


class FusedGemmLauncher:
    """Launches the fused GEMM for one rank's tile tables; warms it up before any wait spins."""

    def __init__(self, plan, rank: int, m: int, n: int, k: int, accesses, device: torch.device,
                 backend: str, wait_bound_ns: int):
        import syncopate as sy

        self.kernel, self.origin = fused_gemm_kernel()
        _unspecialize(self.kernel)
        grid = sy.TileGrid(m, n, BLOCK_M, BLOCK_N)
        tables = sy.lower(plan, grid, [sy.TileAccess(t, role, md, nd) for t, role, md, nd in accesses])
        order = sy.tile_order(plan, tables[rank], grid, "arrival")
        self.tables = TileTables.from_signal_table(tables[rank], order, grid.tiles_n)
        self.arrays = self.tables.device_arrays(device)
        self.num_programs = max(1, min(self.tables.num_tiles, _num_sms(device) - RESERVED_SMS[backend]))
        self.m, self.n, self.k = m, n, k
        self.device = device
        self.wait_bound_ns = wait_bound_ns
        self.pending_errors = []

    def _args(self, a, b, c):
        return (a, b, c, self.m, self.n, self.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                c.stride(0), c.stride(1), self.num_programs)

    def _meta(self):
        return dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                    num_warps=NUM_WARPS, num_stages=NUM_STAGES)

    def warm_up(self, a, b, c, signals_like: torch.Tensor) -> None:
        """Compiles and loads the kernel with the specialisations real calls use, on scratch
        signals (epoch 0: every wait holds at once; notifies land in the scratch)."""
        scratch = torch.zeros_like(signals_like)
        arrays = dict(self.arrays)
        arrays.update(sy_signals=scratch, sy_tiles_n=self.tables.tiles_n, sy_epoch=0,
                      sy_wait_bound_ns=self.wait_bound_ns, sy_rank=self.tables.rank,
                      sy_error=new_error_record(self.device))
        self.kernel[(self.num_programs,)](*self._args(a, b, c), **self._meta(), **arrays)
        torch.cuda.synchronize(self.device)

    def launch(self, a, b, c, signals: torch.Tensor, epoch: int) -> None:
        error = launch(self.kernel, (self.num_programs,), self.tables, *self._args(a, b, c),
                       signals=signals, epoch=epoch, wait_bound_ns=self.wait_bound_ns, sync=False,
                       device_arrays=self.arrays, **self._meta())
        self.pending_errors.append(error)

    def check(self) -> None:
        """After a synchronize: raises WaitTimeoutError for the first call whose tile timed out."""
        pending, self.pending_errors = self.pending_errors, []
        for error in pending:
            check_error(error, self.tables, "fused GEMM")


def check_out(out, shape, dtype, device, who):
    """`out` if it fits (shape, dtype, device, contiguous), a new tensor if None."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device or not out.is_contiguous():
        raise UserError(f"{who}: out must be a contiguous {list(shape)} {dtype} tensor on {device}, got "
                        f"{list(out.shape)} {out.dtype} on {out.device}")
    return out


def _group_rank_world(group):
    import torch.distributed as dist

    if group is None or not (dist.is_available() and dist.is_initialized()):
        return None, 0, 1
    return group, dist.get_rank(group), dist.get_world_size(group)


def _barrier(group, device):
    import torch.distributed as dist

    if group is not None and dist.get_world_size(group) > 1:
        dist.barrier(group=group, device_ids=[device.index])


class AgGemm:
    """Context of AG+GEMM for fixed shapes: owns the heap (gathered A, signals), the executor
    and the fused kernel. Call it with a_shard [m / world, k] and b [k, n]."""

    def __init__(self, group, *, m: int, k: int, n: int, dtype: torch.dtype,
                 device: Optional[torch.device] = None, backend: str = "copy-engine",
                 algorithm: str = "direct", split: int = 1, wait_bound_ns: int = DEFAULT_WAIT_BOUND_NS,
                 drop_chunk: int = -1, sequential: Optional[bool] = None):
        import syncopate as sy

        group, rank, world = _group_rank_world(group)
        if backend not in BACKENDS:
            raise UserError(f"AgGemm: backend {backend!r} is not one of {BACKENDS}")
        if m % world != 0:
            raise ShapeError(f"AgGemm: m={m} rows cannot be gathered from {world} equal shards")
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self.m, self.k, self.n, self.dtype, self.rank, self.world = m, k, n, dtype, rank, world
        self.shard_rows = m // world
        self.sequential = self.shard_rows < BLOCK_M if sequential is None else bool(sequential)
        self.plan = sy.make_plan("all-gather", world_size=world, shape=[m, k], algorithm=algorithm,
                                 split=split, dtype=plan_dtype(dtype), dim=0, backend=backend, tensor="a")
        accesses = [("a", "consume", 0, -1)]
        self.ws = PlanWorkspace(self.plan, group, grid=(m, n, BLOCK_M, BLOCK_N), accesses=accesses,
                                device=self.device, wait_bound_ns=wait_bound_ns, drop_chunk=drop_chunk,
                                sm_copy_blocks=RESERVED_SMS["sm-copy"] - 4)
        self.a_full = self.ws.tensor("a", dtype)
        self.signals = self.ws.signals()
        self.gemm = None
        if not self.sequential:
            self.gemm = FusedGemmLauncher(self.plan, rank, m, n, k, accesses, self.device, backend, wait_bound_ns)
            b = torch.zeros((k, n), dtype=dtype, device=self.device)
            self.gemm.warm_up(self.a_full, b, torch.empty((m, n), dtype=dtype, device=self.device), self.signals)
        # No rank may start a call (and spin) before every rank has loaded its kernels.
        _barrier(group, self.device)

    @property
    def kernel_origin(self) -> str:
        return "sequential" if self.gemm is None else self.gemm.origin

    def __call__(self, a_shard: torch.Tensor, b: torch.Tensor, *, out: Optional[torch.Tensor] = None,
                 check: bool = CHECK_EACH_CALL) -> torch.Tensor:
        """c = all_gather(a_shard) @ b, into `out` if given. check: synchronize and raise a
        WaitTimeoutError now (else errors surface at the next check())."""
        if tuple(a_shard.shape) != (self.shard_rows, self.k) or tuple(b.shape) != (self.k, self.n):
            raise ShapeError(f"AgGemm: expected a_shard [{self.shard_rows}, {self.k}] and b [{self.k}, {self.n}], "
                             f"got {list(a_shard.shape)} and {list(b.shape)}")
        if a_shard.dtype != self.dtype or b.dtype != self.dtype:
            raise UserError(f"AgGemm: operands must be {self.dtype}, got {a_shard.dtype} and {b.dtype}")
        out = check_out(out, (self.m, self.n), self.dtype, self.device, "AgGemm")
        epoch = self.ws.next_epoch()
        self.ws.begin(epoch)
        lo = self.rank * self.shard_rows
        self.a_full[lo:lo + self.shard_rows].copy_(a_shard)
        self.ws.issue(epoch, wait_landed=self.sequential)
        if self.sequential:
            torch.matmul(self.a_full, b, out=out)
        else:
            self.gemm.launch(self.a_full, b, out, self.signals, epoch)
        self.ws.end(epoch)
        if check:
            self.check()
        return out

    def check(self) -> None:
        """Synchronizes, then raises WaitTimeoutError naming rank, slot, expected, seen, chunk."""
        self.ws.check(synchronize=True)
        if self.gemm is not None:
            self.gemm.check()


# Contexts made by forward(), by process group name and shapes: a cache, so that repeated calls
# reuse their buffers and compiled kernels (the torch custom op cannot carry a context).
_CONTEXTS: dict = {}


def context_for(cls, group, key, **kwargs):
    """The context of class `cls` for `group` and `key`, made on first use."""
    full_key = (cls.__name__, group.group_name) + key
    if full_key not in _CONTEXTS:
        _CONTEXTS[full_key] = cls(group, **kwargs)
    return _CONTEXTS[full_key]


def default_backend() -> str:
    return os.environ.get("SYNCOPATE_BACKEND", "copy-engine")


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup."""
    world = group.size()
    m, k, n = a.shape[0] * world, a.shape[1], b.shape[1]
    ctx = context_for(AgGemm, group, (m, k, n, a.dtype, a.device, default_backend()),
                      m=m, k=k, n=n, dtype=a.dtype, device=a.device, backend=default_backend())
    return ctx(a.contiguous(), b)
