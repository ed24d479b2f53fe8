"""syncopate.ops.ulysses_attention / ring_attention (sequential forms, forward) on the CPU:
- one rank (no process group, and a one-rank gloo group): both equal SDPA, with Syncopate's
  attention kernel under the interpreter (compute='triton') too;
- the ring's per-step merge over W pieces given in arrival order (own, r-1, ...) equals SDPA on
  the gathered sequence for every rank, causal (pieces after the own one never computed) or not;
- two gloo ranks in two processes: both ops equal SDPA on the gathered sequence, and their
  gradients SDPA's (test_seq_attention_grad.check_gradients_at_two_ranks);
- bad shapes and modes are refused by name.
"""

import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def _interpreter_index_fix(monkeypatch):
    """Triton 3.6's interpreter and NumPy >= 2.4 (see test_transform_interpret.py)."""
    from triton.runtime import interpreter

    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


def _qkv(seed, z=1, h=4, h_kv=2, s=32, d=64, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(z, hh, s, d, generator=gen, dtype=dtype) for hh in (h, h_kv, h_kv))


def _sdpa(q, k, v, causal, q_start=0):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = None
    if causal:
        mask = (torch.arange(q.shape[2])[:, None] + q_start) >= torch.arange(k.shape[2])[None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("compute", ["sdpa", "triton"])
def test_one_rank_equals_sdpa(causal, compute):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v = _qkv(1)
    ref = _sdpa(q, k, v, causal)
    torch.testing.assert_close(ulysses_attention(q, k, v, causal=causal, compute=compute), ref, rtol=2e-5, atol=2e-5)
    if compute == "sdpa":
        torch.testing.assert_close(ring_attention(q, k, v, causal=causal), ref, rtol=2e-5, atol=2e-5)


def test_one_rank_process_group(single_rank_group):
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v = _qkv(2, d=128)
    ref = _sdpa(q, k, v, True)
    torch.testing.assert_close(
        ulysses_attention(q, k, v, causal=True, group=single_rank_group), ref, rtol=2e-5, atol=2e-5
    )
    torch.testing.assert_close(ring_attention(q, k, v, causal=True), ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_ring_steps_over_pieces_in_arrival_order(causal, world):
    from syncopate.ops.seq_attention import ring_steps

    s_loc = 8
    q_all, k_all, v_all = _qkv(3, s=world * s_loc)
    for rank in range(world):
        rows = slice(rank * s_loc, (rank + 1) * s_loc)
        computed = []

        def pieces():
            for i in range(world):
                p = (rank - i) % world
                cols = slice(p * s_loc, (p + 1) * s_loc)
                computed.append(p)
                yield p, k_all[:, :, cols], v_all[:, :, cols]

        o = ring_steps(q_all[:, :, rows], pieces(), rank, world, causal=causal, scale=64**-0.5)
        ref = _sdpa(q_all[:, :, rows], k_all, v_all, causal, q_start=rank * s_loc)
        torch.testing.assert_close(o, ref, rtol=2e-5, atol=2e-5)
        assert computed[0] == rank


def _two_rank_worker(rank, world, path, out):
    import sys
    from pathlib import Path

    import torch.distributed as dist

    # The installed package, as in the parent (conftest.py): a test module of the parent may have
    # put the source tree's python/ (no compiled modules) on the sys.path this process inherited.
    repo_python = Path(__file__).resolve().parents[2] / "python"
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != repo_python]
    try:
        from syncopate.ops import ring_attention, ulysses_attention

        dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"file://{path}")
        q_all, k_all, v_all = _qkv(4, h=4, h_kv=2, s=world * 8)
        rows = slice(rank * 8, (rank + 1) * 8)
        q, k, v = (t[:, :, rows].contiguous() for t in (q_all, k_all, v_all))
        for causal in (False, True):
            ref = _sdpa(q, k_all, v_all, causal, q_start=rank * 8)
            results = {
                "ulysses": ulysses_attention(q, k, v, causal=causal),
                "ring": ring_attention(q, k, v, causal=causal),
            }
            for name, o in results.items():
                torch.testing.assert_close(
                    o, ref, rtol=2e-5, atol=2e-5, msg=lambda m: f"{name} causal={causal} rank {rank}: {m}"
                )
            # The zig-zag layout: this rank holds half-pieces rank and 2W - 1 - rank (4 rows each).
            late = 2 * world - 1 - rank
            zz = torch.cat([torch.arange(rank * 4, rank * 4 + 4), torch.arange(late * 4, late * 4 + 4)])
            mine = (t[:, :, zz].contiguous() for t in (q_all, k_all, v_all))
            o = ring_attention(*mine, causal=causal, layout="zigzag", mode="sequential")
            ref = _sdpa(q_all, k_all, v_all, causal)[:, :, zz]
            torch.testing.assert_close(o, ref, rtol=2e-5, atol=2e-5, msg=lambda m: f"zigzag causal={causal}: {m}")
        from test_seq_attention_grad import check_gradients_at_two_ranks  # the backward, same processes

        check_gradients_at_two_ranks(rank, world)
        out.put((rank, "ok"))
    except Exception as e:  # reported to the parent
        out.put((rank, f"{type(e).__name__}: {e}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_two_gloo_ranks_equal_sdpa_on_the_gathered_sequence(tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_two_rank_worker, args=(r, 2, str(tmp_path / "store"), out)) for r in range(2)]
    for p in procs:
        p.start()
    import queue

    results = {}
    try:
        for _ in procs:  # a slow machine may take minutes to import torch twice
            rank, result = out.get(timeout=300)
            results[rank] = result
    except queue.Empty:
        pass
    for p in procs:
        p.join(timeout=60)
    exits = {r: p.exitcode for r, p in enumerate(procs)}
    assert results == {0: "ok", 1: "ok"}, f"results {results}, exit codes {exits}"


def test_refusals_name_the_problem():
    from syncopate.errors import ShapeError, UserError
    from syncopate.ops import ring_attention, ulysses_attention

    q, k, v = _qkv(5)
    with pytest.raises(UserError, match="dtype torch.float32 is not supported by the fused kernel"):
        ulysses_attention(q, k, v, mode="fused")  # refused before any heap or kernel is made
    with pytest.raises(UserError, match="mode='overlap', expected one of"):
        ring_attention(q, k, v, mode="overlap")
    with pytest.raises(ShapeError, match="3 query heads are not a multiple of 2 K/V heads"):
        ring_attention(q[:, :3], k, v)
    with pytest.raises(ShapeError, match=r"expected \[Z, H, S_loc, D\]"):
        ring_attention(q[0], k, v)
    with pytest.raises(UserError, match="log-sum-exp"):
        ring_attention(q, k, v, compute="triton")
