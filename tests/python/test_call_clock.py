"""bench/call_clock.py's profiler-free instrument on the CPU (nothing timed): instrument_op puts
a stamp first in the op's re-captured graph and one right before the fused GEMM, and later calls
still take the fast path (one guarded replay of that graph); the host clock's offset is
interpolated between the calibrations before and after a block; the GEMM's start less the stamp
before it is read from a profile's kernel list, pairing each GEMM with the last stamp before it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import call_clock  # noqa: E402
from syncopate.ops.ag_gemm import AgGemm  # noqa: E402
from syncopate.ops.gemm_ar import GemmAr  # noqa: E402
from syncopate.ops.gemm_rs import GemmRs  # noqa: E402
from test_call_fast_path import Harness  # noqa: E402
from test_ops_fused import cpu_runtime  # noqa: E402,F401  (fixture)

OPS = [(AgGemm, {}), (GemmRs, {"reduce": "chunks"}), (GemmAr, {"reduce": "chunks"})]
IDS = ["AgGemm", "GemmRs-chunks", "GemmAr-chunks"]


class FakeClock:
    """GpuClock's probe, logged into the fake graphs' log (where the kernel launch goes too)."""

    def __init__(self, log):
        self.log = log

    def probe(self, slot):
        self.log.append(("stamp", slot))


@pytest.mark.parametrize("cls,kw", OPS, ids=IDS)
def test_instrument_op_stamps_first_and_right_before_the_gemm_and_keeps_the_fast_path(
    cpu_runtime, monkeypatch, cls, kw
):
    h = Harness(monkeypatch, cls, kw)
    h.warm()
    h.call(check=False)
    assert h.launches() == 1 and h.ctx.graphs.captures == 1
    call_clock.instrument_op(h.ctx, FakeClock(h.fake.log), first_slot=0, gemm_slot=1)
    start = len(h.fake.log)
    h.call(check=False)  # the dropped graph: eager once, then captured with the stamps
    assert h.ctx.graphs.captures == 2 and h.launches() == 1
    new = h.fake.log[start:]
    kernels = [i for i, e in enumerate(new) if e[0] == "kernel"]
    stamps = [(i, e[1]) for i, e in enumerate(new) if e[0] == "stamp"]
    assert len(kernels) == 2, "the eager call and its capture each enqueue the kernel once"
    for k in kernels:  # in each: the first-node stamp before everything, the GEMM stamp just before it
        assert (k - 1, 1) in stamps
        assert any(slot == 0 and i < k - 1 for i, slot in stamps)
    first_stamp = min(i for i, slot in stamps if slot == 0)
    assert not any(isinstance(e, tuple) and e[0] == "kernel" for e in new[:first_stamp])
    checks = h.full_checks
    h.call(check=False)
    assert h.launches() == 2 and h.fake.guarded >= 2 and h.full_checks == checks, "the fast path replays it"


def test_the_offset_is_interpolated_between_the_calibrations():
    before, after = (1_000, 500), (3_000, 700)
    assert call_clock._interpolated(before, after, 1_000) == 500
    assert call_clock._interpolated(before, after, 2_000) == 600
    assert call_clock._interpolated(before, after, 3_000) == 700
    assert call_clock._interpolated((5, 40), (5, 90), 5) == 40  # one instant: the first offset


def test_each_gemm_is_paired_with_the_last_stamp_before_it(monkeypatch):
    events = [
        (1_000, "_stamp_kernel"),  # the graph's first node
        (4_000, "signal_raise_kernel"),
        (6_000, "_stamp_kernel"),  # right before the GEMM
        (8_500, "gemm_tma_kernel_fused"),
        (20_000, "_stamp_kernel"),  # the floor graph: no GEMM after it
        (30_000, "_stamp_kernel"),
        (33_000, "_stamp_kernel"),
        (35_000, "gemm_tma_kernel_fused"),
        (36_000, "gemm_tma_kernel_fused"),  # no stamp of its own: not paired
        (40_000, "nvjet_tst_gemm"),  # another GEMM's name: not looked for
    ]
    monkeypatch.setattr(call_clock, "_kernel_events", lambda prof: events)
    gap = call_clock._gemm_after_stamp_us(None, ("gemm_tma_kernel",))
    assert gap["samples"] == 2
    assert gap["min_us"] == 2.0 and gap["max_us"] == 2.5 and gap["us"] == 2.25
    monkeypatch.setattr(call_clock, "_kernel_events", lambda prof: [(1, "gemm_tma_kernel")])
    assert call_clock._gemm_after_stamp_us(None, ("gemm_tma_kernel",))["samples"] == 0


class BookkeepingClock:
    """GpuClock's interface on the CPU: calibrations give offsets from a list (globaltimer -
    perf_counter_ns), the stamps live in a CPU tensor that the timed functions write."""

    def __init__(self, offsets):
        self.device = torch.device("cpu")
        self.offsets = list(offsets)
        self.offset_ns, self.uncertainty_ns = 0, float("inf")
        self.stamps_dev = torch.zeros(8, dtype=torch.int64)
        self.calibrations = 0

    def calibrate(self):
        self.offset_ns = self.offsets[min(self.calibrations, len(self.offsets) - 1)]
        self.uncertainty_ns = 400.0
        self.calibrations += 1


def test_stamped_starts_times_each_stamp_from_the_host_clock_read_just_before_the_call(monkeypatch):
    import time

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(call_clock, "timer_step_ns", lambda device: 32.0)
    clock = BookkeepingClock([10_000, 10_000])
    calls = []

    def op():  # "stamps" 5 us and 8 us after the host clock read inside the call
        now = time.perf_counter_ns() + clock.offset_ns
        calls.append(now)
        clock.stamps_dev[0] = now + 5_000
        clock.stamps_dev[3] = now + 8_000

    def floor():
        clock.stamps_dev[2] = time.perf_counter_ns() + clock.offset_ns + 2_000

    result = call_clock.stamped_starts(
        {"op": (op, (0, 3)), "floor": (floor, (2,)), "none": (lambda: None, (1,))}, clock, calls=5
    )
    assert len(calls) == 1 + 5, "one warm-up call, then one per round"
    first, gemm = result["op"]["stamps"]
    assert (first["slot"], gemm["slot"]) == (0, 3) and first["samples"] == gemm["samples"] == 5
    assert 5.0 <= first["min_us"] <= first["us"] < 5.0 + 2_000, "never earlier than the stamp's own lead"
    assert 8.0 <= gemm["min_us"] < 8.0 + 2_000
    assert 2.0 <= result["floor"]["stamps"][0]["min_us"] < 2.0 + 2_000
    none = result["none"]["stamps"][0]
    assert none["samples"] == 0 and none["us"] != none["us"], "a stamp never written is no sample (NaN)"
    assert result["op"]["host_offset_uncertainty_us"] == 0.4 and result["op"]["timer_step_us"] == 0.032
    assert clock.calibrations == 2, "calibrated before and after the block"


def test_stamped_starts_reports_the_drift_between_its_calibrations(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(call_clock, "timer_step_ns", lambda device: 32.0)
    clock = BookkeepingClock([10_000, 12_500])
    result = call_clock.stamped_starts({"f": (lambda: None, (0,))}, clock, calls=2)
    assert result["f"]["clock_drift_us"] == 2.5


def test_instrument_op_again_replaces_the_stamps(cpu_runtime, monkeypatch):
    """The GEMM's stamp alone, then the first node's alone (each in its own capture: a stamp is a
    kernel and would delay what follows it), never both stacked."""
    h = Harness(monkeypatch, AgGemm, {})
    h.warm()
    clock = FakeClock(h.fake.log)
    call_clock.instrument_op(h.ctx, clock, first_slot=None, gemm_slot=1)
    start = len(h.fake.log)
    h.call(check=False)
    new = [e for e in h.fake.log[start:] if isinstance(e, tuple) and e[0] in ("stamp", "kernel")]
    assert new == [("stamp", 1), ("kernel",)] * 2, new  # the eager call and its capture
    call_clock.instrument_op(h.ctx, clock, first_slot=0, gemm_slot=None)
    start = len(h.fake.log)
    h.call(check=False)
    new = [e for e in h.fake.log[start:] if isinstance(e, tuple) and e[0] in ("stamp", "kernel")]
    assert new == [("stamp", 0), ("kernel",)] * 2, new
    h.call(check=False)
    assert h.ctx.graphs.captures == 3 and h.launches() == 1, "the re-captured graph replays"


def test_instrument_op_stamps_right_before_the_fork_and_drops_that_stamp_again(cpu_runtime, monkeypatch):
    """fork_slot: the tail's start in a split graph (the fork of the side streams is its first
    work after the wait for the call's start): a stamp right before each fork, none after the
    stamps are replaced without it."""
    h = Harness(monkeypatch, GemmRs, {"reduce": "chunks"})
    h.warm()
    clock = FakeClock(h.fake.log)
    fork = h.ctx.ws.fork

    def logged_fork(*args, **kwargs):
        h.fake.log.append(("fork",))
        return fork(*args, **kwargs)

    h.ctx.ws.fork = logged_fork
    call_clock.instrument_op(h.ctx, clock, first_slot=None, gemm_slot=None, fork_slot=4)
    start = len(h.fake.log)
    h.call(check=False)
    new = [e for e in h.fake.log[start:] if isinstance(e, tuple) and e[0] in ("stamp", "fork")]
    assert new == [("stamp", 4), ("fork",)] * 2, new  # the eager call and its capture
    call_clock.instrument_op(h.ctx, clock, first_slot=None, gemm_slot=1)
    start = len(h.fake.log)
    h.call(check=False)
    new = [e for e in h.fake.log[start:] if isinstance(e, tuple) and e[0] in ("stamp", "fork")]
    # Eagerly the fork comes before the GEMM (and its stamp); captured split, the GEMM's stamp
    # is in the head, the fork in the tail captured after it.
    assert new == [("fork",), ("stamp", 1), ("stamp", 1), ("fork",)], new
