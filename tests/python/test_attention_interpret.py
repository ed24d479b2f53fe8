"""The transformed flash-attention kernel (python/syncopate/kernels/attention.py -> golden
tests/golden/transform/attention.py) under Triton's CPU interpreter, against torch SDPA.

A rank's K/V is the whole sequence in `world` pieces (the ring pass's / Ulysses' layout), one
landing slot per piece, the own piece local. The runs:
- every piece in place, tiles in a shuffled order: the output matches SDPA on the gathered
  sequence (causal and not, head dim 64 and 128, GQA);
- pieces land late: each non-own piece holds NaN and its slot stays low until the first
  `wait_for_block` on it, which lands it then (the latest a peer could): no NaN reaches the output,
  so no block is read before its wait; the loop visits blocks in arrival order (own piece, then
  rank - 1, ...), so the pieces land in the order the ring delivers them;
- the same kernel with its in-loop waits removed reads NaN (the late-landing check can fail);
- a withheld piece ends the launch with WaitTimeoutError naming its chunk;
- `block_in_order` visits every value of a loop once, from its first block downwards, wrapping;
- tables read off a plan (the ring all-gather template over the sequence dim, lowered): the same
  waits as the pieces table, the visit starting where the plan's estimated arrival says, and the
  transformed kernel with late pieces lands them in the plan's order;
- Ulysses' layout read in place (`attention_piece_args`: the all-to-all output, head slot r
  holding rank r's positions), K/V pieces landing late, Q tiles waiting on their Q piece: the
  output (in the same layout, ready for the return all-to-all) matches SDPA; a withheld Q piece
  is named.
"""

import os
import sys
import types
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
pytest.importorskip("numpy")
import triton.language as tl  # noqa: E402,F401  (a jit function of this module needs it in its globals)

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = ROOT / "python" / "syncopate" / "kernels" / "attention.py"
GOLDEN = ROOT / "tests" / "golden" / "transform" / "attention.py"
HOOKS = "sy_test_attention_hooks"


@pytest.fixture(autouse=True)
def _interpreter_index_fix(monkeypatch):
    """Triton 3.6's interpreter turns a scalar into an int with int(1-element array), which
    NumPy >= 2.4 refuses (see test_transform_interpret.py): take the element explicitly."""
    from triton.runtime import interpreter

    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


def _scalar(value) -> int:
    handle = getattr(value, "handle", None)
    data = getattr(handle, "data", value)
    try:
        return int(data.reshape(-1)[0])
    except AttributeError:
        return int(data)


class LateRun:
    """Lands a piece (land(p)) when the first wait_for_block on one of its blocks comes, unless it is
    withheld; records the blocks each tile visits."""

    def __init__(self, signals, land, piece_len, block, rank, withheld=None, slot_of=None):
        self.signals, self.land, self.slot_of = signals, land, slot_of
        self.piece_len, self.block, self.rank, self.withheld = piece_len, block, rank, withheld
        self.landed = []  # pieces, in landing order
        self.visits = {}  # tile -> blocks waited on, in order

    def on_block(self, key, block, tile):
        self.visits.setdefault(tile, []).append(block)
        lo, hi = block * self.block, (block + 1) * self.block
        for p in range(lo // self.piece_len, (hi - 1) // self.piece_len + 1):
            if p == self.rank or p in self.landed or p == self.withheld:
                continue
            self.land(p)
            self.signals[p if self.slot_of is None else self.slot_of[p]] += 1
            self.landed.append(p)


RUN = {"current": None}


def _on_block(key, block, tile):
    if RUN["current"] is not None:
        RUN["current"].on_block(_scalar(key), _scalar(block), _scalar(tile))


_sites_wait_for_block = None  # syncopate.language.wait_for_block, set by the fixture


@triton.jit
def _hooked_wait_for_block(
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
    _on_block(key, block, tile)
    return _sites_wait_for_block(
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
    )


@pytest.fixture(scope="module")
def sy(tmp_path_factory):
    import importlib
    import importlib.util

    launch = importlib.import_module("syncopate.launch")
    block_tables = importlib.import_module("syncopate.block_tables")
    language = importlib.import_module("syncopate.language")
    if not language.INTERPRET:
        pytest.skip("syncopate.language was imported before TRITON_INTERPRET=1 was set")

    # syl with a hook in wait_for_block: plain Python, callable from an interpreted kernel.
    hooks = types.ModuleType(HOOKS)
    hooks.__dict__.update({k: getattr(language, k) for k in dir(language) if not k.startswith("__")})

    globals()["_sites_wait_for_block"] = language.wait_for_block
    hooks.wait_for_block = _hooked_wait_for_block
    sys.modules[HOOKS] = hooks

    folder = tmp_path_factory.mktemp("attention")

    def load(name, path, edit=lambda s: s):
        """The kernel file with `syl` bound to the hooks (and `edit` applied), as a module."""
        source = edit(path.read_text()).replace("import syncopate.language as syl", f"import {HOOKS} as syl")
        target = folder / f"{name}.py"
        target.write_text(source)
        spec = importlib.util.spec_from_file_location(name, target)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    yield types.SimpleNamespace(launch=launch, block_tables=block_tables, load=load)
    sys.modules.pop(HOOKS, None)


def _reference(q, k, v, q_start, causal):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    mask = None
    if causal:
        qpos = torch.arange(q.shape[2])[:, None] + q_start
        kpos = torch.arange(k.shape[2])[None, :]
        mask = qpos >= kpos
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _problem(seed, heads, kv_heads, head_dim, world, piece_len, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    n_kv = world * piece_len
    q = torch.randn(1, heads, piece_len, head_dim, generator=gen, dtype=dtype)
    k = torch.randn(1, kv_heads, n_kv, head_dim, generator=gen, dtype=dtype)
    v = torch.randn(1, kv_heads, n_kv, head_dim, generator=gen, dtype=dtype)
    return q, k, v


def _tables(sy, tiles, tiles_n, world, piece_len, block, rank, seed):
    # Slots 0..world-1: the pieces' landing slots (chunk ids 100 + p); slot world: the output's
    # ready slot, one increment per tile.
    order = torch.randperm(tiles, generator=torch.Generator().manual_seed(seed)).tolist()
    writers = [1] * world + [tiles]
    tile_tables = sy.launch.TileTables.from_lists(
        order,
        tiles_n,
        [[] for _ in range(tiles)],
        [[world] for _ in range(tiles)],
        writers,
        [100 + p for p in range(world)] + [200],
        rank=rank,
    )
    blocks = sy.block_tables.BlockTables.pieces_table(tiles_n, world * piece_len, block, world, rank)
    return tile_tables, blocks


CASES = [  # (heads, kv_heads, head_dim, causal, rank)
    (2, 2, 64, False, 2),
    (2, 2, 64, True, 2),
    (4, 2, 64, True, 1),  # GQA: two query heads per K/V head
    (2, 1, 128, False, 3),  # GQA, head dim 128
    (2, 2, 128, True, 0),
]


def _run(sy, kernel, q, k, v, world, piece_len, rank, causal, seed, signals, block=16, bound=50_000_000):
    from syncopate.kernels.attention import attention_reference_args

    block_m = 16
    o = torch.full_like(q, float("nan"))
    tiles_n = q.shape[0] * q.shape[1]
    tiles = -(-q.shape[2] // block_m) * tiles_n
    tables, blocks = _tables(sy, tiles, tiles_n, world, piece_len, block, rank, seed)
    args = attention_reference_args(q, k, v, o, q.shape[-1] ** -0.5, q_start=rank * piece_len)
    sy.launch.launch(
        kernel,
        None,
        tables,
        *args,
        signals=signals,
        epoch=1,
        wait_bound_ns=bound,
        blocks=blocks,
        HEAD_DIM=q.shape[-1],
        BLOCK_M=block_m,
        BLOCK_N=block,
        CAUSAL=causal,
    )
    return o, tables


@pytest.mark.parametrize("heads,kv_heads,head_dim,causal,rank", [CASES[1], CASES[3]])
def test_in_place_pieces_match_sdpa(sy, heads, kv_heads, head_dim, causal, rank):
    world, piece_len = 4, 32
    golden = sy.load("sy_test_attention_golden", GOLDEN)
    q, k, v = _problem(3, heads, kv_heads, head_dim, world, piece_len)
    signals = torch.tensor([1] * world + [0], dtype=torch.int32)
    o, _ = _run(sy, golden.attention_fwd_kernel, q, k, v, world, piece_len, rank, causal, seed=5, signals=signals)
    ref = _reference(q, k, v, rank * piece_len, causal)
    torch.testing.assert_close(o, ref, rtol=2e-5, atol=2e-5)
    assert signals[world].item() == (piece_len // 16) * heads, "every tile notifies the output slot once"

    # The untransformed kernel computes the same (same grid: one program per tile).
    original = sy.load("sy_test_attention_original", ORIGINAL)
    from syncopate.kernels.attention import attention_reference_args

    o2 = torch.full_like(q, float("nan"))
    original.attention_fwd_kernel[((piece_len // 16) * heads,)](
        *attention_reference_args(q, k, v, o2, head_dim**-0.5, q_start=rank * piece_len),
        HEAD_DIM=head_dim,
        BLOCK_M=16,
        BLOCK_N=16,
        CAUSAL=causal,
    )
    torch.testing.assert_close(o2, ref, rtol=2e-5, atol=2e-5)


def _late_run(sy, kernel, heads, kv_heads, head_dim, causal, rank, withheld=None, bound=50_000_000):
    world, piece_len = 4, 32
    q, k_full, v_full = _problem(7, heads, kv_heads, head_dim, world, piece_len)
    k = torch.full_like(k_full, float("nan"))
    v = torch.full_like(v_full, float("nan"))
    own = slice(rank * piece_len, (rank + 1) * piece_len)
    k[:, :, own] = k_full[:, :, own]
    v[:, :, own] = v_full[:, :, own]
    signals = torch.zeros(world + 1, dtype=torch.int32)
    signals[rank] = 1  # the own piece needs no chunk

    def land(p):
        rows = slice(p * piece_len, (p + 1) * piece_len)
        k[:, :, rows] = k_full[:, :, rows]
        v[:, :, rows] = v_full[:, :, rows]

    run = LateRun(signals, land, piece_len, 16, rank, withheld)
    RUN["current"] = run
    try:
        o, _ = _run(sy, kernel, q, k, v, world, piece_len, rank, causal, seed=11, signals=signals, bound=bound)
    finally:
        RUN["current"] = None
    return o, run, _reference(q, k_full, v_full, rank * piece_len, causal)


@pytest.mark.parametrize("heads,kv_heads,head_dim,causal,rank", CASES)
def test_late_pieces_land_in_arrival_order_and_are_never_read_early(sy, heads, kv_heads, head_dim, causal, rank):
    golden = sy.load("sy_test_attention_golden", GOLDEN)
    o, run, ref = _late_run(sy, golden.attention_fwd_kernel, heads, kv_heads, head_dim, causal, rank)
    assert not torch.isnan(o).any(), "a tile read a K/V block before its wait"
    torch.testing.assert_close(o, ref, rtol=2e-5, atol=2e-5)
    world = 4
    needed = [p for p in range(world) if not causal or p <= rank]
    expected_landing = [(rank - i) % world for i in range(1, world)]
    assert run.landed == [p for p in expected_landing if p in needed]
    # Each tile visits its blocks from the own piece's last block (or the diagonal) downwards.
    for tile, waits in run.visits.items():
        blocks = waits  # one wait per iteration, at its top: K and V of a block land together
        assert blocks == sorted(blocks, key=lambda b: ((rank * 2 + 1 - b) % 8)), (tile, blocks)
        assert len(blocks) == len(set(blocks))
        if not causal:
            assert len(blocks) == 8


def test_without_the_waits_a_late_block_is_read(sy):
    def drop_waits(source):
        assert "syl.wait_for_block(" in source
        return source.replace("syl.wait_for_block(", "(lambda *a: (a[-3], a[-1]))(")  # the loop variable, seen

    unsafe = sy.load("sy_test_attention_unsafe", GOLDEN, drop_waits)
    o, run, _ = _late_run(sy, unsafe.attention_fwd_kernel, 2, 2, 64, False, 1)
    assert run.landed == []
    assert torch.isnan(o).any()


def test_withheld_piece_times_out_naming_its_chunk(sy):
    golden = sy.load("sy_test_attention_golden", GOLDEN)
    with pytest.raises(sy.launch.WaitTimeoutError) as info:
        _late_run(sy, golden.attention_fwd_kernel, 2, 2, 64, False, 2, withheld=0, bound=20_000)
    message = str(info.value)
    assert "slot 0 (chunk 100)" in message and "chunk 100 never arrived" in message


def test_launch_requires_block_tables(sy):
    golden = sy.load("sy_test_attention_golden", GOLDEN)
    q, k, v = _problem(1, 2, 2, 64, 2, 16)
    from syncopate.kernels.attention import attention_reference_args

    tables = sy.launch.TileTables.from_lists([0, 1], 2, [[], []], [[], []], [1, 1])
    with pytest.raises(sy.launch.UserError, match="waits per block"):
        sy.launch.launch(
            golden.attention_fwd_kernel,
            None,
            tables,
            *attention_reference_args(q, k, v, torch.empty_like(q), 0.125),
            signals=torch.ones(2, dtype=torch.int32),
            HEAD_DIM=64,
            BLOCK_M=16,
            BLOCK_N=16,
            CAUSAL=False,
        )


def test_pieces_table_rows():
    from syncopate.block_tables import BlockTables

    t = BlockTables.pieces_table(rows=2, length=64, block=16, pieces=4, rank=1)
    assert t.blocks == 4
    assert t.offsets == [0, 1, 1, 2, 3, 4, 4, 5, 6]  # block 1 is rank 1's own piece: no wait
    assert t.slots == [0, 2, 3, 0, 2, 3]
    assert t.first == [1, 1]
    wide = BlockTables.pieces_table(rows=1, length=64, block=32, pieces=4, rank=0)
    assert wide.slots == [1, 2, 3], "a block spanning two pieces waits on both (but the own one)"
    with pytest.raises(Exception, match="equal pieces"):
        BlockTables.pieces_table(rows=1, length=30, block=16, pieces=4, rank=0)


def _to_pieces(x, world):
    """[Z, h, W * S_loc, D] -> Ulysses' all-to-all output layout [Z, W * h, S_loc, D]."""
    z, h, n, d = x.shape
    return x.reshape(z, h, world, n // world, d).permute(0, 2, 1, 3, 4).reshape(z, world * h, n // world, d)


def _from_pieces(y, world):
    z, wh, s, d = y.shape
    return y.reshape(z, world, wh // world, s, d).permute(0, 2, 1, 3, 4).reshape(z, wh // world, world * s, d)


def _ulysses_run(sy, causal, rank, withheld_q=None, bound=50_000_000):
    from syncopate.kernels.attention import attention_piece_args

    world, s_loc, h, h_kv, d, block = 4, 32, 2, 1, 64, 16
    gen = torch.Generator().manual_seed(13)
    q_full, k_full, v_full = (torch.randn(1, hh, world * s_loc, d, generator=gen) for hh in (h, h_kv, h_kv))
    q = _to_pieces(q_full, world)
    kp_full, vp_full = _to_pieces(k_full, world), _to_pieces(v_full, world)
    k, v = torch.full_like(kp_full, float("nan")), torch.full_like(vp_full, float("nan"))
    for t, full, heads in ((k, kp_full, h_kv), (v, vp_full, h_kv)):
        t[:, rank * heads : (rank + 1) * heads] = full[:, rank * heads : (rank + 1) * heads]
    o = torch.full_like(q, float("nan"))
    # Slots 0..W-1: K/V pieces, W..2W-1: Q pieces (already landed unless withheld), 2W: output.
    tiles_n = h
    tiles_m = world * s_loc // block
    tiles = tiles_m * tiles_n
    waits = [[world + (t // tiles_n) * block // s_loc] for t in range(tiles)]
    writers = [1] * (2 * world) + [tiles]
    order = torch.randperm(tiles, generator=torch.Generator().manual_seed(2)).tolist()
    tables = sy.launch.TileTables.from_lists(
        order, tiles_n, waits, [[2 * world]] * tiles, writers, [100 + i for i in range(2 * world)] + [300], rank=rank
    )
    blocks = sy.block_tables.BlockTables.pieces_table(tiles_n, world * s_loc, block, world, rank)
    signals = torch.zeros(2 * world + 1, dtype=torch.int32)
    signals[rank] = 1
    signals[world : 2 * world] = 1
    if withheld_q is not None:
        signals[world + withheld_q] = 0

    def land(p):
        for t, full in ((k, kp_full), (v, vp_full)):
            t[:, p * h_kv : (p + 1) * h_kv] = full[:, p * h_kv : (p + 1) * h_kv]

    run = LateRun(signals, land, s_loc, block, rank)
    RUN["current"] = run
    try:
        sy.launch.launch(
            sy.load("sy_test_attention_golden", GOLDEN).attention_fwd_kernel,
            None,
            tables,
            *attention_piece_args(q, k, v, o, d**-0.5, world),
            signals=signals,
            epoch=1,
            wait_bound_ns=bound,
            blocks=blocks,
            HEAD_DIM=d,
            BLOCK_M=block,
            BLOCK_N=block,
            CAUSAL=causal,
        )
    finally:
        RUN["current"] = None
    return _from_pieces(o, world), _reference(q_full, k_full, v_full, 0, causal), run


@pytest.mark.parametrize("causal", [False, True])
def test_ulysses_layout_read_in_place_with_late_kv(sy, causal):
    o, ref, run = _ulysses_run(sy, causal, rank=1)
    assert not torch.isnan(o).any()
    torch.testing.assert_close(o, ref, rtol=2e-5, atol=2e-5)
    if causal:  # a tile of piece p needs pieces 0..p only, so the first tile decides the order
        assert sorted(run.landed) == [0, 2, 3]
    else:
        assert run.landed == [0, 3, 2], "the pieces land in the all-to-all's order: rank - 1, rank - 2, ..."


def test_ulysses_withheld_q_piece_is_named(sy):
    with pytest.raises(sy.launch.WaitTimeoutError, match=r"slot 6 \(chunk 106\)"):
        _ulysses_run(sy, False, rank=0, withheld_q=2, bound=20_000)


def test_tables_from_a_ring_all_gather_plan(sy):
    import syncopate
    from syncopate.kernels.attention import attention_reference_args

    world, rank, s_loc, block, h, d = 4, 2, 32, 16, 2, 64
    plan = syncopate.make_plan("all-gather", world_size=world, shape=[1, h, world * s_loc, d], dim=2, algorithm="ring")
    table = syncopate.lower(plan, syncopate.TileGrid(m=s_loc, n=h, block_m=block, block_n=1), [])[rank]
    blocks = sy.block_tables.BlockTables.from_plan(plan, table, "x", 2, block, rows=h)
    # Ring: rank 2 receives piece 1, then 0, then 3, in landing slots 0, 1, 2.
    slot_of = [1, 0, -1, 2]
    assert blocks == sy.block_tables.BlockTables.pieces_table(h, world * s_loc, block, world, rank, slot_of)
    assert blocks.first == [5, 5], "the own piece's last block: it is there first"

    gen = torch.Generator().manual_seed(17)
    q, k_full, v_full = (torch.randn(1, h, n, d, generator=gen) for n in (s_loc, world * s_loc, world * s_loc))
    k, v = torch.full_like(k_full, float("nan")), torch.full_like(v_full, float("nan"))
    own = slice(rank * s_loc, (rank + 1) * s_loc)
    k[:, :, own], v[:, :, own] = k_full[:, :, own], v_full[:, :, own]
    tiles = (s_loc // block) * h
    n_slots = len(table.slots)
    chunks = [sl.chunk for sl in table.slots]
    tables = sy.launch.TileTables.from_lists(
        list(range(tiles)),
        h,
        [[] for _ in range(tiles)],
        [[n_slots]] * tiles,
        [1] * n_slots + [tiles],
        chunks + [-1],
        rank=rank,
    )
    signals = torch.zeros(n_slots + 1, dtype=torch.int32)

    def land(p):
        rows = slice(p * s_loc, (p + 1) * s_loc)
        k[:, :, rows], v[:, :, rows] = k_full[:, :, rows], v_full[:, :, rows]

    run = LateRun(signals, land, s_loc, block, rank, slot_of=slot_of)
    RUN["current"] = run
    try:
        o = torch.full_like(q, float("nan"))
        sy.launch.launch(
            sy.load("sy_test_attention_golden", GOLDEN).attention_fwd_kernel,
            None,
            tables,
            *attention_reference_args(q, k, v, o, d**-0.5, rank * s_loc),
            signals=signals,
            blocks=blocks,
            HEAD_DIM=d,
            BLOCK_M=block,
            BLOCK_N=block,
            CAUSAL=False,
        )
    finally:
        RUN["current"] = None
    torch.testing.assert_close(o, _reference(q, k_full, v_full, rank * s_loc, False), rtol=2e-5, atol=2e-5)
    assert run.landed == [1, 0, 3], "pieces land in the plan's order"


@triton.jit
def _visit_kernel(out_ptr, start, stop, first_ptr, STEP: tl.constexpr):
    i = 0
    for v in range(start, stop, STEP):
        w = _sites_block_in_order(v, start, stop, STEP, first_ptr, 0)
        tl.store(out_ptr + i, w)
        i += 1


_sites_block_in_order = None  # syncopate.language.block_in_order, set by the test


def test_block_in_order_visits_every_value_once_from_first_downwards(sy):
    import syncopate.language as sites

    globals()["_sites_block_in_order"] = sites.block_in_order
    rng = torch.Generator().manual_seed(0)
    for _ in range(12):
        step = int(torch.randint(1, 5, (1,), generator=rng))
        start = int(torch.randint(0, 12, (1,), generator=rng))
        stop = start + int(torch.randint(1, 30, (1,), generator=rng))
        first = int(torch.randint(0, stop // step + 3, (1,), generator=rng))
        values = list(range(start, stop, step))
        out = torch.full((len(values),), -1, dtype=torch.int32)
        _visit_kernel[(1,)](out, start, stop, torch.tensor([first], dtype=torch.int32), STEP=step)
        got = out.tolist()
        assert sorted(got) == values, (start, stop, step, first, got)
        top = first - start // step
        top = top if 0 <= top < len(values) else len(values) - 1
        expected = [values[(top - i) % len(values)] for i in range(len(values))]
        assert got == expected, (start, stop, step, first, got)
