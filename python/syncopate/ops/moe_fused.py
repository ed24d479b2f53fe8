"""The fused MoE dispatch's grouped GEMM: kernels/moe_gemm.py transformed, its tile tables, and
the slot layout that the MoE dispatch plan (plan/expert_parallel.hpp) lands rows in.

On rank r the received rows sit in capacity slots of x_recv [W * E * C, H]: slot q = s * E + e
holds the rows from rank s for local expert e (E = local experts, C = capacity), the first
recv_counts[q] of them real. Chunk (s -> r, e) of the plan lands slot q, after the chunk that
landed recv_counts[s, :]. The transformed grouped GEMM's tile (pid_m, pid_n) reads rows of one
slot (BLOCK_M divides C), so it waits for exactly that chunk, then reads the count.

`slot_tables` builds those tables in Python (slot q's landing signal is slot q of the table, its
chunk the plan's rows chunk id); `plan_tables` gets them from the plan by lowering (the C++
layers) and is what a runtime workspace would use; the tests check that the two agree.
`local_first_order` puts the tiles of the local slots first, then the peers' in the plan's
rounds (round i brings rank r - i's rows): the order the chunks are issued, local rows needing
no transfer.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import torch

from syncopate.errors import ShapeError, TransformError, Error, InternalError, UserError
from syncopate.ops.call_graphs import collection_held
from syncopate.launch import TileTables

KERNEL_MODULE = "syncopate.kernels.moe_gemm"
KERNEL = "moe_grouped_gemm"
# Row blocks of one slot that share each column block of the expert's matrix (kernels/moe_gemm.py).
GROUP_M = 8
_TMA_ALIGN_BYTES = 16


def rows_chunk_id(world: int, experts: int, src: int, dst: int, expert: int) -> int:
    """The rows chunk src -> dst for local expert `expert` (plan/expert_parallel.hpp's order:
    rounds of peer offset, each rank's counts chunk then its rows chunks)."""
    rnd = (dst - src) % world
    return (rnd * world + src) * (1 + experts) + 1 + expert


def _cached_args(op, a: torch.Tensor, w: torch.Tensor, c: torch.Tensor, counts: torch.Tensor):
    """grouped_gemm_args of a fused MoE op's launch, its checks and scalars kept per operand
    layout (a, w: device, dtype, address alignment, shape, strides; c: shape, strides; counts:
    dtype, size): a call with the layouts of an earlier one reuses them (the host's share of the
    call), whatever tensors it passes (the slot path's input is new each call)."""
    key = (
        a.device,
        a.dtype,
        a.data_ptr() % _TMA_ALIGN_BYTES,  # what tma_usable asks of the addresses
        tuple(a.shape),
        a.stride(),
        w.dtype,
        w.data_ptr() % _TMA_ALIGN_BYTES,
        tuple(w.shape),
        w.stride(),
        tuple(c.shape),
        c.stride(),
        counts.dtype,
        counts.numel(),
    )
    cache = op.__dict__.setdefault("_args_cache", {})
    hit = cache.get(key)
    if hit is None:
        cfg = op.config
        args, meta = grouped_gemm_args(
            a, w, c, counts, op.capacity, cfg.block_m, cfg.block_n, cfg.block_k, op.progs, group_m=cfg.group_m
        )
        if len(cache) > 64:  # layouts that keep changing: bounded
            cache.clear()
        cache[key] = hit = (args[4:], meta)
    scalars, meta = hit
    return (a, w, c, counts, *scalars), meta


def _error_record(device: torch.device):
    """(the kernel's wait-timeout record, the pinned host word its flag is copied to after each
    call, or None off CUDA)."""
    from syncopate.launch import new_error_record
    from syncopate.ops.fused_gemm import _host_flag

    return new_error_record(device), (_host_flag() if device.type == "cuda" else None)


def _after_call(op) -> None:
    """Behind a fused MoE call on the current stream: its kernel's flag to pinned host memory."""
    if op.flag is not None:
        op.flag.enqueue_copy(op.error.data_ptr(), torch.cuda.current_stream(op.device).cuda_stream)
    op.pending = True


def _check_op(op, kernel_name: str) -> None:
    from syncopate.launch import check_error

    if not op.pending:
        return
    op.pending = False
    try:
        op.ws.check()  # synchronizes
        check_error(op.error, op.tables, kernel_name)
    finally:
        op.error.zero_()
        if op.flag is not None:
            op.flag.clear()


def _poll_op(op, kernel_name: str) -> None:
    if op.pending and (op.ws.timed_out() or (op.flag is not None and op.flag.value != 0)):
        _check_op(op, kernel_name)


def check_backend(who: str, backend: str, group, device: torch.device) -> None:
    """Refuses an unknown backend, and NCCL where two ranks of `group` share a GPU (NCCL refuses
    two ranks on one device), by name. Collective over `group` for NCCL."""
    from syncopate.ops.moe import FUSED_BACKENDS

    if backend not in FUSED_BACKENDS:
        raise UserError(f"{who}: backend must be one of {FUSED_BACKENDS}, got {backend!r}")
    if backend != "nccl":
        return
    from syncopate.ops.common import ranks_sharing_a_device

    shared = ranks_sharing_a_device(group, device)
    if shared is not None:
        r, s, gpu = shared
        raise UserError(
            f"{who}: backend='nccl' cannot run here: ranks {r} and {s} share GPU {gpu} and NCCL refuses "
            f"two ranks on one device; use 'copy-engine' or 'sm-copy'"
        )


def check_geometry(who: str, capacity: int, block_m: int) -> None:
    if block_m < 1 or capacity % block_m:
        raise ShapeError(
            f"{who}: the capacity ({capacity} rows) must be a multiple of BLOCK_M={block_m}, so "
            f"that a tile reads one (source rank, expert) slot and waits for exactly its chunk"
        )


@dataclasses.dataclass(frozen=True)
class GroupedConfig:
    """Blocks and launch shape of the grouped GEMM (kernels/moe_gemm.py)."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = GROUP_M

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.num_warps}_s{self.num_stages}_g{self.group_m}"


def grouped_config(capacity: int) -> GroupedConfig:
    """The grouped GEMM's blocks for a capacity: 128 x 256 tiles (8 warps, two warpgroups, 3
    stages) where the capacity is a multiple of 128, else 64 x 128 (4 warps); groups of 8 row
    blocks. Measured on nvidia-h200 (bench/bench_moe.py's sweep, 2026-11-25, world 1): 128 x 256
    was the fastest of the configs tried at every row (Mixtral-like balanced 1.51 ms against
    1.56 ms for 128 x 128 in groups of 8 and 1.74 ms in groups of 9 (the whole slot), and
    torch._grouped_mm's 1.47 ms; DeepSeek-like 0.99 ms against 0.94 ms; Mixtral-like skewed
    1.73 ms against 1.43 ms)."""
    if capacity % 128 == 0:
        return GroupedConfig(128, 256, 64, 8, 3, group_m=8)
    return GroupedConfig(64, 128, 64, 4, 4, group_m=8)


def workspace_tables(ws, order: Sequence[int], tiles_n: int, rank: int, device: torch.device, backend: str):
    """The tile tables of a fused grouped GEMM from its PlanWorkspace's signal table, in tile order
    `order`: (TileTables, their device arrays, the persistent grid: one program per tile at most,
    the SMs the backend leaves otherwise)."""
    from syncopate.ops.fused_gemm import persistent_programs

    t = ws.table()
    tables = TileTables.from_lists(
        order, tiles_n, t["tile_waits"], t["tile_notifies"], t["slot_writers"], t["slot_chunks"], rank=rank
    )
    progs = max(1, min(tables.num_tiles, persistent_programs(device, backend)))
    return tables, tables.device_arrays(device), progs


def slot_tables(
    world: int,
    experts: int,
    capacity: int,
    block_m: int,
    tiles_n: int,
    rank: int,
    order: Optional[Sequence[int]] = None,
) -> TileTables:
    """Tile tables of the grouped GEMM on `rank`: tile (m, n) waits on landing slot q = m //
    (capacity / block_m), whose chunk is the rows chunk (q // E -> rank, q % E)."""
    check_geometry("slot_tables", capacity, block_m)
    per_slot = capacity // block_m
    slots = world * experts
    tiles_m = slots * per_slot
    waits = [[m // per_slot] for m in range(tiles_m) for _ in range(tiles_n)]
    chunks = [rows_chunk_id(world, experts, q // experts, rank, q % experts) for q in range(slots)]
    if order is None:
        order = local_first_order(world, experts, capacity, block_m, tiles_n, rank)
    return TileTables.from_lists(order, tiles_n, waits, [[] for _ in waits], [1] * slots, chunks, rank=rank)


def slot_order(blocks_per_slot: int, tiles_n: int, group_m: int) -> list:
    """(row block inside the slot, column) of a slot's tiles in the kernel's order
    (kernels/moe_gemm.py `slot_grouped_tile`): groups of group_m row blocks, each group column
    by column, so the group's row blocks share each column block of the expert's matrix."""
    out = []
    for first in range(0, blocks_per_slot, group_m):
        rows = min(group_m, blocks_per_slot - first)
        out.extend((first + b, n) for n in range(tiles_n) for b in range(rows))
    return out


def local_first_order(
    world: int, experts: int, capacity: int, block_m: int, tiles_n: int, rank: int, group_m: int = GROUP_M
) -> list:
    """Tile ids: the slots of rank itself first, then of rank - 1, rank - 2, ... (mod world);
    inside a source, by expert, then in `slot_order` (groups of group_m row blocks)."""
    check_geometry("local_first_order", capacity, block_m)
    per_slot = capacity // block_m
    inside = slot_order(per_slot, tiles_n, max(1, group_m))
    order = []
    for i in range(world):
        s = (rank - i) % world  # round i brings the rows of rank - i (the plan's peer offset i)
        for e in range(experts):
            q = s * experts + e
            order.extend((q * per_slot + b) * tiles_n + n for b, n in inside)
    return order


def plan_tables(
    plan,
    world: int,
    experts: int,
    capacity: int,
    hidden_out: int,
    block_m: int,
    block_n: int,
    rank: int,
    order: Optional[Sequence[int]] = None,
) -> TileTables:
    """The same tables from the plan by lowering (syncopate._core): the kernel's access is a
    consume of x_recv's rows (m_dim 0)."""
    from syncopate import _core

    check_geometry("plan_tables", capacity, block_m)
    grid = _core.TileGrid(world * experts * capacity, hidden_out, block_m, block_n)
    access = _core.TileAccess("x_recv", "consume", 0, -1, False)
    table = _core.lower(plan, grid, [access])[rank]
    tiles_n = -(-hidden_out // block_n)
    if order is None:
        order = local_first_order(world, experts, capacity, block_m, tiles_n, rank)
    return TileTables.from_signal_table(table, order, tiles_n)


@functools.lru_cache(maxsize=None)
def transformed_kernel():
    """kernels/moe_gemm.py's grouped GEMM as the transformer rewrites it (once per process)."""
    from syncopate.ops.fused_gemm import transformed_kernel as transform

    return transform(KERNEL, KERNEL_MODULE)


def tma_usable(a: torch.Tensor, w: torch.Tensor, block_k: int) -> bool:
    """Whether the grouped GEMM may load A and w through tensor descriptors: CUDA, bf16/fp16,
    rows contiguous with 16-byte aligned bases and leading strides, and w [E, K, N] seen as
    [E * K, N] (each expert's matrix contiguous, K a multiple of BLOCK_K so a K block never
    reaches into the next expert's rows)."""
    if a.device.type != "cuda" or a.dtype not in (torch.bfloat16, torch.float16):
        return False
    experts, k, n = w.shape
    size = a.element_size()
    return (
        a.stride(1) == 1
        and w.stride(2) == 1
        and w.stride(0) == k * w.stride(1)
        and k % block_k == 0
        and a.data_ptr() % _TMA_ALIGN_BYTES == 0
        and w.data_ptr() % _TMA_ALIGN_BYTES == 0
        and (a.stride(0) * size) % _TMA_ALIGN_BYTES == 0
        and (w.stride(1) * size) % _TMA_ALIGN_BYTES == 0
    )


def grouped_gemm_args(
    a: torch.Tensor,
    w: torch.Tensor,
    c: torch.Tensor,
    counts: torch.Tensor,
    capacity: int,
    block_m: int,
    block_n: int,
    block_k: int,
    num_progs: int,
    *,
    group_m: int = GROUP_M,
    use_tma: Optional[bool] = None,
):
    """(positional args, meta) of one launch of the grouped GEMM (original or transformed).
    use_tma: None picks tensor descriptors where `tma_usable` allows them; True insists."""
    who = "moe_grouped_gemm"
    check_geometry(who, capacity, block_m)
    experts, k, n = w.shape
    if a.dim() != 2 or a.shape[1] != k or a.shape[0] % (capacity * experts):
        raise ShapeError(f"{who}: a must be [sources * {experts} * {capacity}, {k}], got {list(a.shape)}")
    if tuple(c.shape) != (a.shape[0], n):
        raise ShapeError(f"{who}: c must be [{a.shape[0]}, {n}], got {list(c.shape)}")
    slots = a.shape[0] // capacity
    if counts.dtype != torch.int32 or counts.numel() != slots:
        raise ShapeError(
            f"{who}: counts must be int32 with one entry per slot ({slots}), got {counts.dtype} {list(counts.shape)}"
        )
    usable = tma_usable(a, w, block_k) or (a.device.type != "cuda" and use_tma and k % block_k == 0)
    if use_tma and not usable:
        raise ShapeError(
            f"{who}: use_tma=True but the operands cannot be described by TMA (a {list(a.shape)} "
            f"strides {list(a.stride())}, w {list(w.shape)} strides {list(w.stride())}, BLOCK_K={block_k})"
        )
    tma = usable if use_tma is None else bool(use_tma)
    if tma:
        from syncopate.kernels.gemm import ensure_descriptor_allocator

        if a.device.type == "cuda":
            ensure_descriptor_allocator()
    args = (
        a,
        w,
        c,
        counts,
        n,
        k,
        capacity,
        experts,
        a.shape[0] // block_m,
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        c.stride(1),
    )
    meta = dict(NUM_PROGS=num_progs, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, USE_TMA=tma)
    return args, meta


def local_rows(send_counts: Sequence[Sequence[int]], rank: int) -> tuple:
    """(first, end) of the rows `rank` routes to its own experts, in send order (grouped by
    global expert, so the rows for rank j's experts are one run): send_counts[j][e] host ints."""
    first = sum(int(v) for row in send_counts[:rank] for v in row)
    return first, first + sum(int(v) for v in send_counts[rank])


def own_chunks(plan, rank: int) -> list:
    """Ids of the plan's copies of `rank`'s own slots (src == dst == rank, the rows chunks of the
    dispatch plan, every local chunk of the combine plan; the dispatch plan's local counts chunk
    still moves): the MoE ops read or write those slots in place (PlanWorkspace in_place_chunks)."""
    return [c.id for c in plan.chunks if c.src == rank and c.dst == rank and c.tensor in ("x_send", COMBINE_SEND)]


def gather_rows(y_send: torch.Tensor, y_recv: torch.Tensor, dest, local: Optional[tuple]) -> torch.Tensor:
    """The combine's counterpart of `pack_rows`: the experts' outputs for a rank's rows in the
    order it sent them (`dest`: their places in y_recv's slots), rows local[0]:local[1] (its own
    experts') straight from y_send's local slots (slot (r, e) sits at the same rows of both),
    the others from y_recv, where the plan's chunks landed them. local None: all from y_recv."""
    if local is None:
        return y_recv[dest]
    lo, hi = local
    out = torch.empty((dest.shape[0], y_recv.shape[1]), dtype=y_recv.dtype, device=y_recv.device)
    if lo > 0:
        out[:lo] = y_recv[dest[:lo]]
    if hi > lo:
        out[lo:hi] = y_send[dest[lo:hi]]
    if hi < dest.shape[0]:
        out[hi:] = y_recv[dest[hi:]]
    return out


def pack_rows(x_send: torch.Tensor, x_recv: Optional[torch.Tensor], rows, dest, local: tuple) -> None:
    """Writes a call's routed rows into their capacity slots: rows[local[0]:local[1]] (for this
    rank's own experts) straight into x_recv, where the grouped GEMM reads them in place (slot
    (r, e) sits at the same rows of x_send and x_recv, so `dest` serves both), the others into
    x_send, whence the plan's chunks carry them. x_recv None: every row into x_send (the local
    chunks copy them)."""
    lo, hi = local
    if x_recv is None:
        x_send[dest] = rows
        return
    if lo > 0:
        x_send[dest[:lo]] = rows[:lo]
    if hi > lo:
        x_recv[dest[lo:hi]] = rows[lo:hi]
    if hi < rows.shape[0]:
        x_send[dest[hi:]] = rows[hi:]


def reference(a: torch.Tensor, w: torch.Tensor, counts: Sequence[int], capacity: int) -> list:
    """[(rows, slot's product in fp32)] per slot: a's first counts[q] rows of slot q times w[e]."""
    experts = w.shape[0]
    out = []
    for q, rows in enumerate(int(v) for v in counts):
        at = q * capacity
        out.append(a[at : at + rows].float() @ w[q % experts].float())
    return out


class MoeFusedDispatch:
    """The fused dispatch of one rank: the MoE dispatch plan run by the runtime's chunks
    (copy engine or SM copy) while the transformed grouped GEMM's tiles wait for exactly their
    (source, expert) chunk, local slots first.

    A call: begin (epoch), pack this rank's routed rows into its x_send slots and its counts into
    send_counts (heap), publish, fork, launch the grouped GEMM, issue the chunks, end. Copy-engine
    chunks move whole capacity slots (their sizes are host values), SM-copy chunks only each
    slot's counted rows (the copy kernel reads the count on the device); the GEMM reads each slot's
    count from recv_counts after its wait and computes only those rows. Returns h [W * E * C, N]
    in capacity slots (slot s * E + e: rows from rank s for local expert e); the slots' rows past
    their count are unspecified. Nothing waits for the kernel: the call's waits are checked when
    the next call starts, or by `check()` (on nvidia-h200, 1.7 ms of a 3.7 ms fused dispatch was
    outside this call when it synchronized at its end: the GPU then idles while the host unpacks)."""

    def __init__(
        self,
        group,
        *,
        local_experts: int,
        capacity: int,
        hidden: int,
        out_features: int,
        dtype: torch.dtype,
        device: torch.device,
        backend: str = "copy-engine",
        config: Optional[GroupedConfig] = None,
        wait_bound_ns: int = 10_000_000_000,
        drop_chunk: int = -1,
        local_in_place: bool = True,
    ):
        from syncopate import _core
        from syncopate.runtime import PlanWorkspace

        who = "MoeFusedDispatch"
        self.config = config if config is not None else grouped_config(capacity)
        block_m, block_n, block_k = self.config.block_m, self.config.block_n, self.config.block_k
        check_geometry(who, capacity, block_m)
        self.group = group
        self.world = 1 if group is None else group.size()
        self.rank = 0 if group is None else group.rank()
        self.experts, self.capacity, self.hidden, self.n = local_experts, capacity, hidden, out_features
        self.dtype, self.device = dtype, device
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        check_backend(who, backend, group, device)
        names = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
        if dtype not in names:
            raise ShapeError(f"{who}: dtype must be bf16, fp16 or fp32, got {dtype}")
        self.plan = _core.make_moe_dispatch_plan(
            world_size=self.world,
            local_experts=local_experts,
            capacity=capacity,
            hidden=hidden,
            dtype=names[dtype],
            backend=backend,
        )
        rows = self.world * local_experts * capacity
        self.ws = PlanWorkspace(
            self.plan,
            group,
            grid=(rows, out_features, block_m, block_n),
            accesses=[("x_recv", "consume", 0, -1)],
            device=device,
            wait_bound_ns=wait_bound_ns,
            drop_chunk=drop_chunk,  # test hook: the runtime never issues this chunk
            in_place_chunks=own_chunks(self.plan, self.rank) if local_in_place else (),
        )
        self.local_in_place = local_in_place
        self.x_send = self.ws.tensor("x_send", dtype)
        self.x_recv = self.ws.tensor("x_recv", dtype)
        self.send_counts = self.ws.tensor("send_counts", torch.int32).view(-1)
        self.recv_counts = self.ws.tensor("recv_counts", torch.int32).view(-1)
        self.signals = self.ws.signals()
        self.tiles_n = -(-out_features // block_n)
        order = local_first_order(
            self.world, local_experts, capacity, block_m, self.tiles_n, self.rank, self.config.group_m
        )
        self.tables, self.device_arrays, self.progs = workspace_tables(
            self.ws, order, self.tiles_n, self.rank, device, backend
        )
        self.kernel = transformed_kernel()
        self.error, self.flag = _error_record(device)
        self.pending = False  # a call whose waits are not checked yet
        self._warm_up()

    def _args(self, w, h):
        """The grouped GEMM's launch arguments (checked, cached per layout): taken before a
        call's begin(), so an operand the launch would refuse is refused before any work."""
        return _cached_args(self, self.x_recv, w, h, self.recv_counts)

    def _launch(self, prepared, epoch):
        from syncopate.launch import launch

        cfg = self.config
        args, meta = prepared
        self.error = launch(
            self.kernel,
            (self.progs,),
            self.tables,
            *args,
            signals=self.signals,
            epoch=epoch,
            wait_bound_ns=self.ws.wait_bound_ns,
            error=self.error,
            clear_error=False,
            sync=False,
            device_arrays=self.device_arrays,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
            **meta,
        )

    def _warm_up(self):
        """Loads the kernel before any wait spins (epoch word 0: every wait holds at once)."""
        from syncopate.launch import epoch_word

        w = torch.zeros((self.experts, self.hidden, self.n), dtype=self.dtype, device=self.device)
        h = torch.empty((self.x_recv.shape[0], self.n), dtype=self.dtype, device=self.device)
        self._launch(self._args(w, h), epoch_word(0, self.device))
        torch.cuda.synchronize(self.device)

    def check(self) -> None:
        """Raises WaitTimeoutError if a call's kernel or runtime waits ran past their bound since
        the last check (synchronizes the device). A call does not wait for its kernel: each call
        starts with `poll`, which looks without synchronizing, or the caller checks with this."""
        _check_op(self, KERNEL)

    def poll(self) -> None:
        """check() if an earlier call's wait is seen timed out without synchronizing (the
        runtime's record is mapped host memory, the kernel's flag is copied to pinned host memory
        behind each call): a lost chunk surfaces a call or two later, no call waits for the GPU."""
        _poll_op(self, KERNEL)

    def __call__(
        self, rows: torch.Tensor, dest: torch.Tensor, send_counts: torch.Tensor, w: torch.Tensor, local: tuple
    ):
        """rows [R, H]: this rank's routed rows in send order (grouped by global expert);
        dest [R]: each row's position in x_send (slot * capacity + index in slot);
        send_counts [W * E] int32 (device); w [E, H, N]; local: (first, end) of the rows for
        this rank's own experts (`local_rows`). Returns h (enqueued, not waited for).
        local_in_place: those rows go straight into x_recv's local slots, where the tiles read
        them, and the runtime raises the local chunks' landings without copying
        (PlanWorkspace in_place_chunks: `own_chunks`)."""
        self.poll()
        ws = self.ws
        h = torch.empty((self.x_recv.shape[0], self.n), dtype=self.dtype, device=self.device)
        prepared = self._args(w, h)
        ws.begin()
        pack_rows(self.x_send, self.x_recv if self.local_in_place else None, rows, dest, local)
        self.send_counts.copy_(send_counts)
        ws.publish()
        ws.fork()
        self._launch_and_issue(prepared)
        ws.end()
        _after_call(self)
        return h

    def _launch_and_issue(self, prepared) -> None:
        """The grouped GEMM, then every chunk its tiles wait for, with nothing that may
        synchronize the device in between (call_graphs.collection_held)."""
        with collection_held():
            self._launch(prepared, self.ws.epoch_word)
            self.ws.issue_chunks()

    def own_slot_rows(self) -> tuple:
        """(first, end) rows of this rank's own slots in the slot numbering (global expert g,
        row i: g * C + i), which the slot path packs straight into x_recv; (0, 0) without
        local_in_place (every row into x_send, the local chunks copy them)."""
        if not self.local_in_place:
            return (0, 0)
        per_rank = self.experts * self.capacity
        return (self.rank * per_rank, (self.rank + 1) * per_rank)

    def call_slots(self, x: torch.Tensor, dest: torch.Tensor, send_counts: torch.Tensor, w: torch.Tensor, top_k: int):
        """The capacity-slot call (ops/moe_slots.py), with no host synchronization: x [T, H] the
        tokens, dest [T * top_k] each routed row's place in the slots (-1: not sent), send_counts
        int32 [W * E] (clamped to the capacity), w [E, H, N]. Returns (h [W * E * C, N] in slots,
        recv_counts int32 [W * E]: a copy taken after the kernel, so a peer's next call cannot
        change it under the combine)."""
        from syncopate.ops.moe_slots import pack_rows as pack_slots

        self.poll()
        ws = self.ws
        h = torch.empty((self.x_recv.shape[0], self.n), dtype=self.dtype, device=self.device)
        prepared = self._args(w, h)
        ws.begin()
        pack_slots(x, dest, top_k, self.x_send, self.x_recv, self.own_slot_rows())
        self.send_counts.copy_(send_counts)
        ws.publish()
        ws.fork()
        self._launch_and_issue(prepared)
        # On the call's stream after the kernel, whose tiles waited for every slot's chunk (each
        # after its count), and before end(), after which a peer's next call may land new counts.
        recv_counts = self.recv_counts.clone()
        ws.end()
        _after_call(self)
        return h, recv_counts


def predict_at_capacity(
    world: int,
    local_experts: int,
    capacity: int,
    hidden: int,
    out_features: int,
    *,
    dtype: str = "bf16",
    backend: str = "copy-engine",
    block_m: int = 64,
    block_n: int = 128,
    calibration=None,
):
    """The simulator's prediction (fused, sequential; microseconds) of the fused dispatch with
    every slot full: each chunk moves `capacity` rows (as the copy engine does) and every tile
    computes. For a real routing histogram see `predict_for_counts`."""
    return _predict(
        world, local_experts, capacity, hidden, out_features, None, dtype, backend, block_m, block_n, calibration
    )


def predict_for_counts(
    recv_counts: Sequence[Sequence[Sequence[int]]],
    capacity: int,
    hidden: int,
    out_features: int,
    *,
    dtype: str = "bf16",
    backend: str = "copy-engine",
    block_m: Optional[int] = None,
    block_n: Optional[int] = None,
    calibration=None,
):
    """The simulator's prediction of the fused dispatch for one routing histogram:
    recv_counts[r][s][e] rows that rank r receives from rank s for its local expert e (every
    rank's DispatchLayout.recv_counts). Copy-engine chunks move whole capacity slots, SM-copy
    chunks only the counted rows (GemmShape.chunk_rows, from `chunk_rows_for_counts`), and a
    tile whose rows start past its slot's count waits for its chunk but computes nothing
    (GemmShape.tile_scale 0). The sequential prediction is the same plan's collective, then the
    same tiles: on the copy engine an upper bound for the sequential path, whose all-to-all moves
    only the counted rows. Blocks default to the fused op's (`grouped_config`)."""
    world = len(recv_counts)
    cfg = grouped_config(capacity)
    block_m = cfg.block_m if block_m is None else block_m
    block_n = cfg.block_n if block_n is None else block_n
    experts = len(recv_counts[0][0]) if world and len(recv_counts[0]) else 0
    return _predict(
        world, experts, capacity, hidden, out_features, recv_counts, dtype, backend, block_m, block_n, calibration
    )


def chunk_rows_for_counts(recv_counts: Sequence[Sequence[Sequence[int]]]) -> list:
    """[chunk id] rows each chunk of the MoE dispatch plan carries for this histogram: the rows
    chunk (s -> r, e) recv_counts[r][s][e], the counts chunks 0 (they carry no run-time rows).
    Call `tile_scale_for_counts` first: it checks the histogram."""
    world = len(recv_counts)
    experts = len(recv_counts[0][0])
    rows = [0] * (world * world * (1 + experts))
    for r, per_source in enumerate(recv_counts):
        for s, row in enumerate(per_source):
            for e, n in enumerate(row):
                rows[rows_chunk_id(world, experts, s, r, e)] = int(n)
    return rows


def tile_scale_for_counts(
    recv_counts: Sequence[Sequence[Sequence[int]]], capacity: int, block_m: int, tiles_n: int
) -> list:
    """[rank][tile id] 1.0 for a tile with rows to compute, 0.0 for one whose rows start past its
    slot's count (tile (m, n): slot m // (capacity / block_m), rows from (m % ...) * block_m)."""
    who = "predict_for_counts"
    world = len(recv_counts)
    check_geometry(who, capacity, block_m)
    per_slot = capacity // block_m
    experts = None
    out = []
    for r, per_source in enumerate(recv_counts):
        if len(per_source) != world:
            raise ShapeError(f"{who}: recv_counts[{r}] has {len(per_source)} sources for a world of {world}")
        counts = []
        for s, row in enumerate(per_source):
            if experts is None:
                experts = len(row)
            if len(row) != experts or experts < 1:
                raise ShapeError(f"{who}: recv_counts[{r}][{s}] has {len(row)} experts, expected {experts} (>= 1)")
            for e, rows in enumerate(row):
                if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= capacity:
                    raise ShapeError(
                        f"{who}: rank {r} receives {rows!r} rows from rank {s} for expert {e}: a count must be "
                        f"an integer in 0..{capacity} (the capacity)"
                    )
                counts.append(rows)
        scale = []
        for m in range(len(counts) * per_slot):
            live = 1.0 if (m % per_slot) * block_m < counts[m // per_slot] else 0.0
            scale.extend([live] * tiles_n)
        out.append(scale)
    return out


def _predict(
    world, local_experts, capacity, hidden, out_features, recv_counts, dtype, backend, block_m, block_n, calibration
):
    import syncopate as sy
    from syncopate import _core
    from syncopate.ops.choice import cached_calibration, calibration_name

    who = "predict_for_counts" if recv_counts is not None else "predict_at_capacity"
    check_geometry(who, capacity, block_m)
    if world < 1:
        raise ShapeError(f"{who}: recv_counts must hold one entry per rank, got none")
    plan = _core.make_moe_dispatch_plan(
        world_size=world, local_experts=local_experts, capacity=capacity, hidden=hidden, dtype=dtype, backend=backend
    )
    gemm = sy.GemmShape(world * local_experts * capacity, out_features, hidden, block_m, block_n)
    if recv_counts is not None:
        gemm.tile_scale = tile_scale_for_counts(recv_counts, capacity, block_m, -(-out_features // block_n))
        gemm.chunk_rows = chunk_rows_for_counts(recv_counts)
    calib = calibration if calibration is not None else cached_calibration(calibration_name())
    access = _core.TileAccess("x_recv", "consume", 0, -1, False)
    return _core.simulate(plan, gemm, calib, accesses=[access])


# -- the fused combine --------------------------------------------------------------------------

# One kernel for both ops (kernels/moe_gemm.py): the combine binds its notifies, no waits.
COMBINE_KERNEL = KERNEL
# The combine plan's tensors: y_send slot (j, e) on rank r holds expert e's output rows for
# rank j's tokens; chunk (r -> j, e) lands it in slot (r, e) of y_recv on j.
COMBINE_SEND, COMBINE_RECV = "y_send", "y_recv"


def combine_plan(world: int, experts: int, capacity: int, hidden: int, *, dtype: str = "bf16", backend: str):
    """The return all-to-all of the combine: the all-to-all template over y_send [W * E * C, H]
    with E sub-chunks per block (direct rounds: the own block first, then peer r + 1, r + 2,
    ...), so chunk (r -> j, e) carries slot (j, e) of y_send to slot (r, e) of y_recv on j.
    Whole capacity slots: the home rank knows how many rows of each are real (it sent them)."""
    from syncopate import _core

    check_geometry("combine_plan", capacity, 1)
    return _core.make_plan(
        "all-to-all",
        world_size=world,
        shape=[world * experts * capacity, hidden],
        algorithm="direct",
        split=experts,
        dtype=dtype,
        backend=backend,
        tensor=COMBINE_SEND,
        output=COMBINE_RECV,
    )


def combine_order(
    world: int, experts: int, capacity: int, block_m: int, tiles_n: int, rank: int, group_m: int = GROUP_M
) -> list:
    """Tile ids of the combine's GEMM in the order its chunks leave (the template's stream
    order): the slots for rank itself, then for rank + 1, rank + 2, ... (mod world); inside,
    by expert, then `slot_order`."""
    check_geometry("combine_order", capacity, block_m)
    per_slot = capacity // block_m
    inside = slot_order(per_slot, tiles_n, max(1, group_m))
    order = []
    for i in range(world):
        j = (rank + i) % world
        for e in range(experts):
            q = j * experts + e
            order.extend((q * per_slot + b) * tiles_n + n for b, n in inside)
    return order


def combine_tables(
    plan,
    world: int,
    experts: int,
    capacity: int,
    hidden: int,
    block_m: int,
    block_n: int,
    rank: int,
    group_m: int = GROUP_M,
) -> TileTables:
    """The combine GEMM's tables by lowering the combine plan: each tile notifies the ready slot
    of the chunk that carries its slot home; a chunk waits for every tile of its slot."""
    from syncopate import _core

    check_geometry("combine_tables", capacity, block_m)
    grid = _core.TileGrid(world * experts * capacity, hidden, block_m, block_n)
    access = _core.TileAccess(COMBINE_SEND, "produce", 0, 1, False)
    table = _core.lower(plan, grid, [access])[rank]
    tiles_n = -(-hidden // block_n)
    order = combine_order(world, experts, capacity, block_m, tiles_n, rank, group_m)
    return TileTables.from_signal_table(table, order, tiles_n)


def sent_rows(send_counts: Sequence[Sequence[int]], capacity: int, device: torch.device) -> torch.Tensor:
    """For the rows a rank sent, in the order it sent them (by global expert, j * E + e), each
    row's place in its x_send / y_recv slots (slot (j, e), in order): (j * E + e) * C + i."""
    from syncopate.ops.moe import concat_ranges

    counts = [int(v) for row in send_counts for v in row]
    return concat_ranges([q * capacity for q in range(len(counts))], counts, device)


class MoeFusedCombine:
    """The fused combine of one rank: the expert down-projection over capacity slots
    (kernels/moe_gemm.py `moe_grouped_gemm`, transformed, with its notifies bound) whose tiles announce their rows
    as they are stored, while the combine plan's chunks (copy engine or SM copy) carry each
    (destination rank, expert) slot home as soon as its last tile is done, the own slots first.

    A call (`__call__(a_slots, counts, w, dest, local)`): a_slots [W * E * C, K] the experts'
    inputs in the dispatch's slots (slot s * E + e: rows from rank s for expert e, the first
    counts[q] real), counts the device int32 [W * E] of those, w [E, K, H], dest the rows this
    rank sent (`sent_rows`), local (first, end) of those for its own experts (`local_rows`).
    begin, fork, the GEMM, the chunks, wait until this rank's slots landed, gather the experts'
    outputs for this rank's rows in the order they were sent (`gather_rows`: with
    local_in_place, the default, its own slots straight from y_send, their local chunks copying
    nothing), end. The weighted sum over each token's k rows is the caller's
    (MoeDispatchCombine)."""

    def __init__(
        self,
        group,
        *,
        local_experts: int,
        capacity: int,
        in_features: int,
        hidden: int,
        dtype: torch.dtype,
        device: torch.device,
        backend: str = "copy-engine",
        config: Optional[GroupedConfig] = None,
        wait_bound_ns: int = 10_000_000_000,
        local_in_place: bool = True,
    ):
        from syncopate.runtime import PlanWorkspace, plan_dtype

        who = "MoeFusedCombine"
        self.config = config if config is not None else grouped_config(capacity)
        cfg = self.config
        check_geometry(who, capacity, cfg.block_m)
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ShapeError(f"{who}: dtype must be bf16, fp16 or fp32, got {dtype}")
        self.group = group
        self.world = 1 if group is None else group.size()
        self.rank = 0 if group is None else group.rank()
        self.experts, self.capacity, self.k, self.hidden = local_experts, capacity, in_features, hidden
        self.dtype, self.device = dtype, device
        check_backend(who, backend, group, device)
        self.plan = combine_plan(self.world, local_experts, capacity, hidden, dtype=plan_dtype(dtype), backend=backend)
        rows = self.world * local_experts * capacity
        self.ws = PlanWorkspace(
            self.plan,
            group,
            grid=(rows, hidden, cfg.block_m, cfg.block_n),
            accesses=[(COMBINE_SEND, "produce", 0, 1)],
            device=device,
            wait_bound_ns=wait_bound_ns,
            in_place_chunks=own_chunks(self.plan, self.rank) if local_in_place else (),
        )
        self.local_in_place = local_in_place
        # The experts' inputs in the dispatch's slots (the caller scatters its rows in; rows
        # past a slot's count are never stored, whatever they hold).
        self.a_slots = torch.empty((rows, in_features), dtype=dtype, device=device)
        self.y_send = self.ws.tensor(COMBINE_SEND, dtype)
        self.y_recv = self.ws.tensor(COMBINE_RECV, dtype)
        self.signals = self.ws.signals()
        self.tiles_n = -(-hidden // cfg.block_n)
        order = combine_order(self.world, local_experts, capacity, cfg.block_m, self.tiles_n, self.rank, cfg.group_m)
        # Not a producer in reserved_sms's sense: the return all-to-all copies, nothing adds on
        # the destination, so no add kernels need SMs beside the GEMM.
        self.tables, self.device_arrays, self.progs = workspace_tables(
            self.ws, order, self.tiles_n, self.rank, device, backend
        )
        self.kernel = transformed_kernel()
        self.error, self.flag = _error_record(device)
        self.pending = False  # a call whose waits are not checked yet
        self._warm_up()

    def _launch(self, prepared, signals, epoch):
        """prepared: `_cached_args` of the launch, taken before the call's begin()."""
        from syncopate.launch import launch

        cfg = self.config
        args, meta = prepared
        self.error = launch(
            self.kernel,
            (self.progs,),
            self.tables,
            *args,
            signals=signals,
            epoch=epoch,
            wait_bound_ns=self.ws.wait_bound_ns,
            error=self.error,
            clear_error=False,
            sync=False,
            device_arrays=self.device_arrays,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
            **meta,
        )

    def _warm_up(self):
        """Compiles and loads the kernel on scratch: its notifies land in scratch signals and
        its rows in a scratch output, never in y_send (a peer's first call may read it)."""
        from syncopate.launch import epoch_word

        rows = self.y_send.shape[0]
        a = torch.zeros((rows, self.k), dtype=self.dtype, device=self.device)
        w = torch.zeros((self.experts, self.k, self.hidden), dtype=self.dtype, device=self.device)
        c = torch.empty((rows, self.hidden), dtype=self.dtype, device=self.device)
        counts = torch.full((rows // self.capacity,), self.capacity, dtype=torch.int32, device=self.device)
        self._launch(_cached_args(self, a, w, c, counts), torch.zeros_like(self.signals), epoch_word(0, self.device))
        torch.cuda.synchronize(self.device)

    def check(self) -> None:
        """As MoeFusedDispatch.check."""
        _check_op(self, COMBINE_KERNEL)

    def poll(self) -> None:
        """As MoeFusedDispatch.poll."""
        _poll_op(self, COMBINE_KERNEL)

    def __call__(self, a_slots: torch.Tensor, counts: torch.Tensor, w: torch.Tensor, dest: torch.Tensor, local: tuple):
        self.poll()
        prepared = _cached_args(self, a_slots, w, self.y_send, counts)
        ws = self.ws
        ws.begin()
        ws.publish()
        ws.fork()
        self._launch(prepared, self.signals, ws.epoch_word)
        ws.issue_chunks()
        ws.wait_landed()
        # before end(): after it, peers may write the next call's rows
        back = gather_rows(self.y_send, self.y_recv, dest, local if self.local_in_place else None)
        ws.end()
        _after_call(self)
        return back

    def call_slots(self, a_slots: torch.Tensor, counts: torch.Tensor, w: torch.Tensor, dest, weights) -> torch.Tensor:
        """The capacity-slot combine (ops/moe_slots.py), with no host synchronization: a_slots
        [W * E * C, K] the experts' inputs in the dispatch's slots, counts its int32 [W * E]
        recv_counts, w [E, K, H], dest [T * top_k] where this rank's routed rows went
        (SlotLayout.dest), weights [T, top_k]. Returns y [T, H]: each token's expert outputs
        weighted and summed (kernels/moe_rows.py), own slots read from y_send in place."""
        from syncopate.ops.moe_slots import combine_rows

        self.poll()
        prepared = _cached_args(self, a_slots, w, self.y_send, counts)
        ws = self.ws
        ws.begin()
        ws.publish()
        ws.fork()
        self._launch(prepared, self.signals, ws.epoch_word)
        ws.issue_chunks()
        ws.wait_landed()
        if self.local_in_place:
            per_rank = self.experts * self.capacity
            local = (self.rank * per_rank, (self.rank + 1) * per_rank)
        else:
            local = (0, 0)
        y = combine_rows(self.y_send, self.y_recv, dest, weights, local)  # before end(), as above
        ws.end()
        _after_call(self)
        return y
