"""The Python work of one fused call that replays its graph, on the CPU (no GPU needed).

    TRITON_INTERPRET=1 python bench/profile_call_path_cpu.py [--calls 5000] [--top 15] [--no-profile]

A world-1 context of each op is built on the CPU with the runtime's workspace stood in
(tests/python/test_ops_fused.py's FakeWorkspace), its kernel's warm-up and launch made no-ops,
and CUDA graphs faked the way tests/python/test_call_graphs.py fakes them: the capture-status
query, the current device, the raw current stream, the graph launch and the guarded replay
are cheap Python functions. Every call after the first is then a "replay", and what is timed
and counted is the call's own Python path, two ways:
  fast  the path a repeated call takes (OpContext._fast_call: the operands' metadata compared
        with what the checks accept, one guarded replay that also asks the capture status and
        looks for earlier timeouts);
  full  the path every call took before it (the argument checks, check_out, the capture-status
        query, the look at earlier timeouts, the graph lookup and the launch), kept for first
        calls, new addresses, check=True, FP8, and whatever the fast path declines;
and `bare`, the fake launch alone (what is left of a call that does nothing but replay).
Batches of each alternate, timed on the thread's CPU clock, and the fastest is printed (this
machine is shared: wall-clock medians moved by 2-4x between runs). Prints per op: microseconds per call on this CPU (with the fakes: the CUDA calls a
GPU would make cost more), Python function calls per call (cProfile, C functions included)
and where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(HERE.parent / "calib" / "h200.json"))

import torch  # noqa: E402


def fake_cuda_graphs():
    """torch.cuda's capture status, devices, streams and graphs, and the runtime's launch."""
    import syncopate.runtime as rt

    class Graph:
        def raw_cuda_graph_exec(self):
            return id(self)

    class Capture:
        def __init__(self, graph, stream=None, capture_error_mode=None):
            pass

        def __enter__(self):
            pass

        def __exit__(self, *exc):
            pass

    class Launch:
        @staticmethod
        def launch_graph(handle, stream):
            pass

        @staticmethod
        def replay_graph_unless(handle, stream, monitor, flag):
            return not (monitor.timed_out or flag.value)

        @staticmethod
        def launch_split_graph(head, tail, side, done, tail_records_done, stream):
            pass

        @staticmethod
        def replay_split_graph_unless(head, tail, side, done, tail_records_done, stream, monitor, flag):
            return not (monitor.timed_out or flag.value)

    class Stream:  # the split graphs' side stream
        cuda_stream = 9

        def __init__(self, device=None, priority=0):
            pass

        @staticmethod
        def priority_range():
            return (0, -5)

        def wait_event(self, event):
            pass

    class Event:
        cuda_event = 11

        def __init__(self, external=False):
            pass

        def record(self, stream=None):
            pass

    torch.cuda.CUDAGraph = Graph
    torch.cuda.graph = Capture
    torch.cuda.Stream = Stream
    torch.cuda.Event = Event
    torch.cuda.is_available = lambda: True
    torch.cuda.is_current_stream_capturing = lambda: False
    torch.cuda.current_device = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 7
    rt.require_runtime = lambda: Launch()


def build(cls_name: str):
    import syncopate.runtime
    from syncopate.ops import fused_gemm
    from syncopate.ops.ag_gemm import AgGemm
    from syncopate.ops.gemm_ar import GemmAr
    from syncopate.ops.gemm_rs import GemmRs
    from test_ops_fused import FakeWorkspace

    syncopate.runtime.PlanWorkspace = FakeWorkspace
    fused_gemm.num_sms = lambda device: 8
    fused_gemm.FusedGemm.warm_up = lambda self, *a, **k: None
    cls = {"AgGemm": AgGemm, "GemmRs": GemmRs, "GemmAr": GemmAr}[cls_name]
    m, k, n = 64, 48, 40
    kw = {} if cls is AgGemm else {"reduce": "chunks"}
    ctx = cls(
        None,
        m=m,
        k=k,
        n=n,
        dtype=torch.float16,
        device="cpu",
        mode="fused",
        backend="copy-engine",
        algorithm="direct",
        split=1,
        tile_order="row-major",
        **kw,
    )
    ctx.gemm.launch = lambda *a, **k: None
    ctx.gemm.timed_out = lambda: False
    ctx.gemm.copy_flag_to_host = lambda: None
    ctx.graphs.enabled = True  # what a CUDA context has
    a = torch.randn(m, k).half()
    b = torch.randn(k, n).half()
    out = torch.empty(m, n, dtype=torch.float16)
    return ctx, a, b, out


class _Watched:
    """The runtime's WaitMonitor (`timed_out`) and the kernel's HostFlag (`value`), as the
    bindings expose them: what the fast path hands the guarded replay."""

    timed_out = False
    value = 0


def _batches(fns: dict, calls: int, rounds: int = 9) -> dict:
    """Microseconds per call of each fn, batches of `calls` alternating between them: the
    fastest batch, on this thread's CPU clock (time.thread_time_ns: time the thread was not
    running, which another process's load on this shared machine adds, is left out; the median
    of wall-clock batches moved by 2-4x between runs)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.thread_time_ns()
            for _ in range(calls):
                fn()
            times[name].append((time.thread_time_ns() - t0) / calls / 1e3)
    return {name: min(ts) for name, ts in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--no-profile", action="store_true", help="timings only, no cProfile listing")
    args = parser.parse_args()
    fake_cuda_graphs()
    from syncopate.ops.call_graphs import _Graph

    for cls_name in ("AgGemm", "GemmRs", "GemmAr"):
        calls = {}
        for path in ("fast", "full"):
            ctx, a, b, out = build(cls_name)
            ctx.ws.monitor = _Watched()
            ctx.gemm.flag_on_host = _Watched()
            if path == "full":
                ctx._fast_path = lambda: None  # every call takes the full path

            def call(ctx=ctx, a=a, b=b, out=out):
                ctx(a, b, out=out, check=False)

            call()  # eager + capture
            assert ctx.graphs.captures == 1
            for _ in range(200):
                call()
            assert (ctx._fast is not None) == (path == "fast")
            calls[path] = call
        graph = next(iter(ctx.graphs._graphs.values()))
        assert isinstance(graph, _Graph)
        calls["bare"] = graph.replay
        us = _batches(calls, max(1, args.calls // 9))
        print(
            f"{cls_name}: per replayed call on this CPU: fast {us['fast']:.2f} us, full {us['full']:.2f} us, "
            f"bare replay {us['bare']:.2f} us"
        )
        if args.no_profile:
            continue
        for path in ("fast", "full"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                calls[path]()
            prof.disable()
            stats = pstats.Stats(prof)
            print(f"{cls_name} {path}: {stats.total_calls / args.calls:.1f} Python-level calls per call")
            stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
