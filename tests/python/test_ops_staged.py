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
import re
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import syncopate as sy  # noqa: E402
from syncopate.errors import UserError, WaitTimeoutError  # noqa: E402
from syncopate.kernels.configs import CANDIDATES, INTERPRETER_CONFIG  # noqa: E402
from syncopate.launch import TileTables, check_error, epoch_word, launch  # noqa: E402
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


def _run_transformed(
    tables, a, b, p, world, rank, signals, epoch, bound_ns=2_000_000, num_programs=3, own_rows_in_c=False
):
    """The transformed kernel as GemmRs's staged path launches it (out: a new tensor), or with
    own_rows_in_c as GemmAr's does (out: c's own box)."""
    m, k = a.shape
    n = b.shape[1]
    shard = m // world
    kernel = fused_gemm.transformed_kernel(staged_gemm.STAGED_KERNEL, staged_gemm.STAGED_MODULE)
    c = torch.full((m, n), float("nan"), dtype=a.dtype)
    out = c[rank * shard : (rank + 1) * shard] if own_rows_in_c else torch.full((shard, n), float("nan"), dtype=a.dtype)
    b_is_nk = b.stride(0) == 1 and b.stride(1) != 1
    b_arg = b.t() if b_is_nk else b
    error = launch(
        kernel,
        (num_programs,),
        tables,
        a,
        b_arg,
        c,
        p,
        out,
        m,
        n,
        k,
        k,
        b_arg.stride(0),
        n,
        shard * n,
        n,
        n,
        rank * shard,
        shard,
        rank,
        num_programs,
        signals=signals,
        epoch=epoch,
        wait_bound_ns=bound_ns,
        sync=False,
        NUM_SLOTS=world,
        B_IS_NK=b_is_nk,
        BLOCK_M=CFG.block_m,
        BLOCK_N=CFG.block_n,
        BLOCK_K=CFG.block_k,
        GROUP_M=CFG.group_m,
        WARP_SPECIALIZE=False,
        FLATTEN=True,
    )
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
    m, n, k = 64 * world, 40, 48  # N, K not multiples of 32
    tables = hand_tables(m, n, world, rank, split)
    a, b, p = _operands(m, n, k, world, dtype, layout, seed=world * 7 + rank)
    p[rank] = float("nan")  # never written by the plan: must never be read
    shard, lo = m // world, rank * (m // world)
    ref = a.double() @ b.double()
    for epoch in (1, 2):
        signals = _landed(tables, epoch)
        c, out, error = _run_transformed(tables, a, b, p, world, rank, signals, epoch)
        check_error(error, tables, "gemm_reduce_kernel")
        expected = ref[lo : lo + shard] + sum(p[s].double() for s in range(world) if s != rank)
        assert not torch.isnan(out).any()
        assert torch.allclose(out.double(), expected, rtol=2e-2, atol=5e-2)
        rest = torch.cat([c[:lo], c[lo + shard :]])
        assert torch.allclose(rest.double(), torch.cat([ref[:lo], ref[lo + shard :]]), rtol=2e-2, atol=2e-2)
        assert torch.isnan(c[lo : lo + shard]).all(), "own rows go to out, never to the heap's c"
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
    with pytest.raises(
        WaitTimeoutError,
        match=rf"rank {rank}: tile \d+ waited on slot {missing} "
        rf"\(chunk {chunk}\) for value >= 1 but saw 0",
    ):
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
    body = out[out.index(f"def {staged_gemm.STAGED_KERNEL}(") :]
    lines = [ln.strip() for ln in body.splitlines()]
    k_loop = next(i for i, ln in enumerate(lines) if ln.startswith("acc = tma_k_loop("))  # the shared K loop
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("syl.wait_tile("))
    add = next(i for i, ln in enumerate(lines) if ln.startswith("acc = _add_staged_partials("))
    store = next(i for i, ln in enumerate(lines) if ln.startswith("_store_reduced_tile("))
    notify = next(i for i, ln in enumerate(lines) if ln.startswith(("syl.notify_tile(", "syl.notify_tile_row(")))
    assert k_loop < wait < add < store < notify
    # The transformer's description of the accesses is what the op passes to the lowering.
    described = out[out.index("__syncopate__ = ") :].splitlines()[0]
    assert (
        '"tensor": "p", "param": "p_ptr", "role": "consume", "m_dim": 1, "n_dim": 2, "m_local_shard": true'
        in described.replace("True", "true")
    ), described
    assert [tuple(a) for a in staged_gemm.STAGED_ACCESSES] == [("c", "produce", 1, 2), ("p", "consume", 1, 2, True)]


def test_every_staged_kernel_variant_compiles_for_sm90(run_compile_script):
    """Triton's GPU passes (warp specialisation, pipelining of the persistent loop with a wait
    after the K loop) on the transformed kernel, through Triton's bundled ptxas (no GPU)."""
    run = run_compile_script("compile_staged_kernels.py", timeout=1500)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(("OK ", "FAIL "))]
    assert run.returncode == 0 and lines and all(ln.startswith("OK ") for ln in lines), (
        "\n".join(lines) + run.stderr[-3000:]
    )
    assert len(lines) == len(CANDIDATES) + 2  # every block (kn, 2 slots), the default also nk and 4 slots


# --- which shapes the staged epilogue takes ----------------------------------------------------


@pytest.mark.parametrize(
    "m,n,k,world,why",
    [
        (256, 64, 64, 2, None),
        (256, 64, 64, 4, r"shard of 64 rows is not a multiple of the GEMM's BLOCK_M=128"),
        (200, 64, 64, 2, r"shard of 100 rows is not a multiple"),
        (255, 64, 64, 2, r"m=255 is not a multiple of the world size 2"),
        (512, 60, 64, 2, r"TMA cannot describe the operands .*N=60"),
    ],
)
def test_staged_unsupported_says_why(m, n, k, world, why):
    got = staged_gemm.staged_unsupported(m, n, k, world, 128, torch.bfloat16)
    if why is None:
        assert got is None
    else:
        assert got is not None and re.search(why, got), got


def test_staged_gemm_refuses_an_unsupported_shape_by_name():
    with pytest.raises(UserError, match=r"StagedReduceGemm: the shard of 48 rows is not a multiple"):
        staged_gemm.StagedReduceGemm(
            plan=None,
            rank=0,
            world=2,
            m=96,
            n=32,
            k=32,
            dtype=torch.float16,
            b_layout="kn",
            config=CFG,
            tile_order="arrival",
            device=torch.device("cpu"),
            wait_bound_ns=1,
            num_programs=1,
        )


# --- the lowering of R3's staged plan agrees with the hand-built tables ------------------------


def _staged_plan(world, m, n, split, backend="copy-engine"):
    return staged_gemm.staged_plan(world=world, m=m, n=n, split=split, dtype="f16", backend=backend)


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


def _by_tile(tables, offsets, slots):
    """Per tile id, the set of chunks of its slots (slot numbering differs between tables)."""
    return [sorted(tables.slot_chunks[s] for s in slots[offsets[t] : offsets[t + 1]]) for t in range(tables.num_tiles)]


@pytest.mark.parametrize("world,split", [(2, 1), (2, 2), (3, 2), (4, 1), (4, 3)])
def test_lowered_staged_plan_waits_and_notifies_like_the_design(world, split):
    m, n, k = 64 * world, 40, 32
    plan = _staged_plan(world, m, n, split)
    sy.verify_or_raise(plan)
    for rank in range(world):
        g = _gemm(plan, world, rank, m, n, k)
        want = hand_tables(m, n, world, rank, split)
        got_waits = _by_tile(g.tables, g.tables.wait_offsets, g.tables.wait_slots)
        got_notifies = _by_tile(g.tables, g.tables.notify_offsets, g.tables.notify_slots)
        # The hand tables number chunks (src, dst, k); map the plan's chunks the same way.
        ids = {}
        for c in plan.chunks:
            k0 = c.dst_box.offset[1]
            sub = next(i for i in range(split) if even_split(m // world, split, i)[0] == k0)
            ids[c.id] = (c.src * world + c.dst) * split + sub
        assert [sorted(ids[c] for c in row) for row in got_waits] == _by_tile(
            want, want.wait_offsets, want.wait_slots
        ), rank
        assert [sorted(ids[c] for c in row) for row in got_notifies] == _by_tile(
            want, want.notify_offsets, want.notify_slots
        ), rank
        # Own box last in the tile order: every tile that waits comes after every tile that does not.
        waits = [bool(row) for row in got_waits]
        positions = [waits[t] for t in g.tables.tile_order]
        assert positions == sorted(positions), rank


@pytest.mark.parametrize("world,rank,split", [(2, 1, 2), (3, 0, 1), (4, 2, 2)])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_staged_gemm_from_the_lowering_matches_reference(world, rank, split, layout):
    m, n, k = 64 * world, 48, 40
    g = _gemm(_staged_plan(world, m, n, split), world, rank, m, n, k, layout=layout)
    assert g.kernel_name == staged_gemm.STAGED_KERNEL
    a, b, p = _operands(m, n, k, world, torch.float16, layout, seed=world + rank)
    p[rank] = float("nan")
    shard, lo = m // world, rank * (m // world)
    ref = a.double() @ b.double()
    for epoch in (1, 2):
        signals = _landed(g.tables, epoch)
        c = torch.full((m, n), float("nan"), dtype=torch.float16)
        out = torch.full((shard, n), float("nan"), dtype=torch.float16)
        g.launch(a, b, c, signals, epoch_word(epoch), p, out)
        g.check()
        expected = ref[lo : lo + shard] + sum(p[s].double() for s in range(world) if s != rank)
        assert torch.allclose(out.double(), expected, rtol=2e-2, atol=5e-2)
        assert torch.allclose(c[:lo].double(), ref[:lo], rtol=2e-2, atol=2e-2)
        assert torch.allclose(c[lo + shard :].double(), ref[lo + shard :], rtol=2e-2, atol=2e-2)
        assert all(int(signals[s]) == epoch * w for s, w in enumerate(g.tables.slot_writers))


def test_staged_gemm_names_a_chunk_that_never_lands():
    world, rank, m, n, k = 2, 0, 128, 32, 32
    plan = _staged_plan(world, m, n, 2)
    g = _gemm(plan, world, rank, m, n, k, bound_ns=20_000)
    signals = _landed(g.tables, 1)
    missing = g.tables.wait_slots[0]
    signals[missing] = 0
    chunk = plan.chunks[g.tables.slot_chunks[missing]]
    assert (chunk.src, chunk.dst) == (1, 0)
    a, b, p = _operands(m, n, k, world, torch.float16, "kn", seed=2)
    g.launch(a, b, torch.empty(m, n).half(), signals, epoch_word(1), p, torch.empty(64, n).half())
    with pytest.raises(WaitTimeoutError, match=rf"rank 0: tile \d+ waited on slot {missing} \(chunk {chunk.id}\)"):
        g.check()


# --- the op's `reduce` keyword, auto's choice and its reason -----------------------------------

from syncopate.ops import choice as choice_mod  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402
from syncopate.ops.gemm_rs import GemmRs  # noqa: E402

from test_ops_fused import FakeWorkspace, cpu_runtime  # noqa: E402,F401  (fixture)


def _rs(m, k, n, cls=GemmRs, **kw):
    kw.setdefault("dtype", torch.float16)
    return cls(None, m=m, k=k, n=n, device="cpu", **kw)


@pytest.mark.parametrize("cls", [GemmRs, GemmAr])  # GemmAr's staged path: test_ops_staged_ar.py
def test_reduce_keyword_is_checked_before_any_work(cls):
    with pytest.raises(
        UserError,
        match=rf"^{cls.__name__}: reduce='sum' is not one of "
        r"\('auto', 'epilogue', 'chunks'\)",
    ):
        _rs(64, 32, 32, reduce="sum", cls=cls)


@pytest.mark.parametrize(
    "kw,why",
    [
        (dict(m=70), r"the shard of 70 rows is not a multiple of the GEMM's BLOCK_M=32"),
        (dict(algorithm="ring"), r"algorithm='ring' was given and the staged plan is direct only"),
        (dict(mode="sequential"), r"mode='sequential' runs torch.matmul, then the plan's reduce-add chunks"),
        (dict(n=44), r"TMA cannot describe the operands"),
    ],
)
@pytest.mark.parametrize("cls", [GemmRs, GemmAr])  # one ProducerGemm keyword, the same rules
def test_epilogue_refused_by_name_and_auto_falls_back_saying_why(cpu_runtime, monkeypatch, cls, kw, why):
    monkeypatch.setenv(staged_gemm.AUTO_STAGED_ENV, "1")  # auto may take the epilogue: the shape refuses
    args = dict(m=64, k=40, n=48, backend="copy-engine", split=1, tile_order="row-major")
    args.update(kw)
    args.setdefault("mode", "fused")
    with pytest.raises(UserError, match=rf"^{cls.__name__}: reduce='epilogue' cannot run here: ({why})"):
        _rs(reduce="epilogue", cls=cls, **args)
    ctx = _rs(reduce="auto", cls=cls, **args)
    assert ctx.reduce == "chunks"
    assert re.search(rf"reduction by reduce-add chunks: ({why})", ctx.reason), ctx.reason


@pytest.mark.parametrize("cls", [GemmRs, GemmAr])
def test_auto_leaves_the_epilogue_out_until_it_has_run_on_a_gpu(cpu_runtime, monkeypatch, cls):
    # Not yet run on a GPU: auto keeps today's reduce-add chunks and says how to opt in; an
    # explicit reduce='epilogue' still runs it, and the variable lets auto take it.
    monkeypatch.delenv(staged_gemm.AUTO_STAGED_ENV, raising=False)
    args = dict(m=64, k=40, n=48, mode="fused", backend="copy-engine", split=1, tile_order="row-major", cls=cls)
    ctx = _rs(reduce="auto", **args)
    assert ctx.reduce == "chunks" and ctx.kernel_name == "gemm_tma_kernel"
    assert re.search(
        r"reduction by reduce-add chunks: the staged epilogue has not run on a GPU yet.*"
        r"SYNCOPATE_AUTO_STAGED=1",
        ctx.reason,
    ), ctx.reason
    assert _rs(**args).reduce == "chunks"  # the default is auto
    assert _rs(reduce="epilogue", **args).reduce == "epilogue"
    monkeypatch.setenv(staged_gemm.AUTO_STAGED_ENV, "1")
    assert "has not run on a GPU" not in _rs(reduce="auto", **args).reason


def _choose(m, n, k, world, collective="reduce-scatter", **kw):
    return choice_mod.choose(collective, m=m, n=n, k=k, world=world, dtype="bf16", block_m=128, block_n=256, **kw)


@pytest.mark.parametrize("collective", ["reduce-scatter", "all-reduce"])
@pytest.mark.parametrize("world", [2, 4])
def test_choice_compares_the_epilogue_with_the_chunks(world, collective):
    both = _choose(8192, 8192, 8192, world, collective, mode="fused", reduce="auto")
    chunks = _choose(8192, 8192, 8192, world, collective, mode="fused", reduce="chunks")
    staged = _choose(8192, 8192, 8192, world, collective, mode="fused", reduce="epilogue")
    assert chunks.reduce == "chunks" and staged.reduce == "epilogue" and staged.algorithm == "direct"
    assert "reduction in the epilogue" in both.reason and "reduce-add chunks" in both.reason
    # The staged prediction is the simulator's for the staged plan of this collective (GEMM+AR:
    # its copy-out of all of C included).
    plan = staged_gemm.staged_plan(
        world=world, m=8192, n=8192, split=staged.split, dtype="bf16", backend=staged.backend, collective=collective
    )
    assert plan.collective.kind == collective
    direct = sy.simulate(
        plan,
        sy.GemmShape(8192, 8192, 8192, 128, 256),
        choice_mod.cached_calibration(choice_mod.calibration_name()),
        order=staged.tile_order,
    )
    assert staged.predicted_us["fused"] == pytest.approx(direct.fused_us)
    faster = min((staged, chunks), key=lambda c: c.predicted_us["fused"])
    assert both.reduce == faster.reduce
    assert both.predicted_us == faster.predicted_us
    auto = _choose(8192, 8192, 8192, world, collective, reduce="auto")  # mode auto: reason keeps the comparison
    assert "reduction in the epilogue" in auto.reason, auto.reason


def test_choice_other_collectives_ignore_reduce():
    assert (
        choice_mod.choose(
            "all-gather",
            m=8192,
            n=8192,
            k=8192,
            world=2,
            dtype="bf16",
            block_m=128,
            block_n=256,
            mode="fused",
            reduce="auto",
        ).reduce
        == "chunks"
    )


@pytest.mark.parametrize("cls", [GemmRs, GemmAr])
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_context_at_world_one_runs_the_staged_kernel(cpu_runtime, cls, layout):
    m, k, n = 64, 40, 48
    ctx = _rs(
        m,
        k,
        n,
        mode="fused",
        reduce="epilogue",
        backend="copy-engine",
        split=1,
        tile_order="row-major",
        b_layout=layout,
        cls=cls,
    )
    assert (ctx.decision, ctx.reduce, ctx.algorithm, ctx.kernel_name) == (
        "fused",
        "epilogue",
        "direct",
        staged_gemm.STAGED_KERNEL,
    )
    assert ctx.plan.collective.kind == cls.collective and ctx.plan.collective.output == "p"
    assert ctx.plan.tensors["c"].shape == [1, m, n] and ctx.plan.tensors["p"].shape == [1, m, n]
    if cls is GemmAr:  # the own rows the kernel stores are the heap's C (at world 1, all of it)
        assert ctx.own_rows.data_ptr() == ctx.c.data_ptr() and ctx.own_rows.shape == (m, n)
    gen = torch.Generator().manual_seed(4)
    for call in (1, 2):
        a = torch.randn(m, k, generator=gen).half()
        b = torch.randn(n, k, generator=gen).half().t() if layout == "nk" else torch.randn(k, n, generator=gen).half()
        out = torch.full((m, n), float("nan"), dtype=torch.float16)
        assert ctx(a, b, out=out, check=True) is out
        assert torch.allclose(out.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)
        if cls is GemmAr:
            assert torch.equal(out, ctx.c), "out is the copy of the heap's C"
        else:
            assert torch.isnan(ctx.c).all(), "the own rows go straight to out, never to the heap's C"
    # The side streams fork before the kernel, whose launch precedes the chunks' issue.
    call = ["begin_and_publish", "fork", "issue_chunks"]
    if cls is GemmRs:  # no landing wait after the kernel and no copy-out
        assert [e[0] for e in ctx.ws.log] == (call + ["end", "check"]) * 2
    else:  # the kernel, the gathered boxes' landings, the copy-out (checked above), the end
        assert [e[0] for e in ctx.ws.log] == (call + ["wait_landed", "end", "check"]) * 2


@pytest.mark.parametrize("collective", ["reduce-scatter", "all-reduce"])
def test_a_staged_configuration_the_simulator_finds_deadlocked_is_refused(collective):
    # NCCL groups each rank's send and recv of a step; in row-major order rank 0's own tiles
    # come first and wait for the recv whose grouped send needs rank 0's later tiles.
    with pytest.raises(
        UserError,
        match=r"reduce='epilogue': no-candidate: .*the simulator refused nccl split 1 "
        r"row-major: .*deadlock",
    ):
        _choose(
            8192,
            8192,
            8192,
            2,
            collective,
            mode="fused",
            reduce="epilogue",
            backend="nccl",
            split=1,
            tile_order="row-major",
        )
    # auto never picks it: the reduce-add chunks run instead.
    c = _choose(
        8192, 8192, 8192, 2, collective, mode="fused", reduce="auto", backend="nccl", split=1, tile_order="row-major"
    )
    assert c.reduce == "chunks"


def test_the_kernels_annotations_must_describe_the_lowered_accesses():
    kernel = fused_gemm.transformed_kernel(staged_gemm.STAGED_KERNEL, staged_gemm.STAGED_MODULE)
    staged_gemm.check_accesses_match(kernel, staged_gemm.STAGED_ACCESSES)
    with pytest.raises(sy.errors.InternalError, match=r"annotations describe the accesses .* the op lowers"):
        staged_gemm.check_accesses_match(kernel, [("c", "produce", 1, 2), ("p", "consume", 1, 2)])
