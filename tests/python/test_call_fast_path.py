"""The fast path of a repeated call (OpContext._fast_call) on the CPU, for every op.

Once a context has captured a graph for a set of operand addresses, a call with the same
addresses compares the operands' dtype, shape, strides and device with what the full checks
accept and replays the graph through one guarded runtime call, which also reads the capture
status and looks for earlier timeouts (runtime/graph_launch.hpp). These tests pin that it is
taken (no full checks, no torch capture query, one guarded replay), that it never weakens the
checks (a tensor at a cached address with the wrong shape, dtype, strides, layout or device is
refused with the full path's own error, nothing launched), and that it declines to the full
path under the caller's capture, with an earlier timeout to report, with check=True and for
new addresses. CUDA graphs and the runtime are faked (test_call_graphs.FakeGraphs), the
workspace too (test_ops_fused.FakeWorkspace); the kernel launch is a no-op: what is tested is
which path a call takes and what it enqueues or raises, not the GEMM."""

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import ShapeError, UserError, WaitTimeoutError  # noqa: E402
from syncopate.ops import fused_gemm  # noqa: E402
from syncopate.ops.ag_gemm import AgGemm  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402
from syncopate.ops.gemm_rs import GemmRs  # noqa: E402
from test_call_graphs import FakeGraphs, Watched  # noqa: E402
from test_ops_fused import FakeWorkspace, cpu_runtime  # noqa: E402,F401  (fixture)

M, K, N = 64, 48, 40
OPS = [(AgGemm, {}), (GemmRs, {"reduce": "chunks"}), (GemmAr, {"reduce": "chunks"})]
IDS = ["AgGemm", "GemmRs-chunks", "GemmAr-chunks"]


class Harness:
    """A fused world-1 context whose calls replay (faked) graphs, with the records the guarded
    replay watches, and counters of the full path's checks and enqueues."""

    def __init__(self, monkeypatch, cls, kw, layout="kn"):
        self.fake = FakeGraphs(monkeypatch)
        monkeypatch.setattr(fused_gemm.FusedGemm, "warm_up", lambda self, *args, **kwargs: None)
        ctx = cls(
            None,
            m=M,
            k=K,
            n=N,
            dtype=torch.float16,
            device="cpu",
            mode="fused",
            backend="copy-engine",
            algorithm="direct",
            split=1,
            tile_order="row-major",
            b_layout=layout,
            **kw,
        )
        assert isinstance(ctx.ws, FakeWorkspace)
        ctx.graphs.enabled = True  # what a context on a CUDA device has
        ctx.ws.monitor = Watched()  # the runtime's WaitMonitor
        ctx.gemm.flag_on_host = Watched()  # the kernel's HostFlag
        ctx.gemm.launch = lambda *args, **kwargs: self.fake.log.append(("kernel",))
        ctx.gemm.copy_flag_to_host = lambda: None
        self.full_checks = 0
        check_operands = ctx._check_operands

        def counted(*args, **kwargs):
            self.full_checks += 1
            return check_operands(*args, **kwargs)

        ctx._check_operands = counted
        self.ctx = ctx
        gen = torch.Generator().manual_seed(5)
        a_rows = ctx._operand_shapes()[0][0]
        self.a = torch.randn(a_rows, K, generator=gen).half()
        self.b = torch.randn(K, N, generator=gen).half() if layout == "kn" else torch.randn(N, K).half().t()
        self.out = torch.empty(ctx._operand_shapes()[1], dtype=torch.float16)

    def launches(self):
        return sum(1 for e in self.fake.log if e[0] == "launch")

    def enqueued(self):
        return sum(1 for e in self.fake.log if e[0] == "kernel")

    def call(self, a=None, b=None, out="same", **kw):
        out = self.out if isinstance(out, str) else out
        return self.ctx(self.a if a is None else a, self.b if b is None else b, out=out, **kw)

    def warm(self):
        """The first call: eager, then captured; the next is the first fast one."""
        self.call(check=False)
        assert self.ctx.graphs.captures == 1 and self.ctx._fast is not None
        assert self.enqueued() == 2 and self.launches() == 0  # the call itself, then its capture


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_a_repeated_call_is_one_guarded_replay_without_the_full_checks(cpu_runtime, monkeypatch, cls, kw, layout):
    h = Harness(monkeypatch, cls, kw, layout)
    h.warm()
    checks, queries = h.full_checks, h.fake.queries
    for i in range(1, 4):
        assert h.call(check=False) is h.out
        assert h.launches() == i and h.fake.guarded == i
    assert h.full_checks == checks, "a repeated call must not run the full checks"
    assert h.fake.queries == queries, "the capture status is read by the guarded replay, not by torch"
    assert h.enqueued() == 2 and h.ctx.graphs.captures == 1


def _bad_operands(h, cls):
    """(what, a, b, out, error, message) at the cached addresses: each passes the address lookup
    and must still be refused by the full path's own check."""
    a, b, out = h.a, h.b, h.out
    rows, cols = a.shape
    flat = a.reshape(-1)
    other_layout = b.as_strided((K, N), (1, K) if b.stride() == (N, 1) else (N, 1))
    yield "a, more rows", flat[: (rows - 1) * cols].view(rows - 1, cols), b, out, ShapeError, "expected"
    yield "a, other dtype", a.view(torch.bfloat16), b, out, UserError, "operands must be torch.float16"
    yield "a, strided", a.as_strided((rows, cols), (1, rows)), b, out, UserError, "must be contiguous"
    yield "b, other layout", a, other_layout, out, UserError, "b has layout"
    yield "b, other dtype", a, b.view(torch.bfloat16), out, UserError, "operands must be torch.float16"
    yield "out, other dtype", a, b, out.view(torch.bfloat16), UserError, "out must be a contiguous"
    yield "out, fewer rows", a, b, out[:-1], UserError, "out must be a contiguous"
    yield "out, strided", a, b, out.as_strided(out.shape, (1, out.shape[0])), UserError, "out must be a contiguous"
    yield "a, on another device", a.to("meta"), b, out, UserError, "operands must be on cpu"


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_the_fast_path_refuses_what_the_full_checks_refuse(cpu_runtime, monkeypatch, cls, kw):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    h.call(check=False)
    assert h.launches() == 1
    for what, a, b, out, error, message in _bad_operands(h, cls):
        if what != "a, on another device":  # the same address: the graph lookup alone would match
            assert (a.data_ptr(), b.data_ptr(), out.data_ptr()) == (h.a.data_ptr(), h.b.data_ptr(), h.out.data_ptr())
        with pytest.raises(error, match=message):
            h.ctx(a, b, out=out, check=False)
        assert h.launches() == 1 and h.enqueued() == 2, f"{what}: nothing may run"
    h.call(check=False)  # the good operands still replay
    assert h.launches() == 2


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_under_the_callers_capture_a_repeated_call_is_recorded_into_it(cpu_runtime, monkeypatch, cls, kw):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    h.fake.capturing = True  # the caller's torch.cuda.graph
    h.call(check=False)
    assert h.launches() == 0, "no replay of the context's own graph inside the caller's capture"
    assert h.enqueued() == 3, "the call's work is recorded into the caller's capture"
    assert h.ctx.graphs.captures == 1
    h.fake.capturing = False
    h.call(check=False)
    assert h.launches() == 1


@pytest.mark.parametrize("where", ["kernel", "runtime"])
@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_an_earlier_timeout_is_raised_before_a_repeated_call_launches_anything(
    cpu_runtime, monkeypatch, cls, kw, where
):
    """The host sees a timeout of an earlier call (the kernel's flag copied to pinned memory, or
    the runtime's mapped record): the guarded replay launches nothing and the full path raises
    it, naming the chunk, as report_timeouts always did; the next call replays again."""
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    if where == "kernel":
        slot = h.ctx.gemm.tables.wait_slots[0] if h.ctx.gemm.tables.wait_slots else 0
        h.ctx.gemm.error[:6] = torch.tensor([1, 0, slot, 5, 0, 3])  # what a tile's wait writes
        h.ctx.gemm.flag_on_host.value = 1  # and what the call's flag copy brought to the host
        expected = r"tile 3 waited on slot"
    else:
        h.ctx.ws.monitor.timed_out = True

        def runtime_check(synchronize=True):
            h.ctx.ws.monitor.timed_out = False  # check() reads and clears
            raise WaitTimeoutError("rank 0: landing slot 2 (chunk 1) expected >= 5, seen 4")

        monkeypatch.setattr(h.ctx.ws, "timed_out", lambda: h.ctx.ws.monitor.timed_out)
        monkeypatch.setattr(h.ctx.ws, "check", runtime_check)
        expected = r"^rank 0: landing slot 2 \(chunk 1\)"
    with pytest.raises(WaitTimeoutError, match=expected):
        h.call(check=False)
    assert h.launches() == 0 and h.enqueued() == 2, "raised before anything was launched or enqueued"
    h.call(check=False)
    assert h.launches() == 1


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_new_addresses_check_true_and_no_out_take_the_full_path(cpu_runtime, monkeypatch, cls, kw):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    checks = h.full_checks
    other_out = torch.empty_like(h.out)
    h.call(out=other_out, check=False)  # new addresses: checked, run eagerly, captured
    assert h.full_checks == checks + 1 and h.ctx.graphs.captures == 2 and h.launches() == 0
    h.call(out=other_out, check=False)
    assert h.full_checks == checks + 1 and h.launches() == 1
    h.call(check=True)  # check=True synchronizes: the full path, replaying the graph it finds
    assert h.full_checks == checks + 2 and h.launches() == 2 and ("check",) in h.ctx.ws.log
    got = h.call(out=None, check=False)  # a new output each call, of the checked shape and dtype
    assert tuple(got.shape) == tuple(h.out.shape) and got.dtype == torch.float16


def test_fp8_and_torch_fallback_contexts_have_no_fast_path(cpu_runtime, monkeypatch):
    h = Harness(monkeypatch, AgGemm, {})
    h.warm()
    monkeypatch.setattr(h.ctx, "fp8", True)
    assert h.ctx._fast_path() is None
    monkeypatch.setattr(h.ctx, "fp8", False)
    h.ctx.gemm.flag_on_host = None  # a kernel record the guarded replay could not watch
    assert h.ctx._fast_path() is None
    del h.ctx.ws.monitor
    h.ctx.gemm.flag_on_host = Watched()
    assert h.ctx._fast_path() is None


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_graphs_turned_off_after_a_capture_make_every_call_eager(cpu_runtime, monkeypatch, cls, kw):
    """tests/gpu/test_graphs_gpu.py interleaves eager calls by turning the context's graphs off:
    the fast path must not replay a graph then."""
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    h.ctx.graphs.enabled = False
    h.call(check=False)
    assert h.launches() == 0 and h.enqueued() == 3
    h.ctx.graphs.enabled = True
    h.call(check=False)
    assert h.launches() == 1 and h.enqueued() == 3


class _CountedReads:
    """Counts Tensor.is_contiguous calls (each operand's comparison makes one)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = torch.Tensor.is_contiguous

        def counted(t, *args, **kwargs):
            self.n += 1
            return real(t, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "is_contiguous", counted)


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_operands_that_passed_are_not_read_again_until_changed_in_place(cpu_runtime, monkeypatch, cls, kw):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    reads = _CountedReads(monkeypatch)
    h.call(check=False)  # the first fast call compares all three and remembers them
    assert h.launches() == 1 and reads.n >= 2
    reads.n = 0
    for i in range(2, 5):
        h.call(check=False)
        assert h.launches() == i
    assert reads.n == 0, "the same tensor objects, unchanged: no metadata read"
    h.a.add_(0)  # an in-place write bumps a's version counter: a is compared again (b and out not)
    h.call(check=False)
    assert h.launches() == 5 and reads.n == 1
    reads.n = 0
    h.call(check=False)
    assert h.launches() == 6 and reads.n == 0
    fresh = h.a.view(h.a.shape)  # another object at the same address: compared
    h.call(a=fresh, check=False)
    assert h.launches() == 7 and reads.n == 1


def _changed_in_place(h):
    """(what, change, error, message): each changes a remembered operand in place, keeping its
    object and its address; the fast path must see it and the full path refuse it."""
    rows, cols = h.a.shape
    yield "a, strided", lambda: h.a.as_strided_((rows, cols), (1, rows)), UserError, "must be contiguous"
    yield "a, fewer rows", lambda: h.a.resize_(rows - 1, cols), ShapeError, "expected"
    yield "b, transposed", lambda: h.b.t_(), ShapeError, "expected"
    yield "out, fewer rows", lambda: h.out.resize_(h.out.shape[0] - 1, h.out.shape[1]), UserError, "out must be"


@pytest.mark.parametrize("case", [c[0] for c in _changed_in_place(type("H", (), {"a": torch.empty(2, 2)})())])
@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_an_operand_changed_in_place_at_its_address_is_refused(cpu_runtime, monkeypatch, cls, kw, case):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    h.call(check=False)
    h.call(check=False)  # remembered, then replayed without reads
    assert h.launches() == 2
    what, change, error, message = next(c for c in _changed_in_place(h) if c[0] == case)
    ptrs = (h.a.data_ptr(), h.b.data_ptr(), h.out.data_ptr())
    change()
    assert (h.a.data_ptr(), h.b.data_ptr(), h.out.data_ptr()) == ptrs, "the same addresses"
    with pytest.raises(error, match=message):
        h.call(check=False)
    assert h.launches() == 2 and h.enqueued() == 2, f"{what}: nothing may run"


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_inference_tensors_take_the_fast_path_compared_each_call(cpu_runtime, monkeypatch, cls, kw):
    """Tensors made under torch.inference_mode() have no version counter: never remembered,
    compared on every call, and refused like any other at a cached address."""
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    with torch.inference_mode():
        a, b, out = h.a.clone(), h.b.clone(), h.out.clone()
        h.call(a=a, b=b, out=out, check=False)  # new addresses: full path, captured
        assert h.ctx.graphs.captures == 2 and h.launches() == 0
        reads = _CountedReads(monkeypatch)
        for i in range(1, 4):
            h.call(a=a, b=b, out=out, check=False)
            assert h.launches() == i
        assert reads.n == 3 * 3, "every call compares all three"
        assert h.ctx._fast.seen == [None, None, None]
        with pytest.raises(UserError, match="operands must be torch.float16"):
            h.call(a=a.view(torch.bfloat16), b=b, out=out, check=False)
    assert h.launches() == 3
