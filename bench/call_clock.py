"""Time from a host call to the start of a kernel it launches, on one clock (bench_call_path.py).

What is measured: for each call, the host clock just before the call (time.perf_counter_ns) and
the kernel's start, both put on the GPU's %globaltimer:
  - host -> globaltimer: a one-thread kernel spins on pinned host memory; the host writes a
    round number there and spins until the kernel has written back the %globaltimer it read
    when it saw it. The kernel's reading lies between the host's write and the host seeing the
    answer, so the offset is known to +- half that round trip; the round with the shortest trip
    is kept (a few microseconds over PCIe: `host_offset_uncertainty_us`).
  - kernel start -> globaltimer: torch.profiler (CUPTI) gives the kernel's start on its own
    clock; in the same profile a probe kernel writes %globaltimer as its first instruction, so
    the profiler's clock is put on globaltimer by the probe's (globaltimer - profiler start),
    whose spread over the probes is reported (`profiler_offset_spread_us`).
Nothing relies on the profiler's CPU timestamps or on CPU/GPU clock alignment done by a
library; the earlier marker-kernel method measured from the start of a marker kernel, which
itself starts only after its own host path, so it could not say when the call was made.
The profiler's callbacks make every CUDA API call a little slower (about 1-2 us each on the
machines measured): a graph replay makes one, an eager call dozens; the same instrument is used
for torch.mm beside each row.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, Iterable, Optional, Tuple

import torch
import triton
import triton.language as tl

import syncopate.language as syl


@triton.jit
def _stamp_kernel(out_ptr, index):
    """Writes %globaltimer to out_ptr[index], first thing."""
    tl.store(out_ptr + index, syl.now_ns())


@triton.jit
def _ping_pong_kernel(flag_ptr, stamps_ptr, rounds, bound_ns):
    """For round i: waits until the host wrote i + 1 into *flag_ptr (pinned host memory), then
    writes %globaltimer into stamps_ptr[i] (pinned too). Each wait gives up after bound_ns."""
    for i in range(rounds):
        start = syl.now_ns()
        seen = tl.load(flag_ptr, volatile=True)
        while (seen != i + 1) & (syl.now_ns() - start < bound_ns):
            seen = tl.load(flag_ptr, volatile=True)
        tl.store(stamps_ptr + i, syl.now_ns())


class GpuClock:
    """The offset between the host's perf_counter_ns and the GPU's %globaltimer (see above)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.flag = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        self.stamps_dev = torch.zeros(64, dtype=torch.int64, device=device)
        self.offset_ns = 0  # globaltimer - perf_counter_ns
        self.uncertainty_ns = float("inf")

    def calibrate(self, rounds: int = 40) -> None:
        stamps = torch.zeros(rounds, dtype=torch.int64, pin_memory=True)
        self.flag.zero_()
        flag, seen = self.flag.numpy(), stamps.numpy()
        torch.cuda.synchronize(self.device)
        _ping_pong_kernel[(1,)](self.flag, stamps, rounds, 100_000_000, num_warps=1)
        time.sleep(0.002)  # the kernel is spinning before the first round
        best = None
        for i in range(rounds):
            before = time.perf_counter_ns()
            flag[0] = i + 1
            while seen[i] == 0:
                if time.perf_counter_ns() - before > 2_000_000_000:
                    raise RuntimeError("GpuClock.calibrate: the ping-pong kernel did not answer within 2 s")
            after = time.perf_counter_ns()
            trip = after - before
            if best is None or trip < best[0]:
                best = (trip, int(seen[i]) - (before + after) // 2)
        torch.cuda.synchronize(self.device)
        self.uncertainty_ns, self.offset_ns = best[0] / 2, best[1]

    def probe(self, index: int) -> None:
        """Launches the stamp kernel on the current stream (its globaltimer lands in stamps_dev)."""
        _stamp_kernel[(1,)](self.stamps_dev, index, num_warps=1)


def _kernel_events(prof):
    from torch.autograd import DeviceType

    events = prof.profiler.kineto_results.events()
    return sorted((e.start_ns(), e.name()) for e in events if e.device_type() == DeviceType.CUDA)


def call_to_start_us(
    fn: Callable[[], object], kernel_names: Iterable[str], clock: GpuClock, calls: int = 10, probes: int = 8
) -> dict:
    """Median microseconds from the host's call of fn() to the start of fn()'s first kernel named
    in kernel_names, the GPU idle before each call; with the calibration's uncertainties."""
    return calls_to_start_us({"fn": (fn, kernel_names)}, clock, calls=calls, probes=probes)["fn"]


def calls_to_start_us(
    fns: Dict[str, Tuple[Callable[[], object], Iterable[str]]], clock: GpuClock, calls: int = 10, probes: int = 8
) -> Dict[str, dict]:
    """call_to_start_us for several calls at once, in one profile and one calibration: round by
    round, each fn once (in the order given), so that drift of the host or the GPU between them
    falls on every one alike; what the benchmark compares (an op's kernel start against the bare
    replay of its own graph and against torch.mm's) is measured side by side. fns: name ->
    (fn, kernel names to look for after its call)."""
    from torch.profiler import ProfilerActivity, profile

    names = {key: tuple(kernel_names) for key, (_, kernel_names) in fns.items()}
    for fn, _ in fns.values():
        fn()  # anything lazily initialised, outside the measurement
    clock.probe(0)
    torch.cuda.synchronize()
    clock.calibrate()
    clock.stamps_dev.zero_()
    host = []  # (perf_counter_ns just before the call, its fn's key), in call order
    probe_host = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for j in range(probes):
            torch.cuda.synchronize()
            probe_host.append(time.perf_counter_ns())
            clock.probe(j)
        for _ in range(calls):
            for key, (fn, _) in fns.items():
                torch.cuda.synchronize()
                host.append((time.perf_counter_ns(), key))
                fn()
        torch.cuda.synchronize()
    gpu = _kernel_events(prof)
    stamped = clock.stamps_dev[:probes].tolist()
    probe_starts = [t for t, name in gpu if "_stamp_kernel" in name]
    if len(probe_starts) != probes:
        error = {"us": float("nan"), "samples": 0, "error": f"{len(probe_starts)} probe kernels seen of {probes}"}
        return {key: dict(error) for key in fns}
    to_global = [g - t for g, t in zip(stamped, probe_starts)]
    prof_offset = statistics.median(to_global)
    starts = [(t + prof_offset, name) for t, name in gpu]
    # Each call's kernel: the first one named for its fn from just before the call (the
    # calibration's uncertainty) to the next call; a negative delay would show a calibration
    # gone wrong. Every call synchronizes before the next, so a window holds one call's kernels.
    slack = 2 * clock.uncertainty_ns + 1_000
    calls_global = [h + clock.offset_ns for h, _ in host] + [float("inf")]
    delays = {key: [] for key in fns}
    for i, (_, key) in enumerate(host):
        mine = [
            s
            for s, name in starts
            if calls_global[i] - slack <= s < calls_global[i + 1] - slack and any(k in name for k in names[key])
        ]
        if mine:
            delays[key].append((mine[0] - calls_global[i]) / 1e3)
    # The probe itself, from its stamp alone (no profiler clock): a Triton launch's own path.
    probe_delays = [(g - (h + clock.offset_ns)) / 1e3 for g, h in zip(stamped, probe_host)]
    return {
        key: {
            "us": statistics.median(d) if d else float("nan"),
            "min_us": min(d) if d else float("nan"),
            "samples": len(d),
            "triton_probe_us": statistics.median(probe_delays),
            "host_offset_uncertainty_us": clock.uncertainty_ns / 1e3,
            "profiler_offset_spread_us": (max(to_global) - min(to_global)) / 1e3,
        }
        for key, d in delays.items()
    }


# -- The profiler-free instrument (2026-11-25 evening) ----------------------------------------
#
# The profiler's numbers above carry its own cost: every CUDA API call made while it records
# goes through CUPTI's callbacks, and the kernel starts it reports come from its activity
# records. What follows measures without it. Every timed call stamps %globaltimer from the
# device itself into clock.stamps_dev (a one-CTA kernel whose first instruction reads the
# timer): for an op, one stamp captured as the first node of its graph and one on the same
# stream right before the fused GEMM's launch (instrument_op, each in its own capture: a
# stamp is a kernel, and the first one would delay the second); for the floor, a graph holding
# nothing but a stamp, replayed through the same runtime call as the ops' fast path
# (StampGraph). Each call starts with the GPU drained (a device-wide synchronize) and is timed
# from the host clock read just before it; the host clock is put on globaltimer by ping-pong
# calibrations before and after each block, interpolated in between (their difference is the
# drift, reported), and the timer's own step is measured (timer_step_ns). The stamp right
# before the GEMM (in a graph with no other stamp) starts when the GEMM's predecessors on the
# stream are done, i.e. where the GEMM would start without it; with it, the GEMM starts after
# the stamp has run, so the GEMM's start in the uninstrumented graph is about the stamp and at
# most the stamp + the gap to the GEMM, which a profiled run of the same graph measures
# (gemm_after_stamp_us: two device-side starts on one clock, which the profiler's host-side
# callbacks do not move).


@triton.jit
def _timer_steps_kernel(out_ptr, steps, bound_ns):
    """Writes `steps` successive distinct %globaltimer values (each wait bounded by bound_ns)."""
    start = syl.now_ns()
    last = start
    for i in range(steps):
        t = syl.now_ns()
        while (t == last) & (t - start < bound_ns):
            t = syl.now_ns()
        tl.store(out_ptr + i, t)
        last = t


def timer_step_ns(device: torch.device, steps: int = 64) -> float:
    """The median step of %globaltimer on this GPU, in ns (its resolution: a stamp is late by
    up to one step)."""
    out = torch.zeros(steps, dtype=torch.int64, device=device)
    _timer_steps_kernel[(1,)](out, steps, 10_000_000, num_warps=1)
    torch.cuda.synchronize(device)
    values = out.tolist()
    diffs = [b - a for a, b in zip(values, values[1:]) if b > a]
    return float(statistics.median(diffs)) if diffs else float("nan")


class StampGraph:
    """A CUDA graph of one stamp kernel (into clock.stamps_dev[slot]), replayed the way an op's
    fast path replays its graph (ops/call_graphs._Graph: one runtime call, cudaGraphLaunch on
    the current stream): the floor of any call that launches a graph."""

    def __init__(self, clock: GpuClock, slot: int):
        from syncopate.ops.call_graphs import _Graph

        clock.probe(slot)  # compiled and loaded outside the capture
        torch.cuda.synchronize(clock.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            clock.probe(slot)
        self._graph = _Graph(graph, torch.cuda.current_device())
        self.replay = self._graph.replay


def instrument_op(
    ctx, clock: GpuClock, first_slot: Optional[int] = 0, gemm_slot: Optional[int] = 1, fork_slot: Optional[int] = None
) -> None:
    """Makes every later call of the op context `ctx` stamp globaltimer as its first device work
    (clock.stamps_dev[first_slot]; None: no such stamp) and right before its fused GEMM on the
    same stream ([gemm_slot]; None: none); its graphs are dropped, so the next call captures
    them with the stamps (a call that repeats it then takes the fast path as before). Called
    again, it replaces the earlier stamps (it wraps the context's own run and launch, kept on
    the first call). Benchmark use only: each stamp is one more small kernel on the stream, so
    the first-node stamp delays everything after it, the GEMM's stamp included; the GEMM's
    start is measured with the GEMM's stamp alone (bench_call_path.stamped_measurement).
    fork_slot: a stamp right before the fork of the plan's side streams (in a split graph, the
    tail's first work after its wait for the call's start: when the chunks can begin; in one
    graph or eagerly it sits before the GEMM, so it is for split contexts only)."""
    from syncopate.ops.call_graphs import FusedCall

    graphs, gemm = ctx.graphs, ctx.gemm
    originals = ctx.__dict__.setdefault("_unstamped", (graphs.run, gemm.launch))
    run, launch = originals

    def stamped_run(key, enqueue, under_capture=None):
        if first_slot is None:
            return run(key, enqueue, under_capture)
        if isinstance(enqueue, FusedCall):  # kept a FusedCall: its graph is split as the op's

            def start():
                clock.probe(first_slot)
                original_start()

            original_start = enqueue.start
            enqueue.start = start
            return run(key, enqueue, under_capture)

        def work():
            clock.probe(first_slot)
            enqueue()

        return run(key, work, under_capture)

    def stamped_launch(*args, **kwargs):
        clock.probe(gemm_slot)
        return launch(*args, **kwargs)

    ws = ctx.ws
    fork = ctx.__dict__.setdefault("_unstamped_fork", ws.fork)

    def stamped_fork(*args, **kwargs):
        clock.probe(fork_slot)
        return fork(*args, **kwargs)

    graphs.run = stamped_run
    gemm.launch = stamped_launch if gemm_slot is not None else launch
    ws.fork = stamped_fork if fork_slot is not None else fork
    graphs.clear()


def _interpolated(before: Tuple[int, int], after: Tuple[int, int], host_ns: int) -> float:
    """globaltimer - perf_counter_ns at host_ns, linear between two calibrations (host ns, offset)."""
    (t0, o0), (t1, o1) = before, after
    if t1 == t0:
        return float(o0)
    return o0 + (o1 - o0) * (host_ns - t0) / (t1 - t0)


def stamped_starts(
    fns: Dict[str, Tuple[Callable[[], object], Tuple[int, ...]]],
    clock: GpuClock,
    calls: int = 15,
    profiled: bool = False,
    gap_kernels: Iterable[str] = (),
) -> Dict[str, dict]:
    """Microseconds from each call to each of its stamps, no profiler (profiled=True: the same
    inside torch.profiler, to measure what the profiler itself adds). fns: name -> (fn, slots):
    fn's device work stamps clock.stamps_dev[slot] for each slot. Round by round each fn once,
    the GPU drained before each call. Per name and slot: median and min over the calls; per
    block: the calibrations' uncertainty, the drift between them and the timer's step.
    gap_kernels (profiled only): kernel names whose start less the last stamp kernel's start
    before it is reported as gemm_after_stamp_us (the stamp before the GEMM, then the GEMM)."""
    import contextlib

    from torch.profiler import ProfilerActivity, profile

    for fn, _ in fns.values():
        fn()  # anything lazily initialised (a graph's capture), outside the measurement
    torch.cuda.synchronize(clock.device)
    step_ns = timer_step_ns(clock.device)
    clock.calibrate()
    before = (time.perf_counter_ns(), clock.offset_ns)
    unc_before = clock.uncertainty_ns
    samples = {key: [] for key in fns}  # key -> [(host ns, [stamps])]
    stamps = clock.stamps_dev
    recorder = profile(activities=[ProfilerActivity.CUDA]) if profiled else contextlib.nullcontext()
    with recorder as prof:
        for _ in range(calls):
            for key, (fn, slots) in fns.items():
                stamps.zero_()
                torch.cuda.synchronize(clock.device)  # the GPU idle at the call
                host = time.perf_counter_ns()
                fn()
                torch.cuda.synchronize(clock.device)
                values = stamps[: max(slots) + 1].tolist()
                samples[key].append((host, [values[s] for s in slots]))
    clock.calibrate()
    after = (time.perf_counter_ns(), clock.offset_ns)
    uncertainty_us = max(unc_before, clock.uncertainty_ns) / 1e3
    drift_us = (after[1] - before[1]) / 1e3
    gap = None
    if profiled and gap_kernels:
        gap = _gemm_after_stamp_us(prof, tuple(gap_kernels))
    result = {}
    for key, (_, slots) in fns.items():
        per_slot = []
        for j, slot in enumerate(slots):
            delays = [
                (vals[j] - (host + _interpolated(before, after, host))) / 1e3
                for host, vals in samples[key]
                if vals[j] != 0
            ]
            per_slot.append(
                {
                    "slot": slot,
                    "us": statistics.median(delays) if delays else float("nan"),
                    "min_us": min(delays) if delays else float("nan"),
                    "max_us": max(delays) if delays else float("nan"),
                    "samples": len(delays),
                }
            )
        result[key] = {
            "stamps": per_slot,
            "profiled": profiled,
            "host_offset_uncertainty_us": uncertainty_us,
            "clock_drift_us": drift_us,
            "timer_step_us": step_ns / 1e3,
            "calls": calls,
        }
        if gap is not None:
            result[key]["gemm_after_stamp_us"] = gap
    return result


def _gemm_after_stamp_us(prof, kernel_names: Tuple[str, ...]) -> dict:
    """From a profile: each kernel named in kernel_names, its start less the start of the last
    stamp kernel before it (both on the profiler's device clock); median, min and max in us."""
    events = _kernel_events(prof)
    gaps, last_stamp = [], None
    for start, name in events:
        if "_stamp_kernel" in name:
            last_stamp = start
        elif last_stamp is not None and any(k in name for k in kernel_names):
            gaps.append((start - last_stamp) / 1e3)
            last_stamp = None
    if not gaps:
        return {"us": float("nan"), "samples": 0}
    return {"us": statistics.median(gaps), "min_us": min(gaps), "max_us": max(gaps), "samples": len(gaps)}
