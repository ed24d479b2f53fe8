"""What the fused MoE calls enqueue, and in which order, with the runtime and the kernel replaced by
recorders (CPU): a call refuses a bad operand before its begin() (a refused call enqueues nothing,
so the epoch never advances without the rest of the call); the dispatch launches its waiting
grouped GEMM and issues the chunks it waits for with Python's cyclic GC held off in between (a
collection there may free another layer's heap, and cudaFree waits for a kernel that waits for
the host); and a dropped layer is freed at once, not by a later collection."""

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import ShapeError  # noqa: E402
from syncopate.launch import ERROR_WORDS  # noqa: E402
from syncopate.ops import moe_fused, moe_slots  # noqa: E402

WORLD, EXPERTS, CAPACITY, K, N, RANK = 3, 2, 32, 16, 32, 1
ROWS = WORLD * EXPERTS * CAPACITY


class _Recorder:
    """A PlanWorkspace that records each step, and whether the cyclic GC was on at the issue."""

    def __init__(self, events):
        self.events = events
        self.epoch_word = torch.ones(1, dtype=torch.int32)
        self.wait_bound_ns = 1_000_000

    def _note(self, name):
        self.events.append(name)

    def begin(self):
        self._note("begin")

    def publish(self):
        self._note("publish")

    def fork(self):
        self._note("fork")

    def issue_chunks(self):
        self._note(("issue", gc.isenabled()))

    def wait_landed(self):
        self._note("wait_landed")

    def end(self):
        self._note("end")

    def timed_out(self):
        return False


@pytest.fixture
def events(monkeypatch):
    """The calls' steps in order; the kernel launch records whether the GC was on."""
    out = []

    def launch(kernel, grid, tables, *args, error=None, **kwargs):
        out.append(("launch", gc.isenabled()))
        return error

    import syncopate.launch

    monkeypatch.setattr(syncopate.launch, "launch", launch)
    return out


def _common(op, events):
    op.ws, op.pending, op.flag = _Recorder(events), False, None
    op.config = moe_fused.GroupedConfig(16, 16, 16, 4, 2)
    op.capacity, op.progs, op.experts, op.rank = CAPACITY, 3, EXPERTS, RANK
    op.tables = moe_fused.slot_tables(WORLD, EXPERTS, CAPACITY, 16, -(-N // 16), RANK)
    op.device_arrays, op.kernel = {}, None
    op.error = torch.zeros(ERROR_WORDS, dtype=torch.int64)
    op.signals = torch.zeros(8, dtype=torch.int32)
    op.dtype, op.device, op.local_in_place = torch.float32, torch.device("cpu"), True
    return op


def _dispatch(events):
    op = _common(moe_fused.MoeFusedDispatch.__new__(moe_fused.MoeFusedDispatch), events)
    op.n = N
    op.x_send, op.x_recv = torch.zeros(ROWS, K), torch.zeros(ROWS, K)
    op.send_counts = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    op.recv_counts = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    return op


def _combine(events):
    op = _common(moe_fused.MoeFusedCombine.__new__(moe_fused.MoeFusedCombine), events)
    op.y_send, op.y_recv = torch.zeros(ROWS, N), torch.zeros(ROWS, N)
    return op


def _dispatch_call(op, w):
    rows = torch.randn(4, K)
    dest = torch.tensor([0, 1, 64, 65])
    return op(rows, dest, torch.zeros(WORLD * EXPERTS, dtype=torch.int32), w, (2, 4))


def _dispatch_slots(op, w):
    x = torch.randn(2, K)
    dest = torch.tensor([0, 64, -1, 65])
    return op.call_slots(x, dest, torch.zeros(WORLD * EXPERTS, dtype=torch.int32), w, 2)


def _combine_call(op, w):
    counts = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    return op(torch.zeros(ROWS, K), counts, w, torch.tensor([0, 64]), (0, 1))


def _combine_slots(op, w):
    counts = torch.zeros(WORLD * EXPERTS, dtype=torch.int32)
    return op.call_slots(torch.zeros(ROWS, K), counts, w, torch.tensor([0, 64]), torch.ones(1, 2))


CALLS = {
    "dispatch": (_dispatch, _dispatch_call, (EXPERTS, K, N)),
    "dispatch_slots": (_dispatch, _dispatch_slots, (EXPERTS, K, N)),
    "combine": (_combine, _combine_call, (EXPERTS, K, N)),
    "combine_slots": (_combine, _combine_slots, (EXPERTS, K, N)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_operand_the_launch_refuses_is_refused_before_begin(name, events):
    """w whose rows do not match the slots' width: the launch's checks (`_cached_args`) refuse
    it by name, and the workspace has seen nothing (no epoch advanced on this rank alone)."""
    make, call, (e, k, n) = CALLS[name]
    op = make(events)
    with pytest.raises(ShapeError, match=r"moe_grouped_gemm: a must be \["):
        call(op, torch.zeros(e, k + 8, n))
    assert events == []


@pytest.mark.parametrize("name", ["dispatch", "dispatch_slots"])
def test_dispatch_holds_off_the_gc_from_its_launch_to_its_chunks(name, events, monkeypatch):
    monkeypatch.setattr(moe_slots, "pack_rows", lambda *args: events.append("pack"))
    make, call, shape = CALLS[name]
    assert gc.isenabled()
    out = call(make(events), torch.zeros(*shape))
    assert gc.isenabled()  # on again after the call
    packed = ["pack"] if name == "dispatch_slots" else []
    assert events == ["begin", *packed, "publish", "fork", ("launch", False), ("issue", False), "end"]
    if name == "dispatch_slots":
        h, recv_counts = out
        assert recv_counts.dtype == torch.int32 and recv_counts.shape == (WORLD * EXPERTS,)


def test_gc_left_off_by_the_caller_stays_off_and_a_failed_launch_turns_it_back_on(events, monkeypatch):
    op = _dispatch(events)
    gc.disable()
    try:
        _dispatch_call(op, torch.zeros(EXPERTS, K, N))
        assert not gc.isenabled()
    finally:
        gc.enable()
    import syncopate.launch

    def fails(*args, **kwargs):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(syncopate.launch, "launch", fails)
    with pytest.raises(RuntimeError, match="launch failed"):
        _dispatch_call(op, torch.zeros(EXPERTS, K, N))
    assert gc.isenabled()


def test_a_dropped_layer_is_freed_at_once():
    """No reference cycle through the layer (its routing check holds values, not the layer):
    reference counting frees it, with its fused ops' heaps, where the caller drops it, never a
    collection at some later allocation (inside another layer's call, see above)."""
    from syncopate.ops.moe import MoeDispatchCombine

    gc.disable()
    try:
        layer = MoeDispatchCombine(None, num_experts=8, top_k=2, capacity=128, mode="fused")
        ref = weakref.ref(layer)
        del layer
        assert ref() is None
    finally:
        gc.enable()
