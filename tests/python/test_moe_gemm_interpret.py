"""The MoE grouped GEMM (kernels/moe_gemm.py), original and transformed, under Triton's interpreter.

Rows sit in capacity slots (source rank, local expert) with run-time counts (0 and full capacity
included): the original computes each slot's first count rows times its expert's matrix and
writes nothing past the count; the transformed kernel, in the local-first order and in a shuffled
one, equals it bit for bit; with the rows NaN and the counts stale until a thread lands each
chunk (count first, then rows, then the signal, in a shuffled order, late) it still computes the
reference; a withheld chunk ends the launch with WaitTimeoutError naming that chunk; the Python
tables equal the lowering of the MoE dispatch plan.
"""

import os
import random
import threading
import time

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from syncopate.errors import ShapeError, UserError, WaitTimeoutError  # noqa: E402
from syncopate.kernels import moe_gemm  # noqa: E402
from syncopate.launch import launch  # noqa: E402
from syncopate.ops import moe_fused  # noqa: E402

WORLD, EXPERTS, CAPACITY, K, N = 3, 2, 32, 16, 32
BLOCK_M, BLOCK_N, BLOCK_K, PROGS = 16, 16, 16, 3
RANK = 1


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


def _problem(seed):
    gen = torch.Generator().manual_seed(seed)
    slots = WORLD * EXPERTS
    counts = torch.randint(0, CAPACITY + 1, (slots,), generator=gen, dtype=torch.int32)
    counts[0], counts[1], counts[slots - 1] = 0, CAPACITY, 17  # an empty expert, a full slot, a ragged one
    a = torch.randn(slots * CAPACITY, K, generator=gen)
    w = torch.randn(EXPERTS, K, N, generator=gen)
    return a, w, counts


def _run_original(a, w, counts):
    c = torch.full((a.shape[0], N), float("nan"))
    args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    moe_gemm.moe_grouped_gemm[(PROGS,)](*args, **meta)
    return c


def _tiles_n():
    return -(-N // BLOCK_N)


def _check_against_reference(c, a, w, counts):
    for q, want in enumerate(moe_fused.reference(a, w, counts.tolist(), CAPACITY)):
        rows = int(counts[q])
        got = c[q * CAPACITY : q * CAPACITY + rows]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert torch.isnan(c[q * CAPACITY + rows : (q + 1) * CAPACITY]).all(), f"slot {q}: rows past its count written"


@pytest.mark.parametrize("seed", [0, 1])
def test_original_computes_each_slot_up_to_its_count(seed):
    a, w, counts = _problem(seed)
    _check_against_reference(_run_original(a, w, counts), a, w, counts)


@pytest.mark.parametrize("shuffled", [False, True])
def test_transformed_equals_original(shuffled):
    a, w, counts = _problem(3)
    ref = _run_original(a, w, counts)
    kernel = moe_fused.transformed_kernel()
    order = moe_fused.local_first_order(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK)
    if shuffled:
        random.Random(5).shuffle(order)
    tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK, order)
    c = torch.full_like(ref, float("nan"))
    args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    epoch = 2
    signals = torch.full((WORLD * EXPERTS,), epoch, dtype=torch.int32)
    launch(kernel, (PROGS,), tables, *args, signals=signals, epoch=epoch, wait_bound_ns=50_000_000, **meta)
    torch.testing.assert_close(c, ref, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("seed,counted", [(7, False), (7, True), (19, True)])
def test_late_chunks_landed_by_a_thread_in_shuffled_order(seed, counted):
    """counted: each chunk lands only its slot's counted rows, as the SM-copy backend moves them
    (the rest of the slot keeps what it held: NaN here)."""
    a_full, w, counts = _problem(seed)
    ref = _run_original(a_full, w, counts)
    a = torch.full_like(a_full, float("nan"))  # nothing has landed
    stale = torch.full_like(counts, CAPACITY)  # last call's counts: all full
    signals = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    arrival = list(range(WORLD * EXPERTS))
    random.Random(11 + seed).shuffle(arrival)

    def land():
        for q in arrival:
            time.sleep(0.02)
            stale[q] = counts[q]  # the counts chunk lands first (the rows chunk depends on it)
            at = q * CAPACITY
            rows = int(counts[q]) if counted else CAPACITY
            a[at : at + rows] = a_full[at : at + rows]
            signals[q] = 1  # then the rows chunk's landing signal

    c = torch.full_like(ref, float("nan"))
    tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK)
    args, meta = moe_fused.grouped_gemm_args(a, w, c, stale, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    lander = threading.Thread(target=land)
    lander.start()
    try:
        launch(
            moe_fused.transformed_kernel(),
            (PROGS,),
            tables,
            *args,
            signals=signals,
            epoch=1,
            wait_bound_ns=20_000_000_000,
            **meta,
        )
    finally:
        lander.join()
    torch.testing.assert_close(c, ref, rtol=0, atol=0, equal_nan=True)


def test_withheld_chunk_is_named():
    a, w, counts = _problem(9)
    withheld = 3  # slot (source 1, expert 1): rank 1's own rows for its expert 1
    signals = torch.ones(WORLD * EXPERTS, dtype=torch.int32)
    signals[withheld] = 0
    tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK)
    c = torch.full((a.shape[0], N), float("nan"))
    args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    chunk = moe_fused.rows_chunk_id(WORLD, EXPERTS, 1, RANK, 1)
    with pytest.raises(WaitTimeoutError) as info:
        launch(
            moe_fused.transformed_kernel(),
            (PROGS,),
            tables,
            *args,
            signals=signals,
            epoch=1,
            wait_bound_ns=20_000,
            **meta,
        )
    message = str(info.value)
    assert f"slot {withheld} (chunk {chunk})" in message, message
    assert "rank 1" in message


def _poison_past_counts(a, counts):
    """NaN in every row past its slot's count (stale rows a TMA block still loads)."""
    a = a.clone()
    for q, rows in enumerate(counts.tolist()):
        a[q * CAPACITY + rows : (q + 1) * CAPACITY] = float("nan")
    return a


def test_tma_original_matches_reference_and_ignores_rows_past_counts():
    a, w, counts = _problem(12)
    poisoned = _poison_past_counts(a, counts)
    c = torch.full((a.shape[0], N), float("nan"))
    args, meta = moe_fused.grouped_gemm_args(
        poisoned, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS, use_tma=True, group_m=2
    )
    assert meta["USE_TMA"] is True
    moe_gemm.moe_grouped_gemm[(PROGS,)](*args, **meta)
    _check_against_reference(c, a, w, counts)


def test_tma_transformed_with_late_chunks_equals_pointer_original():
    a_full, w, counts = _problem(13)
    ref = _run_original(a_full, w, counts)
    landed = _poison_past_counts(a_full, counts)
    a = torch.full_like(a_full, float("nan"))
    stale = torch.full_like(counts, CAPACITY)
    signals = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    arrival = list(range(WORLD * EXPERTS))
    random.Random(17).shuffle(arrival)

    def land():
        for q in arrival:
            time.sleep(0.01)
            stale[q] = counts[q]
            a[q * CAPACITY : (q + 1) * CAPACITY] = landed[q * CAPACITY : (q + 1) * CAPACITY]
            signals[q] = 1

    order = moe_fused.local_first_order(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK, group_m=2)
    tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK, order)
    c = torch.full_like(ref, float("nan"))
    args, meta = moe_fused.grouped_gemm_args(
        a, w, c, stale, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS, use_tma=True, group_m=2
    )
    lander = threading.Thread(target=land)
    lander.start()
    try:
        launch(
            moe_fused.transformed_kernel(),
            (PROGS,),
            tables,
            *args,
            signals=signals,
            epoch=1,
            wait_bound_ns=20_000_000_000,
            **meta,
        )
    finally:
        lander.join()
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_tma_refused_where_a_k_block_would_cross_experts():
    a, w, counts = _problem(0)
    c = torch.empty(a.shape[0], N)
    with pytest.raises(ShapeError, match="use_tma=True"):
        moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, 32, PROGS, use_tma=True)


@triton.jit
def _tile_coords_kernel(out_ptr, num_tiles, blocks_per_slot, num_pid_n, GROUP_M: tl.constexpr):
    for t in range(num_tiles):
        pid_m, pid_n = moe_gemm.slot_grouped_tile(t, blocks_per_slot, num_pid_n, GROUP_M)
        tl.store(out_ptr + 2 * t, pid_m)
        tl.store(out_ptr + 2 * t + 1, pid_n)


@pytest.mark.parametrize("blocks_per_slot, tiles_n, group_m", [(5, 3, 2), (4, 2, 8), (3, 4, 1)])
def test_kernel_tile_order_is_the_tables_order(blocks_per_slot, tiles_n, group_m):
    """The original kernel's order (slot_grouped_tile) is the order the fused op's tables give
    at world 1 (the transformed kernel's), and each slot's tiles are a permutation of its own."""
    experts = 2
    capacity = blocks_per_slot * 16
    tiles = experts * blocks_per_slot * tiles_n
    out = torch.zeros(2 * tiles, dtype=torch.int32)
    _tile_coords_kernel[(1,)](out, tiles, blocks_per_slot, tiles_n, group_m)
    kernel_order = [int(m) * tiles_n + int(n) for m, n in out.view(-1, 2).tolist()]
    assert kernel_order == moe_fused.local_first_order(1, experts, capacity, 16, tiles_n, 0, group_m)
    assert sorted(kernel_order) == list(range(tiles))
    # Inside a group, the group's row blocks come before the next column block.
    first = moe_fused.slot_order(blocks_per_slot, tiles_n, group_m)
    rows = min(group_m, blocks_per_slot)
    assert first[:rows] == [(b, 0) for b in range(rows)]


def test_local_first_order_starts_with_own_slots():
    order = moe_fused.local_first_order(WORLD, EXPERTS, CAPACITY, BLOCK_M, 2, RANK)
    assert sorted(order) == list(range(WORLD * EXPERTS * (CAPACITY // BLOCK_M) * 2))
    per_source = EXPERTS * (CAPACITY // BLOCK_M) * 2
    first_slots = {(t // 2) // (CAPACITY // BLOCK_M) for t in order[:per_source]}
    assert first_slots == {RANK * EXPERTS + e for e in range(EXPERTS)}
    next_slots = {(t // 2) // (CAPACITY // BLOCK_M) for t in order[per_source : 2 * per_source]}
    assert next_slots == {(RANK - 1) % WORLD * EXPERTS + e for e in range(EXPERTS)}


def test_tables_equal_the_plans_lowering():
    _core = pytest.importorskip("syncopate._core")
    if not hasattr(_core, "make_moe_dispatch_plan"):
        pytest.fail("syncopate._core lacks make_moe_dispatch_plan: reinstall the package (pip install .)")
    plan = _core.make_moe_dispatch_plan(
        world_size=WORLD, local_experts=EXPERTS, capacity=CAPACITY, hidden=K, dtype="f32"
    )
    assert _core.verify(plan).ok
    for rank in range(WORLD):
        ours = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), rank)
        lowered = moe_fused.plan_tables(plan, WORLD, EXPERTS, CAPACITY, N, BLOCK_M, BLOCK_N, rank)
        for tile in range(ours.num_tiles):
            mine = ours.wait_slots[ours.wait_offsets[tile] : ours.wait_offsets[tile + 1]]
            theirs = lowered.wait_slots[lowered.wait_offsets[tile] : lowered.wait_offsets[tile + 1]]
            assert [ours.slot_chunks[s] for s in mine] == [lowered.slot_chunks[s] for s in theirs], (rank, tile)
        for q in range(WORLD * EXPERTS):
            assert _core.moe_rows_chunk(WORLD, EXPERTS, q // EXPERTS, rank, q % EXPERTS) == ours.slot_chunks[q]


def test_capacity_not_a_multiple_of_block_m_is_refused():
    with pytest.raises(ShapeError, match="multiple of BLOCK_M"):
        moe_fused.slot_tables(WORLD, EXPERTS, 24, 16, 1, 0)


class _OneRankFusedStandIn:
    """MoeFusedDispatch at world 1 without the CUDA runtime: the plan's only chunks are local and,
    read in place, copy nothing (the runtime raises their landings), so the grouped GEMM (under
    the interpreter) reads x_recv as `pack_rows` left it: x_send stays NaN. Checks
    MoeDispatchCombine's packing, `local_rows` and the unpacking."""

    def __init__(self, group, *, local_experts, capacity, hidden, out_features, dtype, device, backend):
        self.experts, self.capacity, self.n, self.block_m = local_experts, capacity, out_features, 16
        self.x_send = torch.full((local_experts * capacity, hidden), float("nan"), dtype=dtype)
        self.x_recv = torch.full_like(self.x_send, float("nan"))

    def __call__(self, rows, dest, send_counts, w, local):
        assert local == (0, rows.shape[0])  # world 1: every row is for this rank's experts
        moe_fused.pack_rows(self.x_send, self.x_recv, rows, dest, local)
        assert torch.isnan(self.x_send).all()
        h = torch.full((self.x_recv.shape[0], self.n), float("nan"), dtype=rows.dtype)
        args, meta = moe_fused.grouped_gemm_args(self.x_recv, w, h, send_counts, self.capacity, self.block_m, 16, 16, 2)
        moe_gemm.moe_grouped_gemm[(2,)](*args, **meta)
        return h


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_pack_rows_puts_own_rows_in_x_recv_and_the_rest_in_x_send(rank):
    """With the local rows read in place, x_send holds every row bound for a peer and x_recv's
    local slots the rows for this rank's own experts, at the places the plain packing gives
    (empty experts and a full slot included); nothing else is written."""
    world, experts, capacity, hidden = 3, 2, 8, 4
    gen = torch.Generator().manual_seed(rank)
    send_counts = torch.randint(0, capacity + 1, (world, experts), generator=gen)
    send_counts[rank, 0], send_counts[(rank + 1) % world, 1] = 0, capacity
    counts = [[int(v) for v in row] for row in send_counts.tolist()]
    dest = moe_fused.sent_rows(counts, capacity, torch.device("cpu"))
    rows = torch.randn(dest.shape[0], hidden, generator=gen)
    plain = torch.full((world * experts * capacity, hidden), float("nan"))
    plain[dest] = rows
    x_send, x_recv = torch.full_like(plain, float("nan")), torch.full_like(plain, float("nan"))
    lo, hi = moe_fused.local_rows(counts, rank)
    assert hi - lo == sum(counts[rank])
    moe_fused.pack_rows(x_send, x_recv, rows, dest, (lo, hi))
    own = slice(rank * experts * capacity, (rank + 1) * experts * capacity)
    assert torch.isnan(x_send[own]).all()
    torch.testing.assert_close(x_recv[own], plain[own], equal_nan=True)
    mask = torch.ones(plain.shape[0], dtype=torch.bool)
    mask[own] = False
    assert torch.isnan(x_recv[mask]).all()
    torch.testing.assert_close(x_send[mask], plain[mask], equal_nan=True)
    both = torch.full_like(plain, float("nan"))
    moe_fused.pack_rows(both, None, rows, dest, (lo, hi))  # not in place: all into x_send
    torch.testing.assert_close(both, plain, equal_nan=True)


class _OneRankCombineStandIn:
    """MoeFusedCombine at world 1 without the CUDA runtime: the combine plan's only chunks are
    local and, left to the caller, copy nothing, so y_recv stays NaN and every row is gathered
    from y_send (`gather_rows`); the notifying grouped GEMM (the original) runs under the
    interpreter. Checks MoeDispatchCombine's slot scatter, `local_rows` and the gather."""

    def __init__(self, group, *, local_experts, capacity, in_features, hidden, dtype, device, backend):
        self.capacity, self.hidden = capacity, hidden
        self.a_slots = torch.full((local_experts * capacity, in_features), float("nan"), dtype=dtype)

    def __call__(self, a_slots, counts, w, dest, local):
        assert local == (0, dest.shape[0])
        y_send = torch.full((a_slots.shape[0], self.hidden), float("nan"), dtype=a_slots.dtype)
        args, meta = moe_fused.grouped_gemm_args(a_slots, w, y_send, counts, self.capacity, 16, 16, 16, 2)
        moe_gemm.moe_grouped_gemm[(2,)](*args, **meta)
        return moe_fused.gather_rows(y_send, torch.full_like(y_send, float("nan")), dest, local)


@pytest.mark.parametrize("rank", [0, 2])
def test_gather_rows_takes_own_rows_from_y_send_and_the_rest_from_y_recv(rank):
    world, experts, capacity, hidden = 3, 2, 8, 4
    gen = torch.Generator().manual_seed(10 + rank)
    send_counts = torch.randint(0, capacity + 1, (world, experts), generator=gen)
    send_counts[rank, 1] = 0
    counts = [[int(v) for v in row] for row in send_counts.tolist()]
    dest = moe_fused.sent_rows(counts, capacity, torch.device("cpu"))
    landed = torch.randn(world * experts * capacity, hidden, generator=gen)  # y_recv as chunks landed it
    own = slice(rank * experts * capacity, (rank + 1) * experts * capacity)
    y_send, y_recv = torch.full_like(landed, float("nan")), landed.clone()
    y_send[own], y_recv[own] = landed[own], float("nan")  # own slots: never copied, read from y_send
    got = moe_fused.gather_rows(y_send, y_recv, dest, moe_fused.local_rows(counts, rank))
    torch.testing.assert_close(got, landed[dest])
    torch.testing.assert_close(moe_fused.gather_rows(y_send, landed, dest, None), landed[dest])


@pytest.mark.parametrize("world, rank", [(1, 0), (3, 1), (4, 3)])
def test_own_chunks_are_the_local_copies_of_the_own_slots(world, rank):
    """The chunks the MoE ops leave to the caller: the dispatch plan's rows chunks rank -> rank
    (one per expert, not the counts chunk), the combine plan's local chunks (one per expert)."""
    _core = pytest.importorskip("syncopate._core")
    experts = 2
    dispatch = _core.make_moe_dispatch_plan(world_size=world, local_experts=experts, capacity=64, hidden=16)
    assert moe_fused.own_chunks(dispatch, rank) == [
        moe_fused.rows_chunk_id(world, experts, rank, rank, e) for e in range(experts)
    ]
    combine = moe_fused.combine_plan(world, experts, 64, 16, backend="copy-engine")
    ids = moe_fused.own_chunks(combine, rank)
    assert len(ids) == experts
    for i in ids:
        c = combine.chunks[i]
        assert c.src == c.dst == rank and c.box.offset == c.dst_box.offset


def test_fused_dispatch_packing_matches_sequential(monkeypatch):
    from syncopate.ops import moe as moe_op

    monkeypatch.setattr(moe_fused, "MoeFusedDispatch", _OneRankFusedStandIn)
    monkeypatch.setattr(moe_fused, "MoeFusedCombine", _OneRankCombineStandIn)
    monkeypatch.setattr(
        moe_op.MoeDispatchCombine,
        "_choose",
        lambda self, x, what="dispatch": ("sequential", "") if self.mode == "sequential" else ("fused", "stand-in"),
    )
    monkeypatch.setattr(moe_op, "FUSED_BLOCK_M", 16)
    gen = torch.Generator().manual_seed(4)
    tokens, experts, top_k, hidden, n = 24, 4, 2, 16, 16
    x = torch.randn(tokens, hidden, generator=gen)
    ids = torch.stack(
        [
            torch.zeros(tokens, dtype=torch.int64),  # expert 0 hot, expert 3 empty
            torch.randint(1, 3, (tokens,), generator=gen),
        ],
        dim=1,
    )
    w = torch.randn(experts, hidden, n, generator=gen)
    fused = moe_op.MoeDispatchCombine(None, num_experts=experts, top_k=top_k, capacity=32)
    h, layout = fused.dispatch_gemm(x, ids, w)
    h_seq, layout_seq = moe_op.MoeDispatchCombine(
        None, num_experts=experts, top_k=top_k, mode="sequential"
    ).dispatch_gemm(x, ids, w)
    assert fused.last_mode == "fused"
    assert layout.recv_counts == layout_seq.recv_counts and layout.rows_per_expert[3] == 0
    torch.testing.assert_close(h, h_seq, rtol=1e-5, atol=1e-5)
    weights = torch.rand(tokens, top_k, generator=gen)
    w_down = torch.randn(experts, n, hidden, generator=gen)
    sequential = moe_op.MoeDispatchCombine(None, num_experts=experts, top_k=top_k, mode="sequential")
    y_fused = fused.combine_gemm(h, w_down, layout, weights)
    assert fused.last_combine_mode == "fused"
    torch.testing.assert_close(
        y_fused, sequential.combine_gemm(h_seq, w_down, layout_seq, weights), rtol=1e-4, atol=1e-4
    )


def test_simulator_predicts_the_dispatch_at_capacity():
    _core = pytest.importorskip("syncopate._core")
    if not hasattr(_core, "make_moe_dispatch_plan"):
        pytest.fail("syncopate._core lacks make_moe_dispatch_plan: reinstall the package (pip install .)")
    from pathlib import Path

    import syncopate as sy

    calib = sy.calibration(str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))
    small = moe_fused.predict_at_capacity(4, 2, 128, 1024, 2048, calibration=calib)
    large = moe_fused.predict_at_capacity(4, 2, 512, 1024, 2048, calibration=calib)
    for p in (small, large):
        assert 0 < p.fused_us < float("inf") and 0 < p.sequential_us < float("inf")
        assert p.fused_us >= p.floor_us * 0.999
    assert large.comm_alone_us > small.comm_alone_us and large.gemm_alone_us > small.gemm_alone_us


def test_fused_kernel_variants_compile_for_sm90(run_compile_script):
    """The transformed grouped GEMM (one kernel: the dispatch binds its waits, the combine its
    notifies) at the configs the fused ops launch, TMA and pointer loads, through Triton's GPU
    passes and ptxas, then the capacity-slot path's row kernels (kernels/moe_rows.py)
    (compile_moe_kernels.py): no GPU needed."""
    run = run_compile_script("compile_moe_kernels.py", timeout=600)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(("OK ", "FAIL "))]
    assert run.returncode == 0 and len(lines) == 7 and all(ln.startswith("OK ") for ln in lines), (
        "\n".join(lines) + run.stderr[-3000:]
    )


def test_sent_rows_are_the_slots_in_send_order():
    # Rank of a world of 2, 2 local experts, capacity 4: 2 rows to (rank 0, expert 0), none to
    # (0, 1), 1 to (1, 0), 3 to (1, 1).
    rows = moe_fused.sent_rows(((2, 0), (1, 3)), 4, torch.device("cpu"))
    assert rows.tolist() == [0, 1, 8, 12, 13, 14]


def test_combine_order_starts_with_own_slots_then_the_next_rank():
    order = moe_fused.combine_order(WORLD, EXPERTS, CAPACITY, BLOCK_M, 2, RANK)
    per_slot = CAPACITY // BLOCK_M
    assert sorted(order) == list(range(WORLD * EXPERTS * per_slot * 2))
    per_dest = EXPERTS * per_slot * 2
    for i in range(WORLD):
        slots = {(t // 2) // per_slot for t in order[i * per_dest : (i + 1) * per_dest]}
        assert slots == {(RANK + i) % WORLD * EXPERTS + e for e in range(EXPERTS)}


def _combine_plan():
    _core = pytest.importorskip("syncopate._core")
    plan = moe_fused.combine_plan(WORLD, EXPERTS, CAPACITY, N, dtype="f32", backend="copy-engine")
    assert _core.verify(plan).ok
    return plan


def test_combine_tables_make_each_chunk_wait_for_every_tile_of_its_slot():
    plan = _combine_plan()
    per_slot, tiles_n = CAPACITY // BLOCK_M, _tiles_n()
    for rank in range(WORLD):
        tables = moe_fused.combine_tables(plan, WORLD, EXPERTS, CAPACITY, N, BLOCK_M, BLOCK_N, rank)
        notified = {}
        for tile in range(tables.num_tiles):
            slots = tables.notify_slots[tables.notify_offsets[tile] : tables.notify_offsets[tile + 1]]
            assert len(slots) == 1, (rank, tile, slots)
            chunk = plan.chunks[tables.slot_chunks[slots[0]]]
            q = (tile // tiles_n) // per_slot
            # The chunk that waits on this tile carries the tile's y_send slot from this rank.
            assert chunk.src == rank and chunk.tensor == "y_send" and chunk.box.offset[0] == q * CAPACITY
            assert chunk.dst == q // EXPERTS and chunk.dst_box.offset[0] == (rank * EXPERTS + q % EXPERTS) * CAPACITY
            notified.setdefault(slots[0], set()).add(tile)
        for slot, tiles in notified.items():
            assert tables.slot_writers[slot] == len(tiles) == per_slot * tiles_n


def test_combine_transformed_announces_every_tile_after_its_rows_are_stored(monkeypatch):
    """The notifying GEMM under the interpreter with the combine plan's tables (rank 1 of 3).
    Each atomic add on a ready slot (a tile's notify) is intercepted: when it completes the slot's
    count of tiles, the y_send slot is copied right then (what the chunk would carry home at that
    moment). Every ready slot completes, empty slots included (their tiles store nothing but
    still announce), and each copy already equals the final, correct rows: no tile announced
    rows before storing them."""
    from triton.runtime import interpreter

    plan = _combine_plan()
    a, w, counts = _problem(21)
    ref = _run_original(a, w, counts)
    tables = moe_fused.combine_tables(plan, WORLD, EXPERTS, CAPACITY, N, BLOCK_M, BLOCK_N, RANK)
    ready = sorted(set(tables.notify_slots))  # the other slots are landing slots of y_recv
    signals = torch.zeros(len(tables.slot_writers), dtype=torch.int32)
    c = torch.full_like(ref, float("nan"))
    copies = {}
    original_rmw = interpreter.InterpreterBuilder.create_atomic_rmw

    def atomic_rmw(self, op, ptr, val, mask, sem, scope):
        out = original_rmw(self, op, ptr, val, mask, sem, scope)
        for address in ptr.data.reshape(-1)[mask.data.reshape(-1)]:
            s = (int(address) - signals.data_ptr()) // 4
            if 0 <= s < len(signals) and s not in copies and int(signals[s]) >= tables.slot_writers[s]:
                q = plan.chunks[tables.slot_chunks[s]].box.offset[0] // CAPACITY
                copies[s] = (q, c[q * CAPACITY : (q + 1) * CAPACITY].clone())
        return out

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_atomic_rmw", atomic_rmw)
    args, meta = moe_fused.grouped_gemm_args(a, w, c, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    launch(
        moe_fused.transformed_kernel(),
        (PROGS,),
        tables,
        *args,
        signals=signals,
        epoch=1,
        wait_bound_ns=50_000_000,
        **meta,
    )
    assert [int(signals[s]) for s in ready] == [tables.slot_writers[s] for s in ready]
    assert all(int(signals[s]) == 0 for s in range(len(signals)) if s not in ready)
    assert sorted(copies) == ready
    assert sorted(q for q, _ in copies.values()) == list(range(WORLD * EXPERTS))
    for q, copy in copies.values():
        rows = int(counts[q])
        torch.testing.assert_close(copy[:rows], ref[q * CAPACITY : q * CAPACITY + rows], rtol=0, atol=0)
    torch.testing.assert_close(c, ref, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("capacity, block_m, block_n", [(128, 128, 256), (4096, 128, 256), (1088, 64, 128)])
def test_grouped_config_takes_the_measured_blocks_the_capacity_allows(capacity, block_m, block_n):
    cfg = moe_fused.grouped_config(capacity)
    assert (cfg.block_m, cfg.block_n) == (block_m, block_n) and capacity % cfg.block_m == 0


def _h200():
    from pathlib import Path

    import syncopate as sy

    return sy.calibration(str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))


def test_simulator_models_run_time_counts():
    """predict_for_counts: full slots predict what predict_at_capacity does; emptier slots (tiles
    past their counts compute nothing) predict a shorter GEMM, fused and sequential; a hot
    expert on one rank makes that rank the slowest."""
    _core = pytest.importorskip("syncopate._core")
    if not hasattr(_core.GemmShape(1, 1, 1), "tile_scale"):
        pytest.fail("syncopate._core lacks GemmShape.tile_scale: reinstall the package (pip install .)")
    calib = _h200()
    world, experts, capacity, hidden, n = 2, 2, 1024, 1024, 8192  # 1024 tiles a rank: several waves
    full = [[[capacity] * experts for _ in range(world)] for _ in range(world)]
    cfg = moe_fused.grouped_config(capacity)
    at_cap = moe_fused.predict_at_capacity(
        world, experts, capacity, hidden, n, block_m=cfg.block_m, block_n=cfg.block_n, calibration=calib
    )
    same = moe_fused.predict_for_counts(full, capacity, hidden, n, calibration=calib)
    assert same.fused_us == pytest.approx(at_cap.fused_us) and same.gemm_alone_us == pytest.approx(at_cap.gemm_alone_us)
    quarter = [[[capacity // 4, 0] for _ in range(world)] for _ in range(world)]  # 1/8 of the tiles compute
    less = moe_fused.predict_for_counts(quarter, capacity, hidden, n, calibration=calib)
    assert less.gemm_alone_us < 0.5 * same.gemm_alone_us
    assert less.fused_us < same.fused_us and less.sequential_us < same.sequential_us
    assert less.comm_alone_us == pytest.approx(same.comm_alone_us)  # whole capacity slots move either way
    hot = [[[capacity, 0], [capacity, 0]], [[0, 0], [0, 0]]]  # rank 0: half its tiles; rank 1: none
    skewed = moe_fused.predict_for_counts(hot, capacity, hidden, n, calibration=calib)
    assert less.fused_us <= skewed.fused_us <= same.fused_us  # fused is bound by the chunks here
    assert less.sequential_us < skewed.sequential_us < same.sequential_us


def test_simulator_moves_only_counted_rows_on_sm_copy():
    """SM-copy chunks move only the counted rows (GemmShape.chunk_rows): emptier slots predict
    less communication and an earlier fused end than full ones; copy-engine chunks move whole
    slots whatever the counts; every rows chunk gets its own slot's count."""
    calib = _h200()
    world, experts, capacity, hidden, n = 2, 2, 1024, 4096, 256  # communication-bound
    full = [[[capacity] * experts for _ in range(world)] for _ in range(world)]
    few = [[[capacity // 8, 0] for _ in range(world)] for _ in range(world)]
    pred = {
        (backend, name): moe_fused.predict_for_counts(counts, capacity, hidden, n, backend=backend, calibration=calib)
        for backend in ("sm-copy", "copy-engine")
        for name, counts in (("full", full), ("few", few))
    }
    assert pred["sm-copy", "few"].comm_alone_us < 0.5 * pred["sm-copy", "full"].comm_alone_us
    assert pred["sm-copy", "few"].fused_us < pred["sm-copy", "full"].fused_us
    assert pred["copy-engine", "few"].comm_alone_us == pytest.approx(pred["copy-engine", "full"].comm_alone_us)
    hist = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]  # recv_counts[r][s][e]
    rows = moe_fused.chunk_rows_for_counts(hist)
    for r in range(world):
        for s in range(world):
            for e in range(experts):
                assert rows[moe_fused.rows_chunk_id(world, experts, s, r, e)] == hist[r][s][e]
    assert sorted(rows)[: world * world] == [0] * (world * world)  # the counts chunks


def test_simulator_refuses_chunk_rows_of_the_wrong_shape_by_name():
    _core = pytest.importorskip("syncopate._core")
    import syncopate as sy

    plan = _core.make_moe_dispatch_plan(world_size=1, local_experts=2, capacity=64, hidden=64, backend="sm-copy")
    gemm = sy.GemmShape(2 * 64, 64, 64, 64, 64)
    access = _core.TileAccess("x_recv", "consume", 0, -1, False)
    gemm.chunk_rows = [0, 1]
    with pytest.raises(UserError, match=r"chunk_rows has 2 entries for a plan of 3 chunks"):
        _core.simulate(plan, gemm, _h200(), accesses=[access])
    gemm.chunk_rows = [0, -1, 2]
    with pytest.raises(UserError, match=r"chunk_rows chunk 1: -1 rows"):
        _core.simulate(plan, gemm, _h200(), accesses=[access])


def test_tile_scale_for_counts_marks_tiles_past_the_counts():
    scale = moe_fused.tile_scale_for_counts([[[0, 130]]], 256, 128, 2)  # one rank, two experts
    assert scale == [[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]]
    scale = moe_fused.tile_scale_for_counts([[[128, 1]]], 256, 128, 1)
    assert scale == [[1.0, 0.0, 1.0, 0.0]]


@pytest.mark.parametrize(
    "counts, match",
    [
        ([[[300, 0]]], r"rank 0 receives 300 rows from rank 0 for expert 0: .* 0\.\.256"),
        ([[[1, -1]]], r"rank 0 receives -1 rows from rank 0 for expert 1"),
        ([[[1, 1]], [[1, 1]]], r"recv_counts\[0\] has 1 sources for a world of 2"),
        ([[[1, 1], [1]], [[1, 1], [1, 1]]], r"recv_counts\[0\]\[1\] has 1 experts, expected 2"),
    ],
)
def test_bad_histograms_are_refused_by_name(counts, match):
    with pytest.raises(ShapeError, match=match):
        moe_fused.tile_scale_for_counts(counts, 256, 128, 1)


class _FakeWorkspace:
    def __init__(self):
        self.checks = 0
        self.runtime_timed_out = False

    def check(self, synchronize=True):
        self.checks += 1

    def timed_out(self):
        return self.runtime_timed_out


class _FakeFlag:
    """The pinned host word the kernel's flag is copied to (runtime HostFlag)."""

    def __init__(self):
        self.value = 0

    def clear(self):
        self.value = 0


@pytest.mark.parametrize(
    "cls, kernel", [("MoeFusedDispatch", moe_fused.KERNEL), ("MoeFusedCombine", moe_fused.COMBINE_KERNEL)]
)
def test_fused_calls_report_a_timed_out_wait_at_the_next_check(cls, kernel):
    """The fused calls do not wait for their kernels; check() (which the next call runs first)
    reports the last call's timed-out wait by name, once, and does nothing when no call is pending."""
    from syncopate.launch import ERROR_WORDS

    op = getattr(moe_fused, cls).__new__(getattr(moe_fused, cls))
    op.ws, op.pending, op.flag = _FakeWorkspace(), False, None
    op.tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK)
    op.error = torch.zeros(ERROR_WORDS, dtype=torch.int64)
    op.check()
    assert op.ws.checks == 0  # nothing pending: no synchronize
    op.pending = True
    op.error[:6] = torch.tensor([1, RANK, 3, 1, 0, 18])  # flag, rank, slot, expected, seen, tile
    with pytest.raises(WaitTimeoutError, match=rf"{kernel}: rank {RANK}: tile 18 waited on slot 3 \(chunk "):
        op.check()
    assert op.ws.checks == 1 and not op.pending
    op.check()  # reported once
    assert op.ws.checks == 1


@pytest.mark.parametrize(
    "cls, kernel", [("MoeFusedDispatch", moe_fused.KERNEL), ("MoeFusedCombine", moe_fused.COMBINE_KERNEL)]
)
def test_a_call_looks_at_the_earlier_ones_without_synchronizing(cls, kernel):
    """poll() (what each call runs first) synchronizes only once the host sees a timeout: the
    kernel's flag copied to pinned memory, or the runtime's mapped record; then it reports it
    by name and clears the flag (the record is kept from call to call until then)."""
    from syncopate.launch import ERROR_WORDS

    op = getattr(moe_fused, cls).__new__(getattr(moe_fused, cls))
    op.ws, op.pending, op.flag = _FakeWorkspace(), True, _FakeFlag()
    op.tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, BLOCK_M, _tiles_n(), RANK)
    op.error = torch.zeros(ERROR_WORDS, dtype=torch.int64)
    op.poll()
    assert op.ws.checks == 0 and op.pending  # nothing seen: no synchronize, still to be checked
    op.error[:6] = torch.tensor([1, RANK, 2, 1, 0, 7])
    op.poll()
    assert op.ws.checks == 0  # the flag's copy has not reached the host yet
    op.flag.value = 1
    with pytest.raises(WaitTimeoutError, match=rf"{kernel}: rank {RANK}: tile 7 waited on slot 2"):
        op.poll()
    assert op.ws.checks == 1 and op.flag.value == 0 and int(op.error[0]) == 0
    op.pending, op.ws.runtime_timed_out = True, True  # a runtime wait (the record the runtime maps)
    op.poll()
    assert op.ws.checks == 2 and not op.pending


def test_launch_arguments_are_reused_per_operand_layout_and_checked_on_a_new_one():
    """_cached_args (the fused ops' launch arguments): the same as grouped_gemm_args, kept per
    operand layout (a later call with a new output tensor of the same layout reuses the checks),
    and a new layout is checked again (a counts tensor of the wrong size is refused by name)."""
    import types

    op = types.SimpleNamespace(
        config=moe_fused.GroupedConfig(BLOCK_M, BLOCK_N, BLOCK_K, 4, 2), capacity=CAPACITY, progs=PROGS
    )
    a, w, counts = _problem(3)
    c1, c2 = torch.empty(a.shape[0], N), torch.empty(a.shape[0], N)
    expected = moe_fused.grouped_gemm_args(a, w, c1, counts, CAPACITY, BLOCK_M, BLOCK_N, BLOCK_K, PROGS)
    assert moe_fused._cached_args(op, a, w, c1, counts) == expected
    args, meta = moe_fused._cached_args(op, a.clone(), w, c2, counts)  # new tensors, same layouts
    assert args[2] is c2 and args[4:] == expected[0][4:] and meta == expected[1] and len(op._args_cache) == 1
    w_t = w.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, other strides
    args, _ = moe_fused._cached_args(op, a, w_t, c2, counts)
    assert args[11:14] == tuple(w_t.stride()) and len(op._args_cache) == 2
    with pytest.raises(ShapeError, match=r"counts must be int32 with one entry per slot \(6\)"):
        moe_fused._cached_args(op, a, w, c1, counts[:5])
