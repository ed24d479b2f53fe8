"""The GEMM with a reduction epilogue (kernels/gemm_reduce.py), untransformed, run by Triton's
CPU interpreter against a float64 reference.

out = (A @ B)[shard rows] + sum of the staged partials p[s] (s != skip_slot); c = A @ B on every
other row, c's shard rows untouched. Poisoned outputs show unwritten elements; the unused slot
of p is poisoned too, so reading it shows. Shapes where N and K are not multiples of the block,
shards that are and are not multiples of BLOCK_M (a tile straddling the shard's edge), slots
W = 1..4, fp16 and bf16, both B layouts, a persistent grid smaller than the tile count.
"""

import importlib
import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

# The kernels package loaded from the source tree, as test_gemm_interpret.py does.
from test_gemm_interpret import SMALL, _interpreter_fixes, _operands  # noqa: E402,F401

gemm_reduce_module = importlib.import_module("syncopate_kernels_under_test.gemm_reduce")


def _run(m, n, k, world, rank, dtype, b_is_nk, seed, shard_rows=None, num_programs=3):
    shard_rows = m // world if shard_rows is None else shard_rows
    shard_begin = rank * shard_rows
    a, b = _operands(m, n, k, dtype, b_is_nk, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    p = torch.randn(world, shard_rows, n, generator=gen).to(dtype)
    p[rank] = float("nan")  # this rank's own slot: never written by the plan, never read
    c = torch.full((m, n), float("nan"), dtype=dtype)
    out = torch.full((shard_rows, n), float("nan"), dtype=dtype)
    gemm_reduce_module.gemm_reduce(
        a, b, c, p, out, shard_begin=shard_begin, skip_slot=rank, config=SMALL, num_programs=num_programs
    )
    full = a.double() @ b.double()
    lo, hi = shard_begin, shard_begin + shard_rows
    others = [s for s in range(world) if s != rank]
    expected_out = full[lo:hi] + sum((p[s].double() for s in others), torch.zeros_like(full[lo:hi]))
    return c, out, full, expected_out, lo, hi


def _close(got, ref):
    assert not torch.isnan(got).any(), "some output elements were never written"
    err = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-12)).item()
    assert err < 1e-2, err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_is_nk", [False, True])
@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1), (3, 0), (3, 2), (4, 1)])
@pytest.mark.parametrize("n,k", [(40, 56), (64, 24)])  # 40, 56, 24: not multiples of 32
def test_reduce_epilogue_matches_reference(dtype, b_is_nk, world, rank, n, k):
    m = 64 * world  # shard of 64 rows: two 32-row blocks, tiles never straddle
    c, out, full, expected_out, lo, hi = _run(m, n, k, world, rank, dtype, b_is_nk, seed=world * 10 + rank + n)
    _close(out, expected_out)
    _close(torch.cat([c[:lo], c[hi:]]), torch.cat([full[:lo], full[hi:]]))
    assert torch.isnan(c[lo:hi]).all(), "the shard rows of c must not be written (they go to out)"


@pytest.mark.parametrize("world,rank,shard_rows", [(2, 1, 24), (3, 1, 40), (4, 3, 13)])
def test_a_tile_straddling_the_shard_edge_routes_each_row(world, rank, shard_rows):
    # Shards not a multiple of BLOCK_M = 32: one tile holds rows of two shards.
    m, n, k = shard_rows * world, 48, 40
    c, out, full, expected_out, lo, hi = _run(
        m, n, k, world, rank, torch.float16, False, seed=shard_rows, shard_rows=shard_rows, num_programs=2
    )
    _close(out, expected_out)
    if lo > 0 or hi < m:
        _close(torch.cat([c[:lo], c[hi:]]), torch.cat([full[:lo], full[hi:]]))
    assert torch.isnan(c[lo:hi]).all()


def test_skip_slot_minus_one_adds_every_slot():
    m, n, k, world = 64, 32, 32, 2
    a, b = _operands(m, n, k, torch.float16, False, seed=4)
    p = torch.randn(world, 32, n).half()
    c, out = torch.empty(m, n).half(), torch.empty(32, n).half()
    gemm_reduce_module.gemm_reduce(a, b, c, p, out, shard_begin=32, skip_slot=-1, config=SMALL)
    _close(out, (a.double() @ b.double())[32:] + p[0].double() + p[1].double())


def test_bad_operands_are_named():
    a, b = _operands(64, 32, 32, torch.float16, False, seed=2)
    p, out, c = torch.zeros(2, 32, 32).half(), torch.zeros(32, 32).half(), torch.zeros(64, 32).half()
    run = gemm_reduce_module.gemm_reduce
    with pytest.raises(ValueError, match=r"gemm_reduce: c must be a row-major 64x32"):
        run(a, b, torch.zeros(64, 31).half(), p, out, shard_begin=0, skip_slot=0)
    with pytest.raises(ValueError, match=r"gemm_reduce: p must be \[slots, shard_rows, 32\]"):
        run(a, b, c, torch.zeros(32, 32).half(), out, shard_begin=0, skip_slot=0)
    with pytest.raises(ValueError, match=r"gemm_reduce: out must be \[32, 32\]"):
        run(a, b, c, p, torch.zeros(16, 32).half(), shard_begin=0, skip_slot=0)
    with pytest.raises(ValueError, match=r"shard rows \[48, 80\) do not lie in the 64 rows"):
        run(a, b, c, p, out, shard_begin=48, skip_slot=0)
    with pytest.raises(ValueError, match=r"skip_slot 2 is not -1 \(none\) or one of the 2 slots"):
        run(a, b, c, p, out, shard_begin=0, skip_slot=2)
    a_odd, b_odd = _operands(64, 33, 32, torch.float16, False, seed=3)
    with pytest.raises(ValueError, match=r"TMA cannot describe"):
        run(
            a_odd,
            b_odd,
            torch.zeros(64, 33).half(),
            torch.zeros(2, 32, 33).half(),
            torch.zeros(32, 33).half(),
            shard_begin=0,
            skip_slot=0,
        )


def test_annotations_follow_the_annotation_language():
    """One tile block; the consume of p right before the partials are added (after the K loop);
    the produce of c right after the store; m_dim/n_dim of the [1, M, N] / [W, Ms, N] tensors."""
    source = open(gemm_reduce_module.__file__, encoding="utf-8").read().splitlines()
    stripped = [ln.strip() for ln in source]
    tile = stripped.index("# @sy.tile(index=tile_id, m=pid_m, n=pid_n)")
    end = stripped.index("# @sy.end")
    consume = next(i for i, ln in enumerate(stripped) if ln.startswith("# @sy.consume(p_ptr, m=pid_m, n=pid_n"))
    produce = next(i for i, ln in enumerate(stripped) if ln.startswith("# @sy.produce(c_ptr, m=pid_m, n=pid_n"))
    k_loop = next(i for i, ln in enumerate(stripped) if ln.startswith("acc = tma_k_loop("))  # the shared K loop
    assert tile < end < k_loop < consume < produce
    assert "m_dim=1, n_dim=2, m_local_shard=True)" in stripped[consume]  # p holds this rank's rows only
    assert stripped[produce].endswith("m_dim=1, n_dim=2)")
    assert stripped[consume + 1].startswith("acc = _add_staged_partials(")
    assert stripped[produce + 1].startswith("_store_reduced_tile(")
