"""The fused sequence-parallel attention ops (ops/fused_attention.py) on the CPU: W ranks as W
threads of one process, the runtime's PlanWorkspace replaced by a stand-in that keeps every
rank's plan tensors and signals on the CPU and moves the plan's chunks itself (copying each
chunk's box from the source rank's tensor once that rank has published, its dependencies first,
then raising the landing slot), and the transformed attention kernel run by Triton's interpreter
(one launch at a time).

Chunks land either **late** (a chunk lands only when a tile's wait first asks for its slot: the
latest a peer could deliver it; every unlanded byte of the heap is NaN) or **early in a shuffled
order** (all of them before the kernel runs, respecting dependencies) or not at all (a withheld
chunk). So:
- a tile that read a block before waiting for the chunk carrying it, or waited on the wrong slot,
  reads NaN and the output is not SDPA's: the ops match SDPA on the gathered sequence (float32)
  at worlds 1-3, causal or not, GQA, for two calls in a row at world 2 (epochs);
- late landing follows the kernel's visit order: a rank's pieces land own first, then rank - 1,
  rank - 2, ... (Ulysses' tiles run Q piece by Q piece; the ring's loop starts at the own piece);
- a withheld chunk ends the call with WaitTimeoutError naming it;
- bad input (heads the world does not divide, shapes, dtypes, backend) is refused by name.

The GPU half (real heaps, the copy-engine executor, worlds 1 and 2 on one GPU) is
tests/gpu/test_fused_attention_gpu.py.
"""

import os
import random
import threading

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402,F401  (the hooked wait, a jit function of this module, needs it)

pytest.importorskip("numpy")

import syncopate as sy  # noqa: E402
from syncopate.errors import ShapeError, UserError, WaitTimeoutError  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)


class FakeWorld:
    """Every rank's workspaces, in creation order per rank (ranks create them in the same order)."""

    def __init__(self, world: int, landing: str = "late", seed: int = 0):
        self.world, self.landing = world, landing
        self.rng = random.Random(seed)
        self.barrier = threading.Barrier(world, timeout=120)
        self.kernel_lock = threading.Lock()  # the interpreter patches triton.language per launch
        self.land_lock = threading.RLock()
        self.local = threading.local()
        self.spaces: dict = {}  # (index, rank) -> FakeWorkspace
        self.order: dict = {}  # rank -> [(ws index, source rank, chunk id)] as landed

    @property
    def rank(self) -> int:
        return self.local.rank

    def add(self, ws) -> int:
        index = sum(1 for (_, r) in self.spaces if r == ws.rank)
        self.spaces[(index, ws.rank)] = ws
        return index

    def land(self, index: int, chunk_id: int) -> None:
        """Lands chunk `chunk_id` of workspace `index`'s plan, its dependencies first."""
        with self.land_lock:
            plan = self.spaces[(index, 0)].plan
            c = plan.chunks[chunk_id]
            dst = self.spaces[(index, c.dst)]
            if chunk_id in dst.landed or chunk_id == dst.drop_chunk:
                return
            for dep in c.deps:
                self.land(index, dep)
            src = self.spaces[(index, c.src)]
            data = src.tensors[c.tensor][_box(c.box)].clone()
            dst.tensors[c.dst_tensor][_box(c.dst_box)] = data
            dst.landed.add(chunk_id)
            slot = dst.slot_of[chunk_id]
            if slot >= 0:
                dst._signals[slot] += 1
            self.order.setdefault(c.dst, []).append((index, c.src, chunk_id))

    def on_wait(self, rank: int, slot: int) -> None:
        """A tile of `rank` waits on `slot` of its kernel's workspace (the first): land it now."""
        ws = self.spaces[(0, rank)]
        for chunk_id, s in enumerate(ws.slot_of):
            if s == slot:
                self.land(0, chunk_id)


def _box(box):
    return tuple(slice(o, o + e) for o, e in zip(box.offset, box.extent))


class FakeWorkspace:
    """PlanWorkspace's interface (runtime.py) for one rank of a FakeWorld."""

    world: FakeWorld = None  # set by the fixture

    def __init__(self, plan, group=None, *, grid, accesses, device, wait_bound_ns, drop_chunk, **_):
        world = FakeWorkspace.world
        self.plan, self.rank, self.drop_chunk = plan, world.rank, drop_chunk
        table = sy.lower(plan, sy.TileGrid(*grid), [])[self.rank]
        self.slot_of = list(table.landing_slot_of_chunk)
        self._signals = torch.zeros(max(1, len(table.slots)), dtype=torch.int32)
        self.epoch_word = torch.zeros(1, dtype=torch.int32)
        self.tensors, self.landed, self.nccl = {}, set(), None
        self.index = world.add(self)

    def tensor(self, name, dtype):
        if name not in self.tensors:
            self.tensors[name] = torch.full(list(self.plan.tensors[name].shape), float("nan"), dtype=dtype)
        return self.tensors[name]

    def signals(self):
        return self._signals

    def begin(self):
        self.epoch_word += 1
        self.landed = set()
        for t in self.tensors.values():
            t.fill_(float("nan"))  # what has not landed in this call is NaN

    def publish(self):
        pass

    def fork(self):
        world = FakeWorkspace.world
        world.barrier.wait()  # every rank's inputs are in place before any chunk moves
        if world.landing == "early":
            mine = [c.id for c in self.plan.chunks if c.dst == self.rank]
            world.rng.shuffle(mine)
            for chunk_id in mine:
                world.land(self.index, chunk_id)
            world.barrier.wait()

    def issue_chunks(self):
        for c in self.plan.chunks:
            if c.dst == self.rank:
                FakeWorkspace.world.land(self.index, c.id)

    def issue(self, wait_landed=True):
        self.fork()
        self.issue_chunks()

    def wait_landed(self):
        pass

    def end(self):
        FakeWorkspace.world.barrier.wait()  # no rank refills its heap while a peer reads it

    def timed_out(self):
        return False

    def check(self, synchronize=True):
        pass


_HOOK = {"world": None}


def _on_wait(rank, slot):
    if _HOOK["world"] is not None:
        _HOOK["world"].on_wait(_scalar(rank), _scalar(slot))


def _scalar(value) -> int:
    data = getattr(getattr(value, "handle", None), "data", value)
    try:
        return int(data.reshape(-1)[0])
    except AttributeError:
        return int(data)


_original_wait = None


@triton.jit
def _hooked_wait(signal_ptr, expected, bound_ns, error_ptr, rank, slot, tile):
    _on_wait(rank, slot)
    return _original_wait(signal_ptr, expected, bound_ns, error_ptr, rank, slot, tile)


@pytest.fixture
def fake_runtime(monkeypatch):
    """Patches the runtime, the group lookup, the barrier and the wait (see the module)."""
    import syncopate.language as language
    import syncopate.runtime
    from syncopate.ops import fused_attention, seq_attention

    if not language.INTERPRET:
        pytest.skip("syncopate.language was imported before TRITON_INTERPRET=1 was set")
    globals()["_original_wait"] = language.wait
    monkeypatch.setattr(language, "wait", _hooked_wait)
    monkeypatch.setattr(syncopate.runtime, "PlanWorkspace", FakeWorkspace)
    monkeypatch.setattr(seq_attention, "_FUSED", {})

    def run(world, body, landing="late", seed=0):
        """Runs body(rank) on `world` threads; returns their results by rank (re-raises the
        first exception)."""
        fake = FakeWorld(world, landing, seed)
        FakeWorkspace.world = fake
        _HOOK["world"] = fake
        # One group object per rank (the ops cache a context per group: one process per rank in life).
        groups = [type("FakeGroup", (), {"group_name": f"fake-{world}-{r}"})() for r in range(world)]

        def lookup(g):
            return (groups[fake.rank], fake.rank, world) if world > 1 else (None, 0, 1)

        monkeypatch.setattr(fused_attention, "group_rank_world", lookup)
        monkeypatch.setattr(seq_attention, "group_rank_world", lookup)
        monkeypatch.setattr(fused_attention, "barrier", lambda g, d: fake.barrier.wait())
        original_launch = fused_attention._FusedAttention._launch
        original_warm = fused_attention._FusedAttention._warm_up

        def launch(self, *a):
            with fake.kernel_lock:
                original_launch(self, *a)

        def warm_up(self, *a):
            with fake.kernel_lock:
                _HOOK["world"] = None  # the warm-up's waits (epoch 0) hold at once: nothing lands
                try:
                    original_warm(self, *a)
                finally:
                    _HOOK["world"] = fake

        monkeypatch.setattr(fused_attention._FusedAttention, "_launch", launch)
        monkeypatch.setattr(fused_attention._FusedAttention, "_warm_up", warm_up)
        results, errors = [None] * world, [None] * world

        def thread(rank):
            fake.local.rank = rank
            try:
                results[rank] = body(rank)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                errors[rank] = exc
                fake.barrier.abort()

        threads = [threading.Thread(target=thread, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _HOOK["world"] = None
        first = next(
            (e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)),
            next((e for e in errors if e is not None), None),
        )
        if first is not None:
            raise first
        return results, fake

    return run


def _global_qkv(seed, z, h, h_kv, n, d):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(z, hh, n, d, generator=gen) for hh in (h, h_kv, h_kv))


def _sdpa(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        mask = torch.arange(q.shape[2])[:, None] >= torch.arange(k.shape[2])[None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _run_op(fake_runtime, op, world, causal, *, h=4, h_kv=2, s_loc=32, d=16, z=1, landing="late", seed=0, calls=2):
    """Every rank calls the op `calls` times on its slice of one global problem; returns each
    call's output per rank, the references, and the world."""
    from syncopate.ops import ring_attention, ulysses_attention

    fn = {"ulysses": ulysses_attention, "ring": ring_attention}[op]
    problems = [_global_qkv(seed + i, z, h, h_kv, world * s_loc, d) for i in range(calls)]
    refs = [_sdpa(q, k, v, causal) for q, k, v in problems]

    def body(rank):
        own = slice(rank * s_loc, (rank + 1) * s_loc)
        outs = []
        for q, k, v in problems:
            q16, k16, v16 = (t[:, :, own].half() for t in (q, k, v))
            outs.append(fn(q16, k16, v16, causal=causal, mode="fused"))
        return outs

    results, fake = fake_runtime(world, body, landing=landing, seed=seed)
    return results, refs, fake


CASES = [  # (op, world, causal, h, h_kv)
    ("ulysses", 1, False, 2, 2),
    ("ulysses", 2, False, 4, 2),
    ("ulysses", 2, True, 4, 2),
    ("ulysses", 3, True, 3, 3),
    ("ring", 1, True, 2, 1),
    ("ring", 2, False, 4, 2),
    ("ring", 3, True, 2, 2),
    ("ring", 3, False, 2, 1),
]


# Every case with late landing; the multi-rank ones with early, shuffled landing too.
RUNS = [case + ("late",) for case in CASES] + [case + ("early",) for case in CASES if case[1] > 1 and case[2]]


@pytest.mark.parametrize("op,world,causal,h,h_kv,landing", RUNS)
def test_fused_ops_match_sdpa(fake_runtime, op, world, causal, h, h_kv, landing):
    s_loc = 32
    # Two calls in a row (the epoch advances, the heap is refilled with NaN) at world 2.
    results, refs, fake = _run_op(
        fake_runtime,
        op,
        world,
        causal,
        h=h,
        h_kv=h_kv,
        s_loc=s_loc,
        landing=landing,
        seed=world,
        calls=2 if world == 2 else 1,
    )
    for rank, outs in enumerate(results):
        own = slice(rank * s_loc, (rank + 1) * s_loc)
        for call, (out, ref) in enumerate(zip(outs, refs)):
            assert not torch.isnan(out).any(), f"rank {rank}, call {call}: a block was read before it landed"
            torch.testing.assert_close(
                out.float(), ref[:, :, own], rtol=2e-2, atol=2e-2, msg=lambda m: f"rank {rank}, call {call}: {m}"
            )


@pytest.mark.parametrize("op", ["ulysses", "ring"])
def test_late_pieces_land_in_arrival_order(fake_runtime, op):
    """Landing on demand follows the kernel's visits: own piece first, then rank - 1, ..."""
    world = 3
    _, _, fake = _run_op(fake_runtime, op, world, False, h=3, h_kv=3, calls=1)
    for rank in range(world):
        landed = [(src, chunk) for index, src, chunk in fake.order[rank] if index == 0]
        plan = fake.spaces[(0, rank)].plan
        if op == "ulysses":
            # each chunk comes from the rank whose piece it carries; the own piece is a local copy
            pieces = [src for src, _ in landed]
        else:
            s_loc = 32
            pieces = [plan.chunks[chunk].dst_box.offset[3] // s_loc for _, chunk in landed]
        firsts = list(dict.fromkeys(pieces))
        expected = [(rank - i) % world for i in range(world)]
        if op == "ring":
            expected = expected[1:]  # the own piece is copied in place, not a chunk
        assert firsts == expected, (rank, landed)


def test_without_the_waits_blocks_are_read_before_they_land(fake_runtime, monkeypatch):
    """The same run with the kernel's in-loop waits removed reads NaN: the late landing can fail."""
    import syncopate.language as language

    monkeypatch.setattr(language, "wait_for_block", _no_wait_for_block)
    results, _, _ = _run_op(fake_runtime, "ring", 2, False, calls=1)
    assert any(torch.isnan(outs[0]).any() for outs in results)


@triton.jit
def _no_wait_for_block(
    signals_ptr,
    block_offsets_ptr,
    block_slots_ptr,
    slot_writers_ptr,
    key,
    block,
    blocks,
    tile,
    epoch_ptr,
    bound_ns,
    rank,
    error_ptr,
    value,
    row_waits,
    seen,
):
    return value, seen


@pytest.mark.parametrize("op,check", [("ulysses", True), ("ring", True), ("ring", False)])
def test_a_withheld_chunk_is_named(fake_runtime, op, check):
    """check=True: the call raises; check=False: the call returns and the next one raises before
    it enqueues anything (the kernel's record, read without synchronizing)."""
    from syncopate.ops.fused_attention import RingAttention, UlyssesAttention

    world, s_loc, h, d = 2, 32, 2, 16
    cls = UlyssesAttention if op == "ulysses" else RingAttention
    q, k, v = _global_qkv(1, 1, h, h, world * s_loc, d)
    holder = {}

    def body(rank):
        ctx = cls(
            None,
            z=1,
            h=h,
            h_kv=h,
            s_loc=s_loc,
            d=d,
            dtype=torch.float16,
            device="cpu",
            wait_bound_ns=20_000,
            drop_chunk=holder.setdefault("drop", _remote_chunk(cls, world, s_loc)),
        )
        own = slice(rank * s_loc, (rank + 1) * s_loc)
        mine = tuple(t[:, :, own].half() for t in (q, k, v))
        out = ctx(*mine, check=check)
        if not check:
            out = ctx(*mine)
        return out

    with pytest.raises(WaitTimeoutError) as info:
        fake_runtime(world, body)
    chunk = holder["drop"]
    assert f"({'chunk'} {chunk})" in str(info.value) and f"chunk {chunk} never arrived" in str(info.value)


def _remote_chunk(cls, world, s_loc):
    """A chunk of the op's first plan that moves between two ranks (to rank 0)."""
    from syncopate.ops.fused_attention import UlyssesAttention

    if cls is UlyssesAttention:
        plan = sy.make_plan(
            "all-to-all", world_size=world, shape=[1, 6, s_loc, 16], dim=1, algorithm="direct", tensor="x", dtype="f16"
        )
    else:
        plan = sy.make_plan(
            "all-gather",
            world_size=world,
            shape=[2, 1, 2, world * s_loc, 16],
            dim=3,
            algorithm="ring",
            tensor="kv",
            dtype="f16",
        )
    return next(c.id for c in plan.chunks if c.src != c.dst and c.dst == 0)


BAD = [
    (dict(h=3, h_kv=3), ShapeError, r"ulysses_attention: 3 q heads cannot be shared by 2 ranks"),
    (dict(h=4, h_kv=1), ShapeError, r"ulysses_attention: 1 k/v heads cannot be shared by 2 ranks"),
    (dict(s_loc=24), ShapeError, r"S_loc=24 positions per rank is not a multiple of 16"),
    (dict(d=24), ShapeError, r"head dim 24 is not a power of two"),
    (dict(h=4, h_kv=3), ShapeError, r"4 query heads are not a multiple of 3 K/V heads"),
    (dict(dtype=torch.float32), UserError, r"dtype torch.float32 is not supported by the fused kernel"),
    (dict(backend="sm-copy"), UserError, r"backend='sm-copy': the fused attention runs the copy-engine backend only"),
    (dict(algorithm="tree"), UserError, r"algorithm='tree' is not one of"),
    (dict(z=0), UserError, r"z must be a positive integer, got 0"),
]


@pytest.mark.parametrize("bad,error,message", BAD)
def test_bad_context_arguments_are_refused_by_name(fake_runtime, bad, error, message):
    from syncopate.ops.fused_attention import UlyssesAttention

    kwargs = dict(z=1, h=4, h_kv=2, s_loc=32, d=16, dtype=torch.float16, device="cpu")
    kwargs.update(bad)
    with pytest.raises(error, match=message):
        fake_runtime(2, lambda rank: UlyssesAttention(None, **kwargs))


def test_bad_call_operands_are_refused_by_name(fake_runtime):
    from syncopate.ops import ring_attention, ulysses_attention
    from syncopate.ops.fused_attention import RingAttention

    q, k, v = (t.half() for t in _global_qkv(0, 1, 4, 2, 32, 16))

    def body(rank):
        ctx = RingAttention(None, z=1, h=4, h_kv=2, s_loc=32, d=16, dtype=torch.float16, device="cpu")
        with pytest.raises(
            ShapeError,
            match=r"ring_attention: k has shape \[1, 2, 16, 16\]; this context expects "
            r"\[1, 2, 32, 16\]",
        ):
            ctx(q, k[:, :, :16], v)
        with pytest.raises(UserError, match=r"ring_attention: q is torch.bfloat16; this context expects torch.float16"):
            ctx(q.bfloat16(), k, v)
        with pytest.raises(ShapeError, match=r"ulysses_attention: q, k, v dtypes differ"):
            ulysses_attention(q, k.float(), v, mode="fused")
        with pytest.raises(UserError, match=r"ring_attention: mode='overlap', expected one of"):
            ring_attention(q, k, v, mode="overlap")
        return True

    assert fake_runtime(1, body)[0] == [True]


def test_auto_runs_the_sequential_form(fake_runtime, monkeypatch):
    """No attention model in the simulator yet: 'auto' builds no fused context."""
    from syncopate.ops import seq_attention, ulysses_attention

    q, k, v = (t.half() for t in _global_qkv(0, 1, 4, 2, 32, 16))
    out = ulysses_attention(q, k, v, mode="auto")
    assert seq_attention._FUSED == {}
    torch.testing.assert_close(out.float(), _sdpa(q.float(), k.float(), v.float(), False), rtol=2e-2, atol=2e-2)


def test_ulysses_tiles_wait_only_for_their_heads_chunks():
    """With one head per sub-chunk (split = G), a tile of head i waits for exactly the chunk of
    its Q piece's head i, and each K/V block for exactly K and V head i // group of its piece;
    the tiles run own Q piece first, then rank - 1, ..."""
    from syncopate.ops.fused_attention import UlyssesAttention

    world, rank, h, h_kv, s_loc, d = 3, 1, 6, 3, 32, 16
    ctx = object.__new__(UlyssesAttention)  # the tables only: no workspace, no kernel
    ctx.world, ctx.rank, ctx.z, ctx.h, ctx.h_kv, ctx.s_loc, ctx.d, ctx.block = world, rank, 1, h, h_kv, s_loc, d, 16
    ctx.block_m = 32  # query rows per tile: twice the K/V block
    ctx.hl, ctx.hkvl = h // world, h_kv // world
    ctx.g = ctx.hl + 2 * ctx.hkvl
    ctx.plan = sy.make_plan(
        "all-to-all",
        world_size=world,
        shape=[1, world * ctx.g, s_loc, d],
        dim=1,
        algorithm="direct",
        split=ctx.g,
        tensor="x",
        dtype="f16",
    )
    table = sy.lower(ctx.plan, sy.TileGrid(1, 1, 1, 1), [])[rank]
    tile_waits, order, blocks = ctx.tables_for(table)
    chunk_of = {slot.chunk: i for i, slot in enumerate(table.slots)}
    head_of_slot = {i: ctx.plan.chunks[slot.chunk].dst_box.offset[1] for i, slot in enumerate(table.slots)}
    assert len(chunk_of) == len(table.slots)
    tiles_n, group = ctx.hl, h // h_kv
    for t, waits in enumerate(tile_waits):
        m, i = divmod(t, tiles_n)
        p = m * 32 // s_loc
        assert [head_of_slot[s] for s in waits] == [p * ctx.g + i], (t, waits)
    assert len(tile_waits) == world * s_loc // 32 * tiles_n
    for i in range(tiles_n):
        for j in range(blocks.blocks):
            p = j * 16 // s_loc
            row = i * blocks.blocks + j
            got = sorted(head_of_slot[s] for s in blocks.slots[blocks.offsets[row] : blocks.offsets[row + 1]])
            kv = i // group
            assert got == [p * ctx.g + ctx.hl + kv, p * ctx.g + ctx.hl + ctx.hkvl + kv], (i, j, got)
    pieces = [(t // tiles_n) * 32 // s_loc for t in order]
    assert list(dict.fromkeys(pieces)) == [1, 0, 2], "Q pieces in landing order: own, rank - 1, rank - 2"
    assert blocks.first == [((rank + 1) * s_loc - 1) // 16] * tiles_n


def _zigzag_rows(rank: int, world: int, s_loc: int) -> torch.Tensor:
    """Global positions of rank `rank`'s zig-zag piece: half-pieces rank and 2W - 1 - rank."""
    half = s_loc // 2
    late = 2 * world - 1 - rank
    return torch.cat([torch.arange(rank * half, (rank + 1) * half), torch.arange(late * half, (late + 1) * half)])


ZIGZAG_RUNS = [  # (world, causal, landing, h, h_kv)
    (1, True, "late", 2, 1),
    (2, True, "late", 4, 2),
    (2, False, "late", 2, 2),
    (2, True, "early", 2, 1),
    (3, True, "late", 2, 2),
]


@pytest.mark.parametrize("world,causal,landing,h,h_kv", ZIGZAG_RUNS)
def test_fused_ring_runs_the_zigzag_layout(fake_runtime, world, causal, landing, h, h_kv):
    """ring_attention(layout="zigzag", mode="fused"): each rank holds half-pieces r and 2W - 1 - r;
    K/V gathered by make_zigzag_gather_plan (late: each chunk lands at the first wait on it) and
    each query half masked at its own positions: the rows equal SDPA's on the gathered sequence,
    two calls in a row at world 2."""
    from syncopate.ops import ring_attention

    s_loc, z, d = 32, 1, 16
    calls = 2 if world == 2 else 1
    problems = [_global_qkv(world + 10 * i, z, h, h_kv, world * s_loc, d) for i in range(calls)]
    refs = [_sdpa(q, k, v, causal) for q, k, v in problems]

    def body(rank):
        rows = _zigzag_rows(rank, world, s_loc)
        return [
            ring_attention(*(t[:, :, rows].half() for t in (q, k, v)), causal=causal, mode="fused", layout="zigzag")
            for q, k, v in problems
        ]

    results, fake = fake_runtime(world, body, landing=landing, seed=world)
    for rank, outs in enumerate(results):
        rows = _zigzag_rows(rank, world, s_loc)
        for call, (out, ref) in enumerate(zip(outs, refs)):
            assert not torch.isnan(out).any(), f"rank {rank}, call {call}: a block was read before it landed"
            torch.testing.assert_close(
                out.float(), ref[:, :, rows], rtol=2e-2, atol=2e-2, msg=lambda m: f"rank {rank}, call {call}: {m}"
            )
    if world > 1:  # the halves came through the plan's chunks, not from the caller's tensors
        assert fake.order[0], "no chunk landed on rank 0"


def test_zigzag_layout_is_refused_where_it_cannot_run(fake_runtime):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v = (t.half() for t in _global_qkv(0, 1, 2, 2, 32, 16))
    with pytest.raises(UserError, match="layout='diagonal'"):
        ring_attention(q, k, v, causal=True, mode="fused", layout="diagonal")
    odd = q[:, :, :31]
    with pytest.raises(ShapeError, match="even S_loc"):
        ring_attention(odd, odd, odd, causal=True, mode="fused", layout="zigzag")
    with pytest.raises(TypeError):
        ulysses_attention(q, k, v, causal=True, mode="fused", layout="zigzag")
