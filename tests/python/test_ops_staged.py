"""The staged GEMM+RS (GemmRs(reduce="epilogue")) on the CPU: the transformer's rewrite of
kernels/gemm_reduce.py run by Triton's interpreter with tile tables built by hand from the
design (and, where the bindings have them, from the lowering of a staged plan), the op's
`reduce` keyword, auto's choice and reason, and the whole context at world 1.

Hand-built tables, rank r of W, split S (sub-chunk k of every shard: rows even_split(Ms, S, k)):
landing slot (s, k) for each s != r (chunk s -> r carrying rank s's partial of box r, sub-chunk
k, into p[s]); ready slot (d, k) for each d != r (chunk r -> d), its writers the tiles covering
box d's sub-chunk k. A tile of box r waits on every landing slot of its rows; a tile of box d
notifies the ready slots of its rows.
"""

import os
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION",
                      str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate as sy  # noqa: E402
from syncopate.errors import UserError, WaitTimeoutError  # noqa: E402
from syncopate.kernels.configs import INTERPRETER_CONFIG  # noqa: E402
from syncopate.launch import TileTables, check_error, launch  # noqa: E402
from syncopate.ops import fused_gemm, staged_gemm  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)

CFG = INTERPRETER_CONFIG  # 32 x 32 blocks


def even_split(total, parts, k):
    base, extra = divmod(total, parts)
    begin = k * base + min(k, extra)
    return begin, begin + base + (1 if k < extra else 0)


def hand_tables(m, n, world, rank, split, order="own-last"):
    """TileTables of the design for rank `rank` (see the module docstring)."""
    shard = m // world
    tiles_m, tiles_n = -(-m // CFG.block_m), -(-n // CFG.block_n)
    slots, slot_chunks, writers = {}, [], []

    def slot(key, chunk):
        if key not in slots:
            slots[key] = len(writers)
            writers.append(0)
            slot_chunks.append(chunk)
        return slots[key]

    def chunk_id(src, dst, k):
        return (src * world + dst) * split + k

    waits, notifies = [], []
    for t in range(tiles_m * tiles_n):
        lo, hi = (t // tiles_n) * CFG.block_m, min((t // tiles_n + 1) * CFG.block_m, m)
        box = lo // shard
        w, nt = [], []
        for k in range(split):
            k_lo, k_hi = even_split(shard, split, k)
            if max(lo, box * shard + k_lo) >= min(hi, box * shard + k_hi):
                continue
            if box == rank:
                w += [slot(("landing", s, k), chunk_id(s, rank, k)) for s in range(world) if s != rank]
            else:
                s_ = slot(("ready", box, k), chunk_id(rank, box, k))
                writers[s_] += 1
                nt.append(s_)
        waits.append(w)
        notifies.append(nt)
    for key, s_ in slots.items():
        if key[0] == "landing":
            writers[s_] = 1
    tiles = list(range(tiles_m * tiles_n))
    if order == "own-last":
        tiles.sort(key=lambda t: bool(waits[t]))
    elif order == "own-first":
        tiles.sort(key=lambda t: not waits[t])
    return TileTables.from_lists(tiles, tiles_n, waits, notifies, writers, slot_chunks, rank=rank)


def _operands(m, n, k, world, dtype, layout, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(n, k, generator=gen).to(dtype).t() if layout == "nk" else torch.randn(k, n, generator=gen).to(dtype)
    p = torch.randn(world, m // world, n, generator=gen).to(dtype)
    return a, b, p


def _run_transformed(tables, a, b, p, world, rank, signals, epoch, bound_ns=2_000_000, num_programs=3):
    m, k = a.shape
    n = b.shape[1]
    shard = m // world
    kernel = fused_gemm.transformed_kernel(staged_gemm.STAGED_KERNEL, staged_gemm.STAGED_MODULE)
    c = torch.full((m, n), float("nan"), dtype=a.dtype)
    out = torch.full((shard, n), float("nan"), dtype=a.dtype)
    b_is_nk = b.stride(0) == 1 and b.stride(1) != 1
    b_arg = b.t() if b_is_nk else b
    error = launch(kernel, (num_programs,), tables, a, b_arg, c, p, out, m, n, k, k, b_arg.stride(0), n,
                   shard * n, n, n, rank * shard, shard, rank, num_programs, signals=signals, epoch=epoch,
                   wait_bound_ns=bound_ns, sync=False, NUM_SLOTS=world, B_IS_NK=b_is_nk,
                   BLOCK_M=CFG.block_m, BLOCK_N=CFG.block_n, BLOCK_K=CFG.block_k, GROUP_M=CFG.group_m,
                   WARP_SPECIALIZE=False, FLATTEN=True)
    return c, out, error


def _landed(tables, epoch):
    """Every landing slot raised for `epoch`, every ready slot at its previous epoch's value."""
    landing = [i for i, c in enumerate(tables.slot_chunks) if i in set(tables.wait_slots)]
    values = [(epoch if i in landing else epoch - 1) * w for i, w in enumerate(tables.slot_writers)]
    return torch.tensor(values, dtype=torch.int32)


# --- the transformed kernel under the interpreter, hand-built tables ----------------------------


@pytest.mark.parametrize("world,rank,split", [(2, 0, 1), (2, 1, 2), (3, 2, 2), (4, 1, 1), (4, 3, 3)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_own_tiles_add_the_staged_partials_and_others_notify(world, rank, split, dtype, layout):
    m, n, k = 64 * world, 40, 48          # N, K not multiples of 32
    tables = hand_tables(m, n, world, rank, split)
    a, b, p = _operands(m, n, k, world, dtype, layout, seed=world * 7 + rank)
    p[rank] = float("nan")                 # never written by the plan: must never be read
    shard, lo = m // world, rank * (m // world)
    ref = a.double() @ b.double()
    for epoch in (1, 2):
        signals = _landed(tables, epoch)
        c, out, error = _run_transformed(tables, a, b, p, world, rank, signals, epoch)
        check_error(error, tables, "gemm_reduce_kernel")
        expected = ref[lo:lo + shard] + sum(p[s].double() for s in range(world) if s != rank)
        assert not torch.isnan(out).any()
        assert torch.allclose(out.double(), expected, rtol=2e-2, atol=5e-2)
        rest = torch.cat([c[:lo], c[lo + shard:]])
        assert torch.allclose(rest.double(), torch.cat([ref[:lo], ref[lo + shard:]]), rtol=2e-2, atol=2e-2)
        assert torch.isnan(c[lo:lo + shard]).all(), "own rows go to out, never to the heap's c"
        # Each ready slot rose by its writer count (every tile of the box notified once); the
        # landing slots were not touched.
        for slot, writers in enumerate(tables.slot_writers):
            want = epoch * writers
            assert int(signals[slot]) == want, (slot, int(signals[slot]), want)


def test_a_missing_staged_chunk_times_out_and_is_named():
    world, rank, split = 3, 1, 2
    m, n, k = 64 * world, 32, 32
    tables = hand_tables(m, n, world, rank, split)
    a, b, p = _operands(m, n, k, world, torch.float16, "kn", seed=3)
    signals = _landed(tables, 1)
    missing = tables.wait_slots[-1]
    signals[missing] = 0
    chunk = tables.slot_chunks[missing]
    _, _, error = _run_transformed(tables, a, b, p, world, rank, signals, 1, bound_ns=20_000)
    with pytest.raises(WaitTimeoutError, match=rf"rank {rank}: tile \d+ waited on slot {missing} "
                                               rf"\(chunk {chunk}\) for value >= 1 but saw 0"):
        check_error(error, tables, "gemm_reduce_kernel")


def test_tiles_of_other_boxes_never_wait():
    """Every landing slot missing: the tiles of other boxes still store c and notify (a rank's
    producer tiles never depend on what lands), only own tiles time out."""
    world, rank = 2, 0
    m, n, k = 128, 32, 32
    tables = hand_tables(m, n, world, rank, 1)
    a, b, p = _operands(m, n, k, world, torch.float16, "kn", seed=8)
    signals = torch.zeros(len(tables.slot_writers), dtype=torch.int32)
    c, _, error = _run_transformed(tables, a, b, p, world, rank, signals, 1, bound_ns=5_000)
    with pytest.raises(WaitTimeoutError):
        check_error(error, tables, "gemm_reduce_kernel")
    ready = [s for s in set(tables.notify_slots)]
    assert ready and all(int(signals[s]) == tables.slot_writers[s] for s in ready)
    assert torch.allclose(c[64:].double(), (a.double() @ b.double())[64:], rtol=2e-2, atol=2e-2)


def test_transformed_kernel_waits_after_the_k_loop_and_notifies_after_the_store():
    import importlib

    path = importlib.import_module(staged_gemm.STAGED_MODULE).__file__
    out = sy.transform(open(path, encoding="utf-8").read(), path, staged_gemm.STAGED_KERNEL).source
    body = out[out.index(f"def {staged_gemm.STAGED_KERNEL}("):]
    lines = [ln.strip() for ln in body.splitlines()]
    k_loop = lines.index("for ki in range(k_tiles):")
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("syl.wait_tile("))
    add = next(i for i, ln in enumerate(lines) if ln.startswith("acc = _add_staged_partials("))
    store = next(i for i, ln in enumerate(lines) if ln.startswith("_store_reduced_tile("))
    notify = next(i for i, ln in enumerate(lines) if ln.startswith("syl.notify_tile("))
    assert k_loop < wait < add < store < notify


# --- which shapes the staged epilogue takes ----------------------------------------------------


@pytest.mark.parametrize("m,n,k,world,why", [
    (256, 64, 64, 2, None),
    (256, 64, 64, 4, r"shard of 64 rows is not a multiple of the GEMM's BLOCK_M=128"),
    (200, 64, 64, 2, r"shard of 100 rows is not a multiple"),
    (255, 64, 64, 2, r"m=255 is not a multiple of the world size 2"),
    (512, 60, 64, 2, r"TMA cannot describe the operands .*N=60"),
])
def test_staged_unsupported_says_why(m, n, k, world, why):
    got = staged_gemm.staged_unsupported(m, n, k, world, 128, torch.bfloat16)
    if why is None:
        assert got is None
    else:
        assert got is not None and __import__("re").search(why, got), got


def test_staged_gemm_refuses_an_unsupported_shape_by_name():
    with pytest.raises(UserError, match=r"StagedReduceGemm: the shard of 48 rows is not a multiple"):
        staged_gemm.StagedReduceGemm(plan=None, rank=0, world=2, m=96, n=32, k=32, dtype=torch.float16,
                                     b_layout="kn", config=CFG, tile_order="arrival",
                                     device=torch.device("cpu"), wait_bound_ns=1, num_programs=1)
