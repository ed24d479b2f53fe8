"""The fused sequence-parallel attention ops (docs/SEQUENCE_PARALLEL.md, "The fused ops"): the
transformed `kernels/attention.py` reading K/V (and Ulysses' Q) from the symmetric heap while
the runtime executor lands them, each tile waiting per block on the chunks that carry it.

    ctx = UlyssesAttention(group, z=Z, h=H, h_kv=H_KV, s_loc=S_loc, d=D, dtype=torch.bfloat16, causal=True)
    o = ctx(q, k, v)             # q [Z, H, S_loc, D], k/v [Z, H_KV, S_loc, D] -> o like q
    ctx = RingAttention(group, ...same keywords...); o = ctx(q, k, v)

Ulysses: each call packs this rank's q, k, v into the heap tensor `x` [Z, W * G, S_loc, D], G =
h + 2 * h_kv (h = H / W, h_kv = H_KV / W): head group j of `x` is [q heads, k heads, v heads] of
rank j's heads, so one all-to-all along dim 1 (the all-to-all template, plan/sequence_parallel.hpp's
geometry) lands at rank j, in head slot r of `y`, rank r's positions of rank j's q, k and v heads.
The kernel reads `y` in place as W pieces of S_loc positions (`PIECE`, `stride_*p` = G heads);
the tile of (query block m, head h) waits for the chunks that carry its Q rows of head h, and each
K/V block waits for the chunks carrying that block of head h's K and V (nothing else: a tile of
head h never waits for another head). Tiles run Q piece by Q piece in landing order (own piece,
rank - 1, ...), and each tile's loop visits K/V blocks in that order too (`order=arrival`).
The kernel writes its output in the same pieces layout into a second workspace's `x`, and that
workspace's all-to-all (the same template on [Z, H, S_loc, D]) returns it **after** the kernel
(sequential return: the per-head early return needs the chunks to wait on the kernel's tile
notifies across two plans, not done yet).

Ring: the K/V pieces travel around the ring (the all-gather template, algorithm ring, along the
sequence dim of the stacked K/V `kv` [2, Z, H_KV, W * S_loc, D]: rank r receives piece r - 1,
then forwards it and receives r - 2, ...). The kernel reads q from the caller, K/V from `kv` as
one piece; each K/V block waits on the chunk that brings its piece, the loop starting at the own
piece and going down (the ring's arrival order); causal tiles never wait for (or read) pieces
past their diagonal. The plan is the ring all-gather, not the double-buffered ring pass
(`make_ring_pass_plan`): the fused kernel's tiles read a slot while the pass would overwrite it
two steps later, and nothing yet tells the pass's chunk that the tiles are done (see the doc).

Both use the copy-engine backend only: the kernel's grid is one program per tile, and tiles spin
on chunks; an SM-driven backend (sm-copy, NCCL) could be starved of SMs by spinning tiles.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.errors import ShapeError, UserError, WaitTimeoutError
from syncopate.launch import TileTables, check_error, epoch_word, new_error_record, transformed_info
from syncopate.ops.common import barrier, group_rank_world
from syncopate.runtime import resolve_device

KERNEL = "attention_fwd_kernel"
KERNEL_MODULE = "syncopate.kernels.attention"
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
BACKENDS = ("copy-engine",)
ALGORITHMS = ("direct", "ring", "bidir")  # of Ulysses' all-to-all


def attention_block(s_loc: int, device: torch.device) -> int:
    """BLOCK_M = BLOCK_N of the fused kernel: 64 on a GPU (16 under the interpreter) or the
    largest smaller power of two >= 16 dividing S_loc; 0 if none does."""
    for block in (64, 32, 16) if device.type == "cuda" else (16,):
        if s_loc % block == 0:
            return block
    return 0


def attention_block_m(s_loc: int, block_n: int, device: torch.device) -> int:
    """BLOCK_M of the fused kernel (query rows per tile): 128 on a GPU where S_loc allows (the
    fastest configuration timed: 128 x 64 blocks with 8 warps and 3 stages, whose loop the
    loop-free in-loop wait leaves pipelined), 32 under the interpreter where S_loc allows (so that
    the CPU tests run BLOCK_M != BLOCK_N), else BLOCK_N."""
    wide = 128 if device.type == "cuda" else 32
    return wide if block_n and s_loc % wide == 0 else block_n


def _intersects(box, lo, hi) -> bool:
    """Whether a chunk's box meets the half-open box [lo, hi) (one bound per dim)."""
    for off, ext, a, b in zip(box.offset, box.extent, lo, hi):
        if off >= b or off + ext <= a:
            return False
    return True


class _Landing:
    """The chunks landing on one rank in one tensor, with their landing slots (SignalTable)."""

    def __init__(self, plan, table, rank: int, tensor: str):
        self.chunks = [
            (c.dst_box, int(table.landing_slot_of_chunk[c.id]))
            for c in plan.chunks
            if c.dst == rank and c.dst_tensor == tensor and table.landing_slot_of_chunk[c.id] >= 0
        ]
        self._cache: dict = {}

    def slots(self, lo, hi) -> list[int]:
        key = (tuple(lo), tuple(hi))
        if key not in self._cache:
            self._cache[key] = sorted({slot for box, slot in self.chunks if _intersects(box, lo, hi)})
        return self._cache[key]


class _FusedAttention:
    """What the two contexts share: checks, the transformed kernel bound to one rank's tables,
    the call's error record and the wait check."""

    who = "attention"
    layouts = ("contiguous",)  # the sequence layouts the op takes (docs/SEQUENCE_PARALLEL.md)

    def __init__(
        self,
        group,
        *,
        z: int,
        h: int,
        h_kv: int,
        s_loc: int,
        d: int,
        dtype: torch.dtype,
        device=None,
        causal: bool = False,
        sm_scale: Optional[float] = None,
        backend: str = "copy-engine",
        algorithm: str = "direct",
        split: int = 1,
        wait_bound_ns: Optional[int] = None,
        drop_chunk: int = -1,
        layout: str = "contiguous",
    ):
        from syncopate.runtime import DEFAULT_WAIT_BOUND_NS

        who = self.who
        if layout not in self.layouts:
            raise UserError(f"{who}: layout={layout!r} is not one of {self.layouts}")
        self.layout = layout
        for name, value in (("z", z), ("h", h), ("h_kv", h_kv), ("s_loc", s_loc), ("d", d), ("split", split)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{who}: {name} must be a positive integer, got {value!r}")
        if dtype not in SUPPORTED_DTYPES:
            raise UserError(f"{who}: dtype {dtype} is not supported by the fused kernel; use one of {SUPPORTED_DTYPES}")
        if backend not in BACKENDS:
            raise UserError(
                f"{who}: backend={backend!r}: the fused attention runs the copy-engine backend only "
                "(its tiles spin on chunks, and an SM-driven backend could be starved of SMs)"
            )
        if algorithm not in ALGORITHMS:
            raise UserError(f"{who}: algorithm={algorithm!r} is not one of {ALGORITHMS}")
        if d < 16 or d & (d - 1):
            raise ShapeError(f"{who}: head dim {d} is not a power of two >= 16 (what the kernel's tl.dot takes)")
        if h % h_kv:
            raise ShapeError(f"{who}: {h} query heads are not a multiple of {h_kv} K/V heads (GQA)")
        self.group, self.rank, self.world = group_rank_world(group)
        self.device = resolve_device(device)
        # Zig-zag: a piece is two half-pieces, and no block may straddle two of them.
        run = s_loc // 2 if layout == "zigzag" and s_loc % 2 == 0 else s_loc
        self.block = attention_block(run, self.device) if layout != "zigzag" or s_loc % 2 == 0 else 0
        if not self.block:
            raise ShapeError(
                f"{who}: S_loc={s_loc} positions per rank{' (two halves: zig-zag)' if layout == 'zigzag' else ''} "
                f"is not a multiple of {'2 * ' if layout == 'zigzag' else ''}"
                f"{16 if self.device.type != 'cuda' else '16, 32 or 64'}: the kernel's K/V blocks must not "
                "straddle two ranks' pieces"
            )
        self.block_m = attention_block_m(run, self.block, self.device)
        self.z, self.h, self.h_kv, self.s_loc, self.d = z, h, h_kv, s_loc, d
        self.dtype, self.causal = dtype, bool(causal)
        self.sm_scale = d**-0.5 if sm_scale is None else float(sm_scale)
        self.backend, self.algorithm, self.split = backend, algorithm, split
        self.wait_bound_ns = DEFAULT_WAIT_BOUND_NS if wait_bound_ns is None else int(wait_bound_ns)
        self.drop_chunk = int(drop_chunk)
        self._check_world()
        self._build()
        barrier(self.group, self.device)  # no rank spins before every rank has loaded its kernel

    # -- subclasses ------------------------------------------------------------------------------
    def _check_world(self) -> None:
        pass

    def _build(self) -> None:
        raise NotImplementedError

    # -- shared parts ----------------------------------------------------------------------------
    def _plan(self, collective: str, shape, dim: int, tensor: str, output: str = "y", algorithm=None):
        import syncopate as sy
        from syncopate.runtime import plan_dtype

        return sy.make_plan(
            collective,
            world_size=self.world,
            shape=list(shape),
            dim=dim,
            algorithm=algorithm or self.algorithm,
            split=self.split,
            dtype=plan_dtype(self.dtype),
            backend=self.backend,
            tensor=tensor,
            output=output,
        )

    def _workspace(self, plan, drop_chunk: int = -1):
        import syncopate.runtime as runtime

        return runtime.PlanWorkspace(
            plan,
            self.group,
            grid=(1, 1, 1, 1),
            accesses=[],
            device=self.device,
            wait_bound_ns=self.wait_bound_ns,
            drop_chunk=drop_chunk,
        )

    def _table(self, plan):
        import syncopate as sy

        return sy.lower(plan, sy.TileGrid(1, 1, 1, 1), [])[self.rank]

    def _bind(self, table, tile_waits, order, tiles_n: int, blocks) -> None:
        """Binds the kernel to this rank's tables (made once; a call passes operands only)."""
        from syncopate.ops.fused_gemm import transformed_kernel

        self.kernel = transformed_kernel(KERNEL, KERNEL_MODULE)
        self.tables = TileTables.from_lists(
            order,
            tiles_n,
            tile_waits,
            [[] for _ in order],
            [s.writers for s in table.slots],
            [s.chunk for s in table.slots],
            rank=self.rank,
        )
        self.blocks = blocks
        self.error = new_error_record(self.device)
        self.kwargs = dict(self.tables.device_arrays(self.device), **blocks.device_arrays(self.device))
        self.kwargs.update(
            sy_tiles_n=tiles_n,
            sy_wait_bound_ns=self.wait_bound_ns,
            sy_rank=self.rank,
            sy_error=self.error,
            sy_blocks=blocks.blocks,
            HEAD_DIM=self.d,
            BLOCK_M=self.block_m,
            BLOCK_N=self.block,
            CAUSAL=self.causal,
        )
        if self.device.type == "cuda":
            # The untransformed kernel's fastest configurations timed on nvidia-h200 (2026-11-25,
            # bench_attention_wait_variants.py, S = 8192, 16 heads, head dim 128): 128 x 64 blocks
            # with 8 warps and 3 stages (1.35 ms non-causal, 0.91 ms causal) and 64 x 64 with 4 warps
            # and 3 stages (1.34 / 0.84 ms).
            self.kwargs.update(num_warps=8 if self.block_m == 128 else 4, num_stages=3)
            if self.block_m == 128 and self.d <= 64 and blocks.waits:
                # Two CTAs of 8 warps per SM need <= 128 registers a thread (the shared memory of
                # head dim 64 holds two). The in-loop wait takes the loop to 128-132, which halves
                # the CTAs per SM (1.28-1.43x at head dim 64 causal, nvidia-h100-x1); under this
                # limit ptxas fits it in 124 with no spill (tests/python/test_attention_compile.py).
                self.kwargs.update(maxnreg=128)
        self.grid = (self.tables.num_tiles,)
        missing = [
            p
            for p in transformed_info(self.kernel)["params"]
            if p not in self.kwargs and p not in ("sy_signals", "sy_epoch")
        ]
        if missing:
            from syncopate.errors import InternalError

            raise InternalError(
                f"{self.who}: the transformed {KERNEL} expects parameters the op does not bind: {missing}"
            )

    def _launch(self, args, signals, epoch) -> None:
        self.kernel[self.grid](*args, sy_signals=signals, sy_epoch=epoch, **self.kwargs)

    def _warm_up(self, args, signals) -> None:
        """Compiles and loads the kernel before any call spins (epoch word 0: every wait holds).
        A GPU matter: the interpreter (device cpu) has nothing to load, so it skips the run."""
        if self.device.type != "cuda":
            return
        kwargs = dict(self.kwargs, sy_error=new_error_record(self.device))
        self.kernel[self.grid](
            *args,
            sy_signals=torch.zeros_like(signals),
            sy_epoch=epoch_word(0, self.device),
            **{k: v for k, v in kwargs.items()},
        )
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _check_inputs(self, q, k, v) -> None:
        who = self.who
        expected_q = (self.z, self.h, self.s_loc, self.d)
        expected_kv = (self.z, self.h_kv, self.s_loc, self.d)
        for name, t, shape in (("q", q, expected_q), ("k", k, expected_kv), ("v", v, expected_kv)):
            if tuple(t.shape) != shape:
                raise ShapeError(f"{who}: {name} has shape {list(t.shape)}; this context expects {list(shape)}")
            if t.dtype != self.dtype:
                raise UserError(f"{who}: {name} is {t.dtype}; this context expects {self.dtype}")
            if t.device != self.device:
                raise UserError(f"{who}: {name} is on {t.device}; this context expects {self.device}")

    @property
    def workspaces(self) -> list:
        return [self.ws]

    def timed_out(self) -> bool:
        """Whether a wait has timed out as far as the host sees without synchronizing: the
        runtime's records (mapped host memory); the kernel's record only under the interpreter
        (on a GPU, check() reads it)."""
        return any(ws.timed_out() for ws in self.workspaces) or bool(self._kernel_flag())

    def _kernel_flag(self) -> int:
        return int(self.error[0].item()) if self.device.type != "cuda" else 0

    def report_timeouts(self) -> None:
        """Raises (through check()) a wait of an earlier call that timed out, before a new call."""
        if self.timed_out():
            self.check()

    def check(self) -> None:
        """Synchronizes, then raises WaitTimeoutError naming rank, slot and chunk: the kernel's
        record first (a tile that waited for a chunk), then the runtime's."""
        errors = []
        for ws in self.workspaces:
            try:
                ws.check(synchronize=True)
            except WaitTimeoutError as exc:
                errors.append(str(exc))
        try:
            check_error(self.error, self.tables, f"{self.who}: fused {KERNEL}")
        except WaitTimeoutError as exc:
            errors.insert(0, str(exc))
        finally:
            self.error.zero_()
        if errors:
            raise WaitTimeoutError("; also timed out: ".join(errors))


class UlyssesAttention(_FusedAttention):
    """Fused Ulysses attention for fixed shapes (see the module)."""

    who = "ulysses_attention"

    def _check_world(self) -> None:
        for name, heads in (("q", self.h), ("k/v", self.h_kv)):
            if heads % self.world:
                raise ShapeError(
                    f"{self.who}: {heads} {name} heads cannot be shared by {self.world} ranks: the world "
                    "size must divide the head count (plan/sequence_parallel.hpp)"
                )

    def _build(self) -> None:
        w, z, s, d = self.world, self.z, self.s_loc, self.d
        self.hl, self.hkvl = self.h // w, self.h_kv // w
        self.g = self.hl + 2 * self.hkvl
        self.plan = self._plan("all-to-all", [z, w * self.g, s, d], 1, "x")
        self.plan_out = self._plan("all-to-all", [z, w * self.hl, s, d], 1, "x")
        self.ws = self._workspace(self.plan, self.drop_chunk)
        self.ws_out = self._workspace(self.plan_out)
        self.x = self.ws.tensor("x", self.dtype)
        self.y = self.ws.tensor("y", self.dtype)
        self.o_pieces = self.ws_out.tensor("x", self.dtype)
        self.o_back = self.ws_out.tensor("y", self.dtype)
        self.signals = self.ws.signals()
        table = self._table(self.plan)
        tile_waits, order, blocks = self.tables_for(table)
        self._bind(table, tile_waits, order, z * self.hl, blocks)
        self._warm_up(self._args(), self.signals)
        # The call's copies too: no module may load while a peer's tiles spin (docs/RUNTIME.md).
        zeros = [
            torch.zeros((z, heads, s, d), dtype=self.dtype, device=self.device)
            for heads in (self.h, self.h_kv, self.h_kv)
        ]
        self._pack(*zeros)
        zeros[0].copy_(self.o_back)

    def tables_for(self, table):
        """(tile waits, tile order, block tables) of this rank over the plan's landing slots.

        Tile t = m * (Z * h) + z * h + i (query block m, batch z, local head i) waits for the
        chunks that meet its Q rows of head i; row z * h + i, block j of the block tables for
        those that meet block j of K head i // group and of V head i // group (GQA)."""
        from syncopate.block_tables import BlockTables

        w, b, bm, s, d, g = self.world, self.block, self.block_m, self.s_loc, self.d, self.g
        hl, hkvl, group = self.hl, self.hkvl, self.h // self.h_kv
        landing = _Landing(self.plan, table, self.rank, "y")
        tiles_n = self.z * hl
        blocks = w * s // b
        tile_waits, arrival = [], []
        for m in range(w * s // bm):
            p, row = divmod(m * bm, s)
            for zi in range(self.z):
                for i in range(hl):
                    head = p * g + i
                    tile_waits.append(landing.slots([zi, head, row, 0], [zi + 1, head + 1, row + bm, d]))
                    arrival.append((self.rank - p) % w)
        # Q pieces land own first, then rank - 1, rank - 2, ...: tiles run in that order.
        order = sorted(range(len(tile_waits)), key=lambda t: (arrival[t], t))
        waits = []
        for zi in range(self.z):
            for i in range(hl):
                kv = i // group
                row_waits = []
                for j in range(blocks):
                    p, row = divmod(j * b, s)
                    k_head, v_head = p * g + hl + kv, p * g + hl + hkvl + kv
                    row_waits.append(
                        sorted(
                            set(
                                landing.slots([zi, k_head, row, 0], [zi + 1, k_head + 1, row + b, d])
                                + landing.slots([zi, v_head, row, 0], [zi + 1, v_head + 1, row + b, d])
                            )
                        )
                    )
                waits.append(row_waits)
        first = ((self.rank + 1) * s - 1) // b  # the own piece's last block: it lands first
        return tile_waits, order, BlockTables.from_lists(blocks, waits, [first] * tiles_n, len(table.slots))

    def _args(self):
        """The kernel's arguments over the heap: q, k, v of `y` read in place, o into `o_pieces`."""
        y, o = self.y, self.o_pieces
        hl, hkvl, g = self.hl, self.hkvl, self.g
        q, k, v = y[:, :hl], y[:, hl : hl + hkvl], y[:, hl + hkvl : hl + 2 * hkvl]

        def strides(t, piece_heads):
            return t.stride(0), t.stride(1), piece_heads * t.stride(1), t.stride(2)

        n = self.world * self.s_loc
        return (
            q,
            k,
            v,
            o,
            self.sm_scale,
            self.z,
            hl,
            hkvl,
            n,
            n,
            0,  # Q_START, Q_SPLIT, Q_START2: one run of positions
            n,
            0,
            self.s_loc,
            *strides(q, g),
            *strides(k, g),
            *strides(v, g),
            *strides(o, hl),
        )

    def _pack(self, q, k, v) -> None:
        """Head group j of `x` <- [q, k, v heads of rank j's share] (what the all-to-all sends to j)."""
        w, z, s, d = self.world, self.z, self.s_loc, self.d
        x = self.x.view(z, w, self.g, s, d)
        x[:, :, : self.hl].copy_(q.reshape(z, w, self.hl, s, d))
        x[:, :, self.hl : self.hl + self.hkvl].copy_(k.reshape(z, w, self.hkvl, s, d))
        x[:, :, self.hl + self.hkvl :].copy_(v.reshape(z, w, self.hkvl, s, d))

    @property
    def workspaces(self) -> list:
        return [self.ws, self.ws_out]

    def __call__(self, q, k, v, *, out: Optional[torch.Tensor] = None, check: bool = False) -> torch.Tensor:
        self._check_inputs(q, k, v)
        self.report_timeouts()
        if out is None:
            out = torch.empty_like(q)
        ws, ws_out = self.ws, self.ws_out
        ws.begin()
        ws_out.begin()
        self._pack(q, k, v)
        ws.publish()
        ws.fork()
        self._launch(self._args(), self.signals, ws.epoch_word)  # before the host issues any chunk
        ws.issue_chunks()
        ws_out.issue(wait_landed=True)  # the return all-to-all, after the kernel
        out.copy_(self.o_back)
        ws_out.end()
        ws.end()
        if check:
            self.check()
        return out


class RingAttention(_FusedAttention):
    """Fused ring attention for fixed shapes (see the module). `layout="zigzag"`: rank r holds
    the global half-pieces r and 2W - 1 - r (S_loc / 2 positions each, in that order: causal
    work is the same on every rank); K/V are gathered into global order by
    `make_zigzag_gather_plan` (own halves copied locally, the others around the ring) and the
    kernel masks each query half at its own positions."""

    who = "ring_attention"
    layouts = ("contiguous", "zigzag")

    def _build(self) -> None:
        w, z, s, d = self.world, self.z, self.s_loc, self.d
        if self.layout == "zigzag":
            import syncopate as sy
            from syncopate.runtime import plan_dtype

            # K and V stacked along Z: one plan gathers both ([2Z, H_KV, S_loc, D] halves).
            self.plan = sy.make_zigzag_gather_plan(
                world_size=w,
                shape=[2 * z, self.h_kv, s, d],
                dtype=plan_dtype(self.dtype),
                backend=self.backend,
                tensor="kv",
                output="kv_all",
            )
            self.ws = self._workspace(self.plan, self.drop_chunk)
            own = self.ws.tensor("kv", self.dtype)
            self.kv = self.ws.tensor("kv_all", self.dtype).view(2, z, self.h_kv, w * s, d)
            self.k_own, self.v_own = own[:z], own[z:]
        else:
            self.plan = self._plan("all-gather", [2, z, self.h_kv, w * s, d], 3, "kv", algorithm="ring")
            self.ws = self._workspace(self.plan, self.drop_chunk)
            self.kv = self.ws.tensor("kv", self.dtype)
            own = slice(self.rank * s, (self.rank + 1) * s)
            self.k_own, self.v_own = self.kv[0, :, :, own], self.kv[1, :, :, own]
        self.signals = self.ws.signals()
        table = self._table(self.plan)
        tile_waits, order, blocks = self.tables_for(table)
        self._bind(table, tile_waits, order, z * self.h, blocks)
        q = torch.zeros((z, self.h, s, d), dtype=self.dtype, device=self.device)
        self._warm_up(self._args(q, torch.empty_like(q)), self.signals)
        kv = torch.zeros((z, self.h_kv, s, d), dtype=self.dtype, device=self.device)
        self.k_own.copy_(kv)  # the call's copies too: no module may load while a peer's tiles spin
        self.v_own.copy_(kv)
        q.copy_(q.contiguous())

    def _positions(self):
        """(Q_START, Q_SPLIT, Q_START2) of this rank's query rows (kernels/attention.py)."""
        from syncopate.kernels.attention import zigzag_positions

        if self.layout == "zigzag":
            return zigzag_positions(self.rank, self.world, self.s_loc)
        return self.rank * self.s_loc, self.s_loc, 0

    def tables_for(self, table):
        """(tile waits, tile order, block tables): tiles wait for nothing (Q is local); block j of
        the gathered sequence waits for the chunks bringing it, the visit starting at the block
        that lands first (BlockTables.from_plan: the plan's estimated arrival). Causal: the
        longest tiles (latest query positions) first."""
        from syncopate.block_tables import BlockTables

        tiles_n = self.z * self.h
        tiles_m = self.s_loc // self.block_m
        tensor, dim = ("kv_all", 2) if self.layout == "zigzag" else ("kv", 3)
        blocks = BlockTables.from_plan(self.plan, table, tensor, dim, self.block, rows=tiles_n)
        tiles = tiles_m * tiles_n
        order = list(range(tiles))
        if self.causal:
            q_start, q_split, q_start2 = self._positions()

            def position(t):
                row = (t // tiles_n) * self.block_m
                return (q_start2 - q_split if row >= q_split else q_start) + row

            order = sorted(order, key=lambda t: (-position(t), t))
        return [[] for _ in range(tiles)], order, blocks

    def _args(self, q, o):
        kv = self.kv
        k, v = kv[0], kv[1]
        n = self.world * self.s_loc
        return (
            q,
            k,
            v,
            o,
            self.sm_scale,
            self.z,
            self.h,
            self.h_kv,
            self.s_loc,
            n,
            *self._positions(),
            n,
            q.stride(0),
            q.stride(1),
            0,
            q.stride(2),
            k.stride(0),
            k.stride(1),
            0,
            k.stride(2),
            v.stride(0),
            v.stride(1),
            0,
            v.stride(2),
            o.stride(0),
            o.stride(1),
            0,
            o.stride(2),
        )

    def __call__(self, q, k, v, *, out: Optional[torch.Tensor] = None, check: bool = False) -> torch.Tensor:
        self._check_inputs(q, k, v)
        self.report_timeouts()
        q = q.contiguous()
        if out is None:
            out = torch.empty_like(q)
        ws = self.ws
        ws.begin()
        self.k_own.copy_(k)
        self.v_own.copy_(v)
        ws.publish()
        ws.fork()
        self._launch(self._args(q, out), self.signals, ws.epoch_word)
        ws.issue_chunks()
        ws.end()
        if check:
            self.check()
        return out
