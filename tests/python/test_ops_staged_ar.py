"""The staged GEMM+AR (GemmAr(reduce="epilogue")) on the CPU: the transformed
kernels/gemm_reduce.py under Triton's interpreter with all-reduce tables built by hand from the
design and lowered from the staged all-reduce plan, the whole plan's data movement emulated
across ranks, the fallback of a build without the template. (The `reduce` keyword's rules,
auto's choice for all-reduce and the context at world 1 are tested with GemmRs's, in
test_ops_staged.py.)

Hand-built tables, rank r of W, split S (sub-chunk k of every shard: rows even_split(Ms, S, k)).
Chunks: staging (s, d, k) copies rank s's partial of box d, sub-chunk k, into p[s] on d; gather
(q, d, k) pushes owner q's reduced box q, sub-chunk k, into c box q on d (after the staging
chunk (d, q, k), which reads the partial it overwrites). On rank r:
  - a tile of box r (own) waits on the landing slots of staging (s, r, k) for every s != r,
    stores the sum into c's own box and notifies the ready slots of gather (r, d, k), d != r;
  - a tile of box d != r stores its partial into c and notifies the ready slot of staging
    (r, d, k) and the dst-ready slot of gather (d, r, k) (the gathered box may overwrite this
    rank's partial only once it is stored);
  - the landing slots of gather (d, r, k) have no tile waiting: the op's stream waits on them
    (wait_landed) before it copies c out.
"""

import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate as sy  # noqa: E402
from syncopate.errors import UserError, WaitTimeoutError  # noqa: E402
from syncopate.launch import TileTables, check_error, epoch_word  # noqa: E402
from syncopate.ops import staged_gemm  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_fused import FakeWorkspace, cpu_runtime  # noqa: E402,F401  (fixture)
from test_ops_staged import CFG, _landed, _operands, _run_transformed, even_split  # noqa: E402

ACCESSES = [sy.TileAccess(*a) for a in staged_gemm.STAGED_ACCESSES]


# --- hand-built all-reduce tables ------------------------------------------------------------


def hand_ar_slots(m, n, world, rank, split):
    """Per tile, the sets of (kind, chunk key) it waits on and notifies; per (kind, key) the
    writer count. Keys: ("stage" | "gather", src, dst, k)."""
    shard = m // world
    tiles_m, tiles_n = -(-m // CFG.block_m), -(-n // CFG.block_n)
    waits, notifies, writers = [], [], {}
    for t in range(tiles_m * tiles_n):
        lo, hi = (t // tiles_n) * CFG.block_m, min((t // tiles_n + 1) * CFG.block_m, m)
        box = lo // shard
        w, nt = set(), set()
        for k in range(split):
            k_lo, k_hi = even_split(shard, split, k)
            if max(lo, box * shard + k_lo) >= min(hi, box * shard + k_hi):
                continue
            if box == rank:
                w |= {("landing", ("stage", s, rank, k)) for s in range(world) if s != rank}
                nt |= {("ready", ("gather", rank, d, k)) for d in range(world) if d != rank}
            else:
                nt |= {("ready", ("stage", rank, box, k)), ("dst-ready", ("gather", box, rank, k))}
        for slot in nt:
            writers[slot] = writers.get(slot, 0) + 1
        for slot in w:
            writers[slot] = 1
        waits.append(w)
        notifies.append(nt)
    return waits, notifies, writers


def hand_ar_tables(m, n, world, rank, split):
    """TileTables of hand_ar_slots (own tiles last), with made-up chunk ids per key."""
    waits, notifies, writers = hand_ar_slots(m, n, world, rank, split)
    slots = sorted(writers)
    index = {s: i for i, s in enumerate(slots)}
    keys = sorted({key for _, key in slots})
    tiles_n = -(-n // CFG.block_n)
    order = sorted(range(len(waits)), key=lambda t: bool(waits[t]))
    tables = TileTables.from_lists(
        order,
        tiles_n,
        [sorted(index[s] for s in w) for w in waits],
        [sorted(index[s] for s in nt) for nt in notifies],
        [writers[s] for s in slots],
        [keys.index(key) for _, key in slots],
        rank=rank,
    )
    return tables, slots


def _run_ar(tables, a, b, p, world, rank, signals, epoch, bound_ns=2_000_000):
    """The transformed kernel as GemmAr's staged path launches it: `out` is c's own box."""
    c, _, error = _run_transformed(tables, a, b, p, world, rank, signals, epoch, bound_ns=bound_ns, own_rows_in_c=True)
    return c, error


@pytest.mark.parametrize("world,rank,split", [(2, 0, 1), (2, 1, 2), (3, 2, 2), (4, 1, 3)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_own_tiles_store_the_sum_into_c_and_notify_the_gather_chunks(world, rank, split, dtype, layout):
    m, n, k = 64 * world, 40, 48  # N, K not multiples of 32
    tables, slots = hand_ar_tables(m, n, world, rank, split)
    a, b, p = _operands(m, n, k, world, dtype, layout, seed=world * 11 + rank)
    p[rank] = float("nan")  # never written by the plan: must never be read
    shard, lo = m // world, rank * (m // world)
    ref = a.double() @ b.double()
    gather_ready = [i for i, (kind, key) in enumerate(slots) if kind == "ready" and key[0] == "gather"]
    assert gather_ready, "every own tile must announce its stored sum to the gather chunks"
    for epoch in (1, 2):
        signals = _landed(tables, epoch)
        c, error = _run_ar(tables, a, b, p, world, rank, signals, epoch)
        check_error(error, tables, "gemm_reduce_kernel")
        assert not torch.isnan(c).any(), "every row of c is stored: own box (sum) and the others (partials)"
        expected = ref[lo : lo + shard] + sum(p[s].double() for s in range(world) if s != rank)
        assert torch.allclose(c[lo : lo + shard].double(), expected, rtol=2e-2, atol=5e-2)
        rest = torch.cat([c[:lo], c[lo + shard :]])
        assert torch.allclose(rest.double(), torch.cat([ref[:lo], ref[lo + shard :]]), rtol=2e-2, atol=2e-2)
        # Every ready and dst-ready slot rose by its writer count (one notify per writer tile);
        # the landing slots were not touched.
        for slot, (kind, key) in enumerate(slots):
            want = epoch * tables.slot_writers[slot]
            assert int(signals[slot]) == want, (kind, key, int(signals[slot]), want)


def test_a_missing_staging_chunk_times_out_names_it_and_own_tiles_store_nothing_valid():
    world, rank, split = 3, 1, 2
    m, n, k = 64 * world, 32, 32
    tables, slots = hand_ar_tables(m, n, world, rank, split)
    a, b, p = _operands(m, n, k, world, torch.float16, "kn", seed=5)
    signals = _landed(tables, 1)
    missing = tables.wait_slots[-1]
    signals[missing] = 0
    _, error = _run_ar(tables, a, b, p, world, rank, signals, 1, bound_ns=20_000)
    with pytest.raises(
        WaitTimeoutError,
        match=rf"rank {rank}: tile \d+ waited on slot {missing} "
        rf"\(chunk {tables.slot_chunks[missing]}\) for value >= 1 but saw 0",
    ):
        check_error(error, tables, "gemm_reduce_kernel")


def test_tiles_of_other_boxes_store_and_notify_without_any_landing():
    """Every landing slot missing: the partial tiles still store c and raise both their staging
    ready slot and the gather chunks' dst-ready slot (a rank's producer tiles never depend on
    what lands); only own tiles time out."""
    world, rank = 2, 0
    m, n, k = 128, 32, 32
    tables, slots = hand_ar_tables(m, n, world, rank, 1)
    a, b, p = _operands(m, n, k, world, torch.float16, "kn", seed=8)
    signals = torch.zeros(len(tables.slot_writers), dtype=torch.int32)
    c, error = _run_ar(tables, a, b, p, world, rank, signals, 1, bound_ns=5_000)
    with pytest.raises(WaitTimeoutError):
        check_error(error, tables, "gemm_reduce_kernel")
    partial_slots = [
        i for i, (kind, key) in enumerate(slots) if (kind, key[0]) in (("ready", "stage"), ("dst-ready", "gather"))
    ]
    assert len(partial_slots) == 2
    assert all(int(signals[s]) == tables.slot_writers[s] for s in partial_slots)
    assert torch.allclose(c[64:].double(), (a.double() @ b.double())[64:], rtol=2e-2, atol=2e-2)


# --- the lowering of R3's staged all-reduce plan agrees with the hand-built tables -------------


def _ar_plan(world, m, n, split, backend="copy-engine"):
    return staged_gemm.staged_plan(
        world=world, m=m, n=n, split=split, dtype="f16", backend=backend, collective="all-reduce"
    )


def _chunk_key(chunk, shard, split):
    """("stage" | "gather", src, dst, sub-chunk) of a chunk of the staged all-reduce plan."""
    if chunk.dst_tensor == "p":
        kind, k0 = "stage", chunk.dst_box.offset[1]
    else:
        assert (chunk.tensor, chunk.dst_tensor) == ("c", "c"), chunk.id
        kind, k0 = "gather", chunk.box.offset[1] - chunk.src * shard
    sub = next(i for i in range(split) if even_split(shard, split, i)[0] == k0)
    return (kind, chunk.src, chunk.dst, sub)


@pytest.mark.parametrize("backend", ["copy-engine", "nccl"])
@pytest.mark.parametrize("world,split", [(2, 1), (2, 2), (3, 2), (4, 1), (4, 3)])
def test_lowered_staged_all_reduce_waits_and_notifies_like_the_design(world, split, backend):
    m, n = 64 * world, 40
    plan = _ar_plan(world, m, n, split, backend)
    sy.verify_or_raise(plan)
    grid = sy.TileGrid(m, n, CFG.block_m, CFG.block_n)
    lowered = sy.lower(plan, grid, ACCESSES)
    for rank in range(world):
        table = lowered[rank]
        keys = [(s.kind, _chunk_key(plan.chunks[s.chunk], m // world, split)) for s in table.slots]
        want_waits, want_notifies, want_writers = hand_ar_slots(m, n, world, rank, split)
        assert [{keys[s] for s in row} for row in table.tile_waits] == want_waits, rank
        assert [{keys[s] for s in row} for row in table.tile_notifies] == want_notifies, rank
        used = {keys[s] for row in list(table.tile_waits) + list(table.tile_notifies) for s in row}
        assert {key: table.slots[keys.index(key)].writers for key in used} == want_writers, rank
        # The gathered boxes land on slots no tile waits for: the op's stream waits on them.
        gather_landings = {key for key in keys if key[0] == "landing" and key[1][0] == "gather"}
        assert gather_landings == {
            ("landing", ("gather", q, rank, k)) for q in range(world) if q != rank for k in range(split)
        }
        # Own box last in the arrival order: every tile that waits comes after every tile that does not.
        order = sy.tile_order(plan, table, grid, "arrival", group_m=CFG.group_m).tiles
        waits = [bool(table.tile_waits[t]) for t in order]
        assert waits == sorted(waits), rank


def _gemm(plan, world, rank, m, n, k, layout="kn", order="arrival", bound_ns=2_000_000):
    return staged_gemm.StagedReduceGemm(
        plan=plan,
        rank=rank,
        world=world,
        m=m,
        n=n,
        k=k,
        dtype=torch.float16,
        b_layout=layout,
        config=CFG,
        tile_order=order,
        device=torch.device("cpu"),
        wait_bound_ns=bound_ns,
        num_programs=3,
    )


def _run_chunk(chunk, heaps):
    """Moves one chunk's box between the emulated ranks' heaps ({rank: {tensor: tensor}})."""

    def box(tensor, b):
        return tensor[tuple(slice(o, o + e) for o, e in zip(b.offset, b.extent))]

    assert chunk.op == "copy", chunk.id
    src = box(heaps[chunk.src][chunk.tensor], chunk.box)
    box(heaps[chunk.dst][chunk.dst_tensor], chunk.dst_box).copy_(src)


def _emulate_all_reduce(world, m, n, k, split, layout):
    """Every rank's GemmAr(reduce="epilogue") call, emulated on one CPU: the kernels (launched
    as the op launches them, with the lowered tables) and the plan's chunks in an order the
    waits allow. Returns each rank's c and the exact sum."""
    plan = _ar_plan(world, m, n, split)
    gemms = [_gemm(plan, world, r, m, n, k, layout) for r in range(world)]
    gen = torch.Generator().manual_seed(31 * world + split)
    ops = []
    for _ in range(world):
        a = torch.randn(m, k, generator=gen).half()
        b = torch.randn(n, k, generator=gen).half().t() if layout == "nk" else torch.randn(k, n, generator=gen).half()
        ops.append((a, b))
    shard = m // world
    heaps = {
        r: {
            "c": torch.full((1, m, n), float("nan"), dtype=torch.float16),
            "p": torch.full((world, shard, n), float("nan"), dtype=torch.float16),
        }
        for r in range(world)
    }

    def run_kernels():
        for r, g in enumerate(gemms):
            c = heaps[r]["c"][0]
            g.launch(*ops[r], c, _landed(g.tables, 1), epoch_word(1), heaps[r]["p"], c[r * shard : (r + 1) * shard])
            g.check()

    # 1. The partial tiles store every other box (the own tiles, whose staging chunks have not
    #    moved yet, store garbage from the NaN p here and are run again in 3).
    run_kernels()
    # 2. The staging chunks (they leave once their partial tiles notified).
    for ch in plan.chunks:
        if ch.dst_tensor == "p":
            _run_chunk(ch, heaps)
    # 3. The own tiles add the staged partials and store the sum into c's own box (the other
    #    tiles store the same partials again).
    run_kernels()
    # 4. The gather chunks (each after its staging chunk, and after the own tiles notified).
    for ch in plan.chunks:
        if ch.dst_tensor == "c":
            _run_chunk(ch, heaps)
    total = sum(a.double() @ b.double() for a, b in ops)
    return [heaps[r]["c"][0] for r in range(world)], total, plan


@pytest.mark.parametrize("world,split", [(2, 2), (3, 1), (4, 2)])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_every_rank_ends_with_the_whole_sum(world, split, layout):
    """The kernel's own rows go into the heap's C (else the gather chunks would ship the NaN
    the heaps start with), and the plan's chunks carry exactly the boxes the kernel reads."""
    m, n, k = 64 * world, 48, 40
    results, total, plan = _emulate_all_reduce(world, m, n, k, split, layout)
    for ch in plan.chunks:  # each gather chunk depends on the staging chunk reading what it overwrites
        if ch.dst_tensor == "c":
            assert len(ch.deps) == 1, ch.id
            dep = plan.chunks[ch.deps[0]]
            assert (dep.dst_tensor, dep.src, dep.dst) == ("p", ch.dst, ch.src), ch.id
            assert _chunk_key(dep, m // world, split)[3] == _chunk_key(ch, m // world, split)[3], ch.id
    for r, c in enumerate(results):
        assert not torch.isnan(c).any(), r
        assert torch.allclose(c.double(), total, rtol=3e-2, atol=1e-1), (r, (c.double() - total).abs().max())


# --- the op (keywords, refusals and world 1 with GemmRs's: test_ops_staged.py) ----------------


def _ar(m, k, n, **kw):
    kw.setdefault("dtype", torch.float16)
    return GemmAr(None, m=m, k=k, n=n, device="cpu", **kw)


def test_staged_plan_names_a_collective_without_a_template():
    with pytest.raises(UserError, match=r"staged_plan: collective 'all-gather' has no staged template"):
        staged_gemm.staged_plan(
            world=2, m=64, n=8, split=1, dtype="f16", backend="copy-engine", collective="all-gather"
        )


def test_ar_refuses_an_out_of_the_reduce_scatter_shape(cpu_runtime):
    ctx = _ar(64, 40, 48, mode="fused", reduce="epilogue", backend="copy-engine", split=1, tile_order="row-major")
    a, b = torch.zeros(64, 40, dtype=torch.float16), torch.zeros(40, 48, dtype=torch.float16)
    with pytest.raises(UserError, match=r"^GemmAr: out must be a contiguous \[64, 48\]"):
        ctx(a, b, out=torch.empty(32, 48, dtype=torch.float16))
