"""The MoE layer's capacity-slot path on the CPU (ops/moe_slots.py, kernels/moe_rows.py under
TRITON_INTERPRET=1): slot places computed on the device against a plain-Python reference (stable
token order, rows over capacity dropped, counts clamped), the routing record and its refusals by
name, the row packing and the weighted combine kernels, and the whole world-1 layer composed from
them with the grouped GEMM (kernels/moe_gemm.py) against float64."""

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from syncopate.errors import ShapeError  # noqa: E402
from syncopate.ops import moe_slots  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreter_index_fix(monkeypatch):
    """As test_moe_gemm_interpret.py: Triton 3.6's interpreter turns a scalar into an int with
    int(1-element array), which NumPy >= 2.4 refuses; take the element explicitly."""
    from triton.runtime import interpreter

    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


def reference_destinations(ids, num_experts, capacity):
    """dest per (token, k) pair: the pair's expert g times capacity plus how many earlier pairs
    (in token order) went to g; -1 once g has `capacity` rows."""
    seen = [0] * num_experts
    dest = []
    for g in ids.reshape(-1).tolist():
        dest.append(g * capacity + seen[g] if seen[g] < capacity else -1)
        seen[g] += 1
    return dest, [min(n, capacity) for n in seen], seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slot_destinations_match_the_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    experts, top_k, tokens, capacity = 6, 2, 40, 9
    logits = torch.randn(tokens, experts, generator=gen)
    logits[:, 1] += 3.0 if seed else 0.0  # a hot expert: over capacity
    ids = torch.topk(logits, top_k, dim=1).indices
    dest, send, record = moe_slots.slot_destinations(ids, experts, capacity)
    ref_dest, ref_send, raw = reference_destinations(ids, experts, capacity)
    assert dest.tolist() == ref_dest
    assert send.dtype == torch.int32 and send.tolist() == ref_send
    values = dict(zip(moe_slots.RECORD_FIELDS, record.tolist()))
    assert values["min_id"] == int(ids.min()) and values["max_id"] == int(ids.max())
    assert values["worst_rows"] == max(raw) and raw[values["worst_expert"]] == max(raw)
    if seed:
        assert -1 in ref_dest  # the hot expert really overflowed


def test_empty_routing_and_expert_with_no_rows():
    dest, send, record = moe_slots.slot_destinations(torch.empty(0, 2, dtype=torch.int64), 4, 8)
    assert dest.numel() == 0 and send.tolist() == [0, 0, 0, 0]
    dest, send, _ = moe_slots.slot_destinations(torch.tensor([[0, 2], [2, 0]]), 4, 8)
    assert dest.tolist() == [0, 16, 17, 1] and send.tolist() == [2, 0, 2, 0]


def _check(values, capacity=4):
    moe_slots.check_record(values, num_experts=8, capacity=capacity, rank=1, local_experts=4, who="dispatch_slots")


def test_record_refuses_bad_ids_and_rows_over_capacity_by_name():
    _check([0, 7, 3, 4])  # in range, at capacity
    with pytest.raises(ShapeError, match=r"dispatch_slots: expert id 8 is outside 0..7 \(rank 1\)"):
        _check([0, 8, 3, 2])
    with pytest.raises(ShapeError, match=r"expert id -1 is outside"):
        _check([-1, 5, 3, 2])
    with pytest.raises(ShapeError, match=r"rank 1 routes 5 rows to expert 6 \(on rank 1\), over its capacity of 4"):
        _check([0, 7, 6, 5])


def test_deferred_checks_never_raise_in_a_call_and_report_a_bad_record_once():
    """Off CUDA a record's event is complete when it is pushed (as a CUDA record whose tiny copy
    finished before the call's next step): push() still reads it at once but must not raise, nor
    may a later push() or poll() (a call that raised on one rank would leave its peers waiting);
    raise_refusal() raises the first refusal by name, with how many were refused, once."""
    seen = []

    def check(values):
        seen.append(values)
        if values[0] < 0:
            raise ShapeError(f"bad record {values}")

    checks = moe_slots.DeferredChecks(check)
    checks.push(torch.tensor([0, 1, 0, 1]))
    assert seen == [[0, 1, 0, 1]]
    checks.raise_refusal()  # nothing refused: no error
    checks.push(torch.tensor([-1, 1, 0, 1]))  # read at once (complete), kept
    checks.push(torch.tensor([0, 1, 0, 1]))  # a later call
    checks.push(torch.tensor([-2, 1, 0, 1]))
    checks.poll()
    checks.drain()
    assert len(seen) == 4
    with pytest.raises(ShapeError, match=r"^bad record \[-1, 1, 0, 1\] \(1 later call\(s\) refused too\)$"):
        checks.raise_refusal()
    checks.raise_refusal()  # reported once


def test_layer_reports_bad_routing_at_check_only():
    """MoeDispatchCombine's routing records (what dispatch_slots pushes) are raised by check(),
    naming the expert and the rank, once; pushing one raises nothing."""
    from syncopate.ops.moe import MoeDispatchCombine

    layer = MoeDispatchCombine(None, num_experts=8, top_k=2, capacity=64)
    _, _, record = moe_slots.slot_destinations(torch.zeros(100, 2, dtype=torch.int64), 8, 64)
    layer._deferred.push(record)  # 200 rows for expert 0: complete at once off CUDA
    with pytest.raises(
        ShapeError, match=r"dispatch_slots: rank 0 routes 200 rows to expert 0 \(on rank 0\), over its capacity of 64"
    ):
        layer.check()
    layer.check()


def test_pack_rows_puts_own_slots_in_recv_the_others_in_send_and_drops_the_rest():
    gen = torch.Generator().manual_seed(4)
    tokens, top_k, hidden, rows = 7, 2, 40, 24
    x = torch.randn(tokens, hidden, generator=gen)
    dest = torch.tensor([0, 9, 3, -1, 12, 20, 1, 8, 23, 2, -1, 10, 4, 15], dtype=torch.int64)
    x_send = torch.full((rows, hidden), float("nan"))
    x_recv = torch.full((rows, hidden), float("nan"))
    local = (8, 16)  # this rank's own slots
    moe_slots.pack_rows(x, dest, top_k, x_send, x_recv, local)
    for p, d in enumerate(dest.tolist()):
        if d < 0:
            continue
        into, other = (x_recv, x_send) if local[0] <= d < local[1] else (x_send, x_recv)
        assert torch.equal(into[d], x[p // top_k]), p
        assert torch.isnan(other[d]).all(), p
    written = {d for d in dest.tolist() if d >= 0}
    for d in set(range(rows)) - written:
        assert torch.isnan(x_send[d]).all() and torch.isnan(x_recv[d]).all(), d


def test_combine_rows_weights_and_sums_each_tokens_rows_from_own_or_landed_slots():
    gen = torch.Generator().manual_seed(5)
    tokens, top_k, hidden, rows = 5, 3, 33, 30
    y_send = torch.randn(rows, hidden, generator=gen)
    y_recv = torch.randn(rows, hidden, generator=gen)
    dest = torch.tensor([0, 11, -1, 12, 29, 3, 14, 5, 6, 7, 20, 10, 19, 18, 1], dtype=torch.int64)
    weights = torch.rand(tokens, top_k, generator=gen)
    local = (10, 20)
    y = moe_slots.combine_rows(y_send, y_recv, dest, weights, local)
    ref = torch.zeros(tokens, hidden, dtype=torch.float64)
    for p, d in enumerate(dest.tolist()):
        if d < 0:
            continue
        src = y_send if local[0] <= d < local[1] else y_recv
        ref[p // top_k] += weights.reshape(-1)[p].double() * src[d].double()
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_world_one_layer_from_the_slot_pieces_matches_float64():
    """dispatch_slots and combine_slots at world 1 as the fused op runs them, the runtime's part
    (every chunk local: x_recv holds the packed rows, y_send the outputs) left out."""
    from syncopate.kernels import moe_gemm
    from syncopate.ops import moe_fused

    gen = torch.Generator().manual_seed(6)
    experts, top_k, tokens, hidden, inter, capacity, block = 4, 2, 24, 32, 48, 16, 16
    x = torch.randn(tokens, hidden, generator=gen)
    ids = torch.topk(torch.randn(tokens, experts, generator=gen), top_k, dim=1).indices
    ids[:10, 0] = 1  # expert 1 over capacity: its rows past 16 are dropped (and reported)
    weights = torch.rand(tokens, top_k, generator=gen)
    w_up = torch.randn(experts, hidden, inter, generator=gen) / hidden**0.5
    w_down = torch.randn(experts, inter, hidden, generator=gen) / inter**0.5
    dest, send, _ = moe_slots.slot_destinations(ids, experts, capacity)
    rows = experts * capacity
    x_send, x_recv = torch.zeros(rows, hidden), torch.full((rows, hidden), float("nan"))
    moe_slots.pack_rows(x, dest, top_k, x_send, x_recv, (0, rows))

    def grouped(a, w):
        out = torch.zeros(rows, w.shape[2])
        args, meta = moe_fused.grouped_gemm_args(a, w, out, send, capacity, block, 16, 16, 4, use_tma=False)
        moe_gemm.moe_grouped_gemm[(4,)](*args, **meta)
        return out

    h = torch.nn.functional.silu(grouped(x_recv, w_up))
    y_send = grouped(h, w_down)
    y = moe_slots.combine_rows(y_send, torch.full_like(y_send, float("nan")), dest, weights, (0, rows))
    ref = torch.zeros(tokens, hidden, dtype=torch.float64)
    for p, d in enumerate(dest.tolist()):
        if d < 0:
            continue
        t, g = p // top_k, int(ids.reshape(-1)[p])
        hid = torch.nn.functional.silu(x[t].double() @ w_up[g].double())
        ref[t] += weights.reshape(-1)[p].double() * (hid @ w_down[g].double())
    assert (dest < 0).any()
    torch.testing.assert_close(y.double(), ref, rtol=2e-4, atol=2e-4)
