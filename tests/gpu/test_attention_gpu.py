"""Sequence-parallel attention pieces on one GPU (docs/SEQUENCE_PARALLEL.md):

- the local attention kernel (kernels/attention.py) against SDPA: fp16/bf16, head dim 64/128,
  causal or not, GQA;
- its transformed form with every piece in place equals the untransformed kernel bit for bit;
- pieces that land late, in a random order, from a side stream (copy, then a one-element store of
  the signal) while the transformed kernel spins: the output equals the in-place one; a withheld
  piece ends the launch with WaitTimeoutError naming its chunk;
- ulysses_attention / ring_attention at world 1 against SDPA;
(The transformed kernel's price with nothing to wait for is a benchmark row,
bench/bench_seq_attention.py, not a test.)

    python -m pytest -q tests/gpu/test_attention_gpu.py -s
"""

import os
import random
import sys
import types
from pathlib import Path

# Every kernel module is loaded when CUDA starts, before anything spins. The late-pieces test's
# side stream runs PyTorch kernels (sleep, strided copy, fill) while the transformed kernel
# waits for them; a module loaded lazily at that moment waits for the device, hence for the
# spinning kernel, until its bound (docs/ANNOTATIONS.md, "Rules learnt on the GPU"). Warming
# those kernels one by one missed one: on nvidia-h200 (2026-11-25) whichever late-pieces case
# ran first in a process timed out with lazy loading, and both passed with EAGER. Set before
# torch can start CUDA; run this file in its own process (`python -m pytest` on it alone).
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "transform" / "attention.py"
DEV = torch.device("cuda")


@pytest.fixture(scope="module")
def sy():
    import importlib.util

    import syncopate.block_tables as block_tables
    import syncopate.launch as launch
    from syncopate.kernels import attention

    spec = importlib.util.spec_from_file_location("sy_gpu_attention_golden", GOLDEN)
    golden = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = golden
    spec.loader.exec_module(golden)
    return types.SimpleNamespace(launch=launch, block_tables=block_tables, attention=attention, golden=golden)


def _sdpa(q, k, v, causal, q_start=0):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        mask = (torch.arange(q.shape[2], device=q.device)[:, None] + q_start) >= torch.arange(
            k.shape[2], device=q.device
        )[None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _qkv(h, h_kv, n_q, n_kv, d, dtype, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    return (
        torch.randn(1, h, n_q, d, device=DEV, dtype=dtype, generator=gen),
        torch.randn(1, h_kv, n_kv, d, device=DEV, dtype=dtype, generator=gen),
        torch.randn(1, h_kv, n_kv, d, device=DEV, dtype=dtype, generator=gen),
    )


BM, BN = 64, 64


def _original(sy, q, k, v, causal, q_start=0):
    o = torch.empty_like(q)
    tiles = -(-q.shape[2] // BM) * q.shape[0] * q.shape[1]
    sy.attention.attention_fwd_kernel[(tiles,)](
        *sy.attention.attention_reference_args(q, k, v, o, q.shape[-1] ** -0.5, q_start),
        HEAD_DIM=q.shape[-1],
        BLOCK_M=BM,
        BLOCK_N=BN,
        CAUSAL=causal,
    )
    return o


def _transformed(sy, q, k, v, causal, world, rank, signals, bound=2_000_000_000, sync=True, bm=BM):
    """The golden kernel, tiles shuffled; `bm` 128: the fused ops' configuration (128 x 64
    blocks, 8 warps, 3 stages), else 64 x 64 with Triton's default warps and stages."""
    o = torch.empty_like(q)
    tiles_n = q.shape[0] * q.shape[1]
    tiles = -(-q.shape[2] // bm) * tiles_n
    config = dict(num_warps=8, num_stages=3) if bm == 128 else {}
    order = list(range(tiles))
    random.Random(1).shuffle(order)
    tables = sy.launch.TileTables.from_lists(
        order, tiles_n, [[]] * tiles, [[]] * tiles, [1] * world, [100 + p for p in range(world)], rank=rank
    )
    blocks = sy.block_tables.BlockTables.pieces_table(tiles_n, k.shape[2], BN, world, rank)
    error = sy.launch.launch(
        sy.golden.attention_fwd_kernel,
        None,
        tables,
        *sy.attention.attention_reference_args(q, k, v, o, q.shape[-1] ** -0.5, rank * q.shape[2]),
        signals=signals,
        epoch=1,
        wait_bound_ns=bound,
        blocks=blocks,
        sync=sync,
        HEAD_DIM=q.shape[-1],
        BLOCK_M=bm,
        BLOCK_N=BN,
        CAUSAL=causal,
        **config,
    )
    return o, tables, error


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h,h_kv", [(8, 8), (8, 2)])
def test_local_kernel_and_transformed_in_place(sy, dtype, d, causal, h, h_kv):
    world, rank, s_loc = 4, 2, 256
    q, k, v = _qkv(h, h_kv, s_loc, world * s_loc, d, dtype)
    ref = _sdpa(q.float(), k.float(), v.float(), causal, rank * s_loc)
    o = _original(sy, q, k, v, causal, rank * s_loc)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
    signals = torch.ones(world, dtype=torch.int32, device=DEV)
    t, _, _ = _transformed(sy, q, k, v, causal, world, rank, signals)
    # Arrival order changes the summation order: close, not bitwise.
    torch.testing.assert_close(t.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_late_pieces_from_a_side_stream(sy, causal, bm):
    """The in-loop wait is loop-free on the GPU, so the K/V loop is pipelined: a block's prefetch
    must still follow its wait (it depends on the loop variable the wait returns). NaN in every
    piece until it lands, late, in a random order: the output has the in-place bits."""
    world, rank, s_loc, d = 4, 1, 512, 128
    q, k_full, v_full = _qkv(8, 4, s_loc, world * s_loc, d, torch.float16, seed=3)
    signals = torch.ones(world, dtype=torch.int32, device=DEV)
    expected, _, _ = _transformed(sy, q, k_full, v_full, causal, world, rank, signals, bm=bm)
    k = torch.full_like(k_full, float("nan"))
    v = torch.full_like(v_full, float("nan"))
    own = slice(rank * s_loc, (rank + 1) * s_loc)
    k[:, :, own], v[:, :, own] = k_full[:, :, own], v_full[:, :, own]
    signals = torch.zeros(world, dtype=torch.int32, device=DEV)
    signals[rank] = 1
    side = torch.cuda.Stream()
    # The side stream's kernels are loaded at start (CUDA_MODULE_LOADING=EAGER, top of file);
    # running them once more here also makes PyTorch's own first-use set-up happen now.
    with torch.cuda.stream(side):
        torch.cuda._sleep(1000)
        scratch = torch.empty_like(k_full)
        scratch[:, :, own].copy_(k_full[:, :, own])
        scratch[:, :, own].copy_(v_full[:, :, own])
        torch.zeros(world, dtype=torch.int32, device=DEV)[0:1].fill_(1)
    torch.cuda.synchronize()
    late, tables, error = _transformed(sy, q, k, v, causal, world, rank, signals, sync=False, bm=bm)
    pieces = [p for p in range(world) if p != rank]
    random.Random(7).shuffle(pieces)
    with torch.cuda.stream(side):
        for p in pieces:
            torch.cuda._sleep(2_000_000)
            rows = slice(p * s_loc, (p + 1) * s_loc)
            k[:, :, rows].copy_(k_full[:, :, rows])
            v[:, :, rows].copy_(v_full[:, :, rows])
            signals[p : p + 1].fill_(1)
    torch.cuda.synchronize()
    sy.launch.check_error(error, tables, "attention_fwd_kernel")  # names the tile, slot and chunk
    # Same tile order, same visit order, same data: the same bits as with every piece in place.
    assert not torch.isnan(late).any(), "a block was read before it landed"
    torch.testing.assert_close(late, expected, rtol=0, atol=0)


def test_withheld_piece_times_out_naming_its_chunk(sy):
    world, rank = 4, 0
    q, k, v = _qkv(4, 4, 128, 512, 64, torch.float16)
    signals = torch.ones(world, dtype=torch.int32, device=DEV)
    signals[2] = 0
    with pytest.raises(sy.launch.WaitTimeoutError, match=r"chunk 102 never arrived"):
        _transformed(sy, q, k, v, False, world, rank, signals, bound=50_000_000)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_ops_at_world_one(dtype, causal):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v = _qkv(8, 2, 1024, 1024, 128, dtype, seed=5)
    ref = _sdpa(q.float(), k.float(), v.float(), causal)
    for name, op, kwargs in (
        ("ulysses sdpa", ulysses_attention, {}),
        ("ulysses triton", ulysses_attention, {"compute": "triton"}),
        ("ring", ring_attention, {}),
    ):
        out = op(q, k, v, causal=causal, **kwargs)
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("causal", [False, True])
def test_ring_step_on_the_flash_kernel_matches_fp32(causal):
    """The sequential ring's step (o, lse) from PyTorch's flash kernel against the fp32 matmul form
    it replaces on a GPU (same function on CPU copies), GQA included."""
    from syncopate.ops.seq_attention import attention_with_lse

    q, k, v = _qkv(8, 2, 384, 384, 128, torch.bfloat16, seed=11)
    o, lse = attention_with_lse(q, k, v, causal=causal, scale=128**-0.5)
    o_ref, lse_ref = attention_with_lse(q.cpu(), k.cpu(), v.cpu(), causal=causal, scale=128**-0.5)
    torch.testing.assert_close(o.cpu(), o_ref, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse.cpu(), lse_ref, rtol=1e-3, atol=1e-3)
