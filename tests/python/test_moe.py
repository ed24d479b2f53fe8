"""syncopate.ops.moe: the MoE dispatch (all-to-all with run-time counts, then the experts' up
projection) and combine (down projection, the reverse all-to-all, the weighted sum), at world 1
and as 4 gloo processes on the CPU, against float64 PyTorch (examples/moe_layer.py); and
every refused input, named."""

import json
import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import moe_worker  # noqa: E402
from syncopate.errors import ShapeError, UserError  # noqa: E402
from syncopate.ops.moe import MoeDispatchCombine, route  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import moe_layer  # noqa: E402

TOLERANCE = moe_layer.TOLERANCE


@pytest.mark.parametrize("size", ["tiny-top2", "tiny-top8"])
@pytest.mark.parametrize("how", ["random", "skewed"])
def test_one_rank_matches_float64(size, how):
    args = moe_layer.parse_args(["--size", size, "--routing", how, "--device", "cpu", "--tokens", "40"])
    report = moe_layer.run_layer(moe_layer.SIZES[size], args, 0, 1, None, torch.device("cpu"))
    assert report["worst"] <= TOLERANCE, report
    rows = report["steps"][0]["rows_per_expert"]
    assert sum(rows) == 40 * moe_layer.SIZES[size].top_k  # dropless: every routed row
    if how == "skewed":
        assert rows[1] == 40 and rows[-1] == 0, rows  # the hot expert and the empty one


def test_layout_groups_rows_by_expert_and_combine_inverts_dispatch():
    """With identity experts the combine returns each token times the sum of its weights."""
    layer = MoeDispatchCombine(None, num_experts=4, top_k=2)
    x = torch.randn(6, 8, dtype=torch.float64)
    ids = torch.tensor([[0, 3], [3, 1], [1, 0], [2, 3], [0, 2], [3, 0]])
    weights = torch.rand(6, 2, dtype=torch.float64)
    eye = torch.eye(8, dtype=torch.float64).expand(4, 8, 8).contiguous()
    h, layout = layer.dispatch_gemm(x, ids, eye)
    assert layout.rows_per_expert == [4, 2, 2, 4]
    # Group e holds the tokens routed to e, in token order.
    assert torch.equal(h[:4], x[[0, 2, 4, 5]]) and torch.equal(h[8:], x[[0, 1, 3, 5]])
    y = layer.combine_gemm(h, eye, layout, weights)
    assert torch.allclose(y, x * weights.sum(1, keepdim=True))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_over_gloo_match_float64(tmp_path):
    """Four ranks (two experts each at top-2 of 8, sixteen at top-8 of 64): every row crosses to
    its expert's rank and back."""
    import torch.multiprocessing as mp

    world = 4
    mp.start_processes(
        moe_worker.run, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True, start_method="spawn"
    )
    for rank in range(world):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        errors = {k: v for k, v in results.items() if isinstance(v, str)}
        assert not errors, f"rank {rank}: " + "\n".join(f"{k}: {v}" for k, v in errors.items())
        assert len(results) == 7, sorted(results)
        (refusal,) = results.pop("nccl refusal")
        assert refusal.startswith("UserError: MoeFusedDispatch: backend='nccl' cannot run here: ranks 0 and 1 share"), (
            refusal
        )
        for key, value in results.items():
            if key.endswith("expert 1 rows"):
                if rank == 0:  # expert 1 lives on rank 0 and gets one row from each token of each rank
                    assert value[1] == 24 * world, (key, value)
            else:
                assert value <= TOLERANCE, (rank, key, value)


def test_a_refusal_seen_by_one_rank_is_raised_on_every_rank(tmp_path):
    """Two gloo ranks: rank 0 alone sees its rows over capacity, rank 1 alone its id out of range.
    Each call is refused on both ranks (by name where it was routed, naming that rank elsewhere),
    before any rows move, so the good call after them runs in step."""
    import torch.multiprocessing as mp

    world = 2
    mp.start_processes(
        moe_worker.refusals, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True, start_method="spawn"
    )
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    where = {
        "over capacity on rank 0": ("rank 0 routes 6 rows to expert 0 (on rank 0), over its capacity of 4", 0),
        "bad id on rank 1": ("expert id 9 is outside 0..3 (rank 1)", 1),
    }
    for case, (named, bad_rank) in where.items():
        for r in range(world):
            kind, text = got[r][case]
            assert kind == "ShapeError", (r, case, kind, text)
            expected = named if r == bad_rank else f"rank(s) [{bad_rank}] routed rows this call cannot carry"
            assert expected in text, (r, case, text)
    for r in range(world):
        assert got[r]["good"] == ["ok", [4, 2]], (r, got[r]["good"])


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ShapeError, match=r"num_experts=6 cannot be split evenly over"):

        class FourRanks:
            def size(self):
                return 4

            def rank(self):
                return 0

        MoeDispatchCombine(FourRanks(), num_experts=6, top_k=2)
    with pytest.raises(ShapeError, match=r"top_k=9 is more than num_experts=8"):
        MoeDispatchCombine(None, num_experts=8, top_k=9)
    with pytest.raises(UserError, match=r"capacity must be None or an integer >= 1"):
        MoeDispatchCombine(None, num_experts=8, top_k=2, capacity=0)
    layer = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=3)
    x, w = torch.randn(5, 8), torch.randn(4, 8, 6)
    good = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 1]])
    with pytest.raises(ShapeError, match=r"expert_ids must be \[5, 2\] \(tokens x top_k\), got \[5, 3\]"):
        layer.dispatch_gemm(x, torch.zeros(5, 3, dtype=torch.int64), w)
    with pytest.raises(UserError, match=r"expert_ids must be int32 or int64, got torch.float32"):
        layer.dispatch_gemm(x, good.float(), w)
    with pytest.raises(ShapeError, match=r"expert id 4 is outside 0..3"):
        layer.dispatch_gemm(x, torch.tensor([[0, 4]] * 5), w)
    with pytest.raises(ShapeError, match=r"w_up must be \[4, 8, N\]"):
        layer.dispatch_gemm(x, good, torch.randn(2, 8, 6))
    with pytest.raises(UserError, match=r"w_up is torch.float16"):
        layer.dispatch_gemm(x, good, w.half())
    with pytest.raises(ShapeError, match=r"routes 4 rows to expert 0 \(on rank 0\), over its capacity of 3"):
        layer.dispatch_gemm(x, torch.tensor([[0, 1], [0, 2], [0, 3], [0, 1], [1, 2]]), w)
    h, layout = layer.dispatch_gemm(x, good, w)
    with pytest.raises(ShapeError, match=r"weights must be \[5, 2\]"):
        layer.combine_gemm(h, torch.randn(4, 6, 8), layout, torch.rand(5, 1))
    with pytest.raises(ShapeError, match=r"h must be \[10, N'\]"):
        layer.combine_gemm(h[:3], torch.randn(4, 6, 8), layout, torch.rand(5, 2))
    with pytest.raises(UserError, match=r"layout must be the DispatchLayout"):
        layer.combine_gemm(h, torch.randn(4, 6, 8), None, torch.rand(5, 2))
    with pytest.raises(ShapeError, match=r"logits must be a \[tokens, experts\] matrix"):
        route(torch.randn(5), 2)


def test_modes_and_backends_refused_by_name():
    with pytest.raises(UserError, match="mode must be one of"):
        MoeDispatchCombine(None, num_experts=4, top_k=2, mode="fast")
    with pytest.raises(UserError, match=r"backend must be one of \('copy-engine', 'sm-copy', 'nccl'\).*'pcie'"):
        MoeDispatchCombine(None, num_experts=4, top_k=2, backend="pcie")
    assert MoeDispatchCombine(None, num_experts=4, top_k=2, backend="nccl").backend == "nccl"


def test_fused_refused_on_cpu_and_auto_falls_back_saying_why():
    x = torch.randn(6, 8)
    ids = torch.tensor([[0, 3], [3, 1], [1, 0], [2, 3], [0, 2], [3, 0]])
    w = torch.randn(4, 8, 5)
    fused = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=64, mode="fused")
    with pytest.raises(UserError, match=r"mode='fused' cannot run: x is on cpu"):
        fused.dispatch_gemm(x, ids, w)
    no_capacity = MoeDispatchCombine(None, num_experts=4, top_k=2, mode="fused")
    with pytest.raises(UserError, match="no capacity was given"):
        no_capacity.dispatch_gemm(x, ids, w)
    odd = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=48, mode="fused")
    with pytest.raises(UserError, match="capacity 48 is not a multiple of 64"):
        odd.dispatch_gemm(x, ids, w)
    auto = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=64)
    h, _ = auto.dispatch_gemm(x, ids, w)
    assert auto.last_mode == "sequential" and "x is on cpu" in auto.reason
    h_seq, _ = MoeDispatchCombine(None, num_experts=4, top_k=2, mode="sequential").dispatch_gemm(x, ids, w)
    assert torch.equal(h, h_seq)


def test_auto_stays_sequential_where_fused_could_run(monkeypatch):
    """The fused dispatch measured slower than the sequential one (bench_moe, nvidia-h100-x1):
    auto does not take it, and says so; mode='fused' does."""
    import types

    import syncopate.runtime

    monkeypatch.setattr(syncopate.runtime, "require_runtime", lambda: None)
    on_gpu = types.SimpleNamespace(device=torch.device("cuda", 0))
    auto = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=128)
    mode, reason = auto._choose(on_gpu)
    assert mode == "sequential" and "not shown faster than the sequential one" in reason
    fused = MoeDispatchCombine(None, num_experts=4, top_k=2, capacity=128, mode="fused")
    assert fused._choose(on_gpu)[0] == "fused"


def test_row_permutations_match_their_definitions():
    """_expert_major (arrival order -> by expert, then source) and _slot_rows (capacity slots ->
    the same order) against the row-by-row definitions, with empty slots and a full one."""
    from syncopate.ops.moe import _expert_major, _slot_rows

    gen = torch.Generator().manual_seed(3)
    for world, experts, capacity in ((1, 3, 4), (3, 2, 5), (4, 4, 2)):
        counts = torch.randint(0, capacity + 1, (world, experts), generator=gen)
        counts[0, 0], counts[-1, -1] = 0, capacity
        recv = tuple(tuple(int(v) for v in row) for row in counts.tolist())
        at, starts = 0, {}
        for s in range(world):
            for e in range(experts):
                starts[s, e] = at
                at += recv[s][e]
        pairs = [(s, e) for e in range(experts) for s in range(world)]
        major = [starts[s, e] + i for s, e in pairs for i in range(recv[s][e])]
        slots = [(s * experts + e) * capacity + i for s, e in pairs for i in range(recv[s][e])]
        assert _expert_major(recv, torch.device("cpu")).tolist() == major
        assert _slot_rows(recv, capacity, torch.device("cpu")).tolist() == slots
