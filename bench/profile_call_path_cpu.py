"""The Python work of one fused call that replays its graph, on the CPU (no GPU needed).

    TRITON_INTERPRET=1 python bench/profile_call_path_cpu.py [--calls 5000] [--top 15]

A world-1 context of each op is built on the CPU with the runtime's workspace stood in
(tests/python/test_ops_fused.py's FakeWorkspace), its kernel's warm-up and launch made no-ops,
and CUDA graphs faked the way tests/python/test_call_graphs.py fakes them: the capture-status
query, the current device, the raw current stream and the graph launch are cheap Python
functions. Every call after the first is then a "replay", and what is timed and counted is the
call's own Python path: the argument checks, the look at earlier timeouts, the graph lookup and
the launch call. Prints per op: microseconds per call on this CPU (with the fakes: the CUDA calls
a GPU would make cost more), Python function calls per call (cProfile, C functions included)
and where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
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
        def __init__(self, graph, capture_error_mode=None):
            pass

        def __enter__(self):
            pass

        def __exit__(self, *exc):
            pass

    class Launch:
        @staticmethod
        def launch_graph(handle, stream):
            pass

    torch.cuda.CUDAGraph = Graph
    torch.cuda.graph = Capture
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    fake_cuda_graphs()
    for cls_name in ("AgGemm", "GemmRs"):
        ctx, a, b, out = build(cls_name)

        def call():
            ctx(a, b, out=out, check=False)

        call()  # eager + capture
        assert ctx.graphs.captures == 1
        for _ in range(200):
            call()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            call()
        us = (time.perf_counter() - t0) / args.calls * 1e6
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            call()
        prof.disable()
        stats = pstats.Stats(prof)
        per_call = stats.total_calls / args.calls
        print(f"{cls_name}: {us:.2f} us per replayed call on this CPU, {per_call:.1f} Python-level calls per call")
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
