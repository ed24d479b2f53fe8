"""The call path of the fused ops: host time per call and time from the call to the fused kernel.

    python bench/bench_call_path.py [--out-dir bench/results] [--eager]                 # world 1
    torchrun --nproc_per_node=2 bench/bench_call_path.py [--out-dir ...]               # world 2

Per op variant (AgGemm; GemmRs with reduce-add chunks and with the staged epilogue; GemmAr with
chunks) x shape (256 to 8192 rows), each with its own CUDA graph (graph=True, the default) and,
with --eager, eager (graph=False), fused, copy-engine:
  host_us          host time of one call, back to back with no synchronisation (median of
                   batches of calls, each batch timed with a host clock after a synchronize);
  kernel_start_us  from the call (the host clock just before it) to the start of the fused kernel,
                   the GPU idle before each call: both put on the GPU's %globaltimer by
                   bench/call_clock.py (a host<->GPU ping-pong, and a probe kernel stamping
                   globaltimer inside the same profile), median over --start-calls calls, with
                   the calibration's uncertainty;
  stamps           the same without the profiler (call_clock.py, "The profiler-free instrument"):
                   the op's graph re-captured with a %globaltimer stamp as its first node and
                   one right before the GEMM, the GPU drained before each call; the GEMM's start
                   lies between that stamp and the stamp plus the gap to the GEMM measured in a
                   profiled run of the same graph; floors on the same clock: a graph of one
                   stamp launched as the fast path launches, and an eager Triton stamp; and
                   what the profiler adds to each;
beside the bare replay of the op's own graph (its host time and its kernel start: what is left
of a call that does nothing but launch the graph), torch.mm's host time and kernel start (the
same local GEMM), and, where ranks have their own GPUs, the host time of the NCCL collective
(what the sequential path issues). The kernel starts of the op, the bare replay and torch.mm
(and the eager context) are measured side by side: call by call in turn, in one profile, on one
calibration (call_clock.calls_to_start_us), so drift of the host or the GPU falls on all alike.
--variants picks rows: AgGemm (its own plan, which reads the caller's shard in place),
AgGemm-copy (a plan without an input: the shard is copied into the heap before the GEMM, the
path before 2026-11-25), GemmRs-chunks, GemmRs-epilogue, GemmAr-chunks.
Every context's result is checked once against an fp32 reference before it is timed.
With ranks sharing one GPU (world > GPUs: gloo, no NCCL) the numbers are printed but marked
`shared_gpu`: time-slicing between the processes makes them meaningless as performance.
JSON + log under --out-dir, named with the device kind and the date.

Targets (issue 14), each printed per row as met or NOT met and counted at the end:
  host <= 20 us with the op's graph, and <= 1.5x (torch.mm + the collective's issue);
  kernel start <= 15 us after the call (absolute);
  kernel start - the bare replay's start <= 5 us, and kernel start - torch.mm's start <= 10 us.

Kernel-start targets. The absolute 15 us assumed a host whose launch path costs about 5 us; on
the lent VMs even torch.mm's kernel starts 17-46 us after its call under this instrument (the
profiler's callbacks add 1-2 us to every CUDA API call, and the hosts' launch paths are slow:
torch.mm alone takes 21-31 us of host time on one of them), so the absolute target measures the
host more than the op. It is kept and printed, and two relative targets say what the op itself
adds, against floors measured on the same host in the same profile:
  X = 5 us over the bare replay of the op's own graph. Both launch the same graph, so the
    difference is the op's host work before its launch: a repeated call's fast path compares a
    dozen tensor attributes and makes one runtime call that also asks the capture status (a
    second CUDA API call, which the profiler slows by 1-2 us). That is about 2-3 us on the
    slowest host measured (the full checks there: 3 us, the whole Python path 8-17 us before the
    fast path); 5 us leaves the instrument's spread (+-1 us calibration, medians of 15 calls
    that move by 1-3 us) without admitting the old path.
  Y = 10 us over torch.mm's start. Beyond its launch, the op's graph runs a device preamble
    before the GEMM (epoch advance, the peers' exit wait, the entry raise, the fork of the side
    streams: dependent nodes of about 1-3 us each), and its host work is X at most. The issue's
    15 us over a ~5 us launch path is the same 10 us budget for the op's own work over what the
    host charges any kernel.
Neither relative target is met by measuring differently: the op's call, the bare replay and
torch.mm are timed by the same clock in the same profile, each call from the host clock just
before it, and a row whose median moved by noise shows it in its min_us beside the median.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "gpu"))

SHAPES = [(256, 4096, 4096), (2048, 4096, 4096), (8192, 8192, 8192)]  # (M, K, N) of the op
VARIANTS = {
    "AgGemm": ("AgGemm", {}),
    "AgGemm-copy": ("AgGemm", {"copy_shard": True}),
    "GemmRs-chunks": ("GemmRs", {"reduce": "chunks"}),
    "GemmRs-epilogue": ("GemmRs", {"reduce": "epilogue"}),
    "GemmAr-chunks": ("GemmAr", {"reduce": "chunks"}),
}
# The absolute targets (host time with the op's graph; call -> kernel start), printed
# and kept in the JSON, met or not.
TARGET_HOST_US = 20.0
TARGET_HOST_OVER_BASELINE = 1.5  # host time with the graph / (torch.mm + the collective's issue)
TARGET_START_US = 15.0
# The kernel-start targets relative to the instrument's floors on the same host (module
# docstring, "Kernel-start targets"): the op's start less the bare replay of its own graph,
# and less torch.mm's start, each measured side by side in one profile.
TARGET_START_OVER_REPLAY_US = 5.0
TARGET_START_OVER_MM_US = 10.0
# Kernels torch.mm may launch (cuBLAS / cuBLASLt / CUTLASS names on sm_90).
MM_KERNEL_NAMES = ("gemm", "Kernel", "sm90", "cutlass", "nvjet")


def host_us(fn, batches=15, per_batch=20):
    """Median host time of one fn() call, calls back to back (no synchronize inside a batch)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        times.append((time.perf_counter() - t0) / per_batch * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


class _OneRank:
    """World 1: the reference's collectives are the identity."""

    @staticmethod
    def all_gather_cat(t):
        return t

    @staticmethod
    def all_reduce_sum(t):
        return t


def make_inputs(cls_name, m, k, n, world, dtype, device, gen):
    rows = m // world if cls_name == "AgGemm" else m
    a = torch.randn(rows, k, generator=gen, device=device).to(dtype)
    b = (torch.randn(k, n, generator=gen, device=device) / k**0.5).to(dtype)
    out_rows = m // world if cls_name == "GemmRs" else m
    return a, b, torch.empty(out_rows, n, dtype=dtype, device=device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default=str(HERE / "results"))
    parser.add_argument("--shapes", default="", help="comma-separated M values to keep (default: all)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated rows to run, of {', '.join(VARIANTS)}"
    )
    parser.add_argument("--eager", action="store_true", help="also time each context with graph=False")
    parser.add_argument(
        "--no-full-path", action="store_true", help="skip the context with the fast path off (the path before it)"
    )
    parser.add_argument(
        "--start-calls", type=int, default=15, help="calls per kernel-start median (each of op, replay, torch.mm)"
    )
    parser.add_argument(
        "--no-stamps", action="store_true", help="skip the profiler-free instrument (device stamps, call_clock.py)"
    )
    parser.add_argument(
        "--correctness-only",
        action="store_true",
        help="per row only the op's results (its own graph, split and one-graph: eager + capture, then "
        "replays, each against fp32), no timing: for ranks sharing one GPU, where timings mean nothing",
    )
    parser.add_argument(
        "--no-plain-split",
        action="store_true",
        help="skip the split context whose head records the tail's start event between the start and the GEMM "
        "and whose done event the host records (the default before 2026-12-03)",
    )
    parser.add_argument(
        "--no-one-graph",
        action="store_true",
        help="skip the context that captures a call as one graph (before the split graphs) beside the default",
    )
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"bench_call_path.py: unknown variants {unknown}; choose from {list(VARIANTS)}")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    group, rank, shared, gg = None, 0, False, None
    if world > 1:
        from gpu_group import GpuGroup

        gg = GpuGroup()
        group, rank, shared = gg.group, gg.rank, gg.shared
    else:
        torch.cuda.set_device(0)
    import test_ops_gpu as ref
    import syncopate as sy
    from call_clock import GpuClock, calls_to_start_us
    from syncopate.ops.gemm_ar import GemmAr
    from syncopate.ops.ag_gemm import AgGemm
    from syncopate.ops.gemm_rs import GemmRs

    ref.GROUP = gg if gg is not None else _OneRank()
    classes = {"AgGemm": AgGemm, "GemmRs": GemmRs, "GemmAr": GemmAr}
    device = torch.device("cuda", torch.cuda.current_device())
    clock = GpuClock(device)
    dtype = torch.bfloat16
    gen = torch.Generator(device=device)
    gen.manual_seed(17 + rank)
    kind = os.environ.get("SYNCOPATE_DEVICE_KIND", torch.cuda.get_device_name())
    keep = {int(x) for x in args.shapes.split(",") if x}
    rows = []

    def say(line):
        if rank == 0:
            print(line, flush=True)

    say(
        f"call path: world {world}{' (ranks share one GPU: timings meaningless)' if shared else ''}, "
        f"{torch.cuda.get_device_name()}, {datetime.date.today()}"
    )
    say(
        f"{'op':18s} {'M x K x N':>16s} {'host graph':>10s} {'host eager':>10s} {'start graph':>11s} "
        f"{'start eager':>11s} {'mm host':>8s} {'mm start':>8s} {'coll host':>9s} {'rel_err':>8s}"
    )
    for m, k, n in SHAPES:
        if keep and m not in keep:
            continue
        m_op = m - m % world
        for name in variants:
            cls_name, kw = VARIANTS[name]
            kw = dict(kw)
            row = {"op": name, "m": m_op, "k": k, "n": n, "world": world, "shared_gpu": shared}
            try:
                a, b, out = make_inputs(cls_name, m_op, k, n, world, dtype, device, gen)
                if kw.pop("copy_shard", False):
                    # A plan without an input tensor: the shard is copied into the heap first.
                    kw["plan"] = sy.make_plan(
                        "all-gather", world_size=world, shape=[m_op, k], algorithm="direct", dtype="bf16", tensor="a"
                    )
                # graph: the op as a user runs it (its own graph; repeated calls take the fast
                # path); full: the same with the fast path off, every call through the full
                # checks (the call path before the fast path, measured on the same host; it pays
                # one more look for a fast path per call, about 0.1 us); eager: graph=False.
                tags = ["graph"] + (["full"] if not args.no_full_path else []) + (["eager"] if args.eager else [])
                tags += [] if args.no_one_graph else ["onegraph"]
                tags += [] if args.no_plain_split else ["plainsplit"]

                def make_ctx(tag):
                    ctx = classes[cls_name](
                        group,
                        m=m_op,
                        k=k,
                        n=n,
                        dtype=dtype,
                        backend="copy-engine",
                        mode="fused",
                        algorithm="direct",
                        split=1,
                        graph=tag != "eager",
                        **kw,
                    )
                    if tag == "full":
                        ctx._fast_path = lambda: None  # never armed: OpContext._run_call
                    if tag == "onegraph":
                        # The whole call as one graph, as before the split graphs (call_graphs.py):
                        # the same host, the split's before.
                        ctx.graphs.split = False
                    if tag == "plainsplit":
                        # Split, the tail's start event recorded between the start and the GEMM,
                        # the done event recorded by the host: the default before 2026-12-03,
                        # when the branch form measured sooner and cheaper (call_graphs.py).
                        ctx.graphs.head_branch = False
                        ctx.graphs.tail_records_done = False
                    return ctx

                if args.correctness_only:
                    tags = (
                        ["graph"]
                        + ([] if args.no_one_graph else ["onegraph"])
                        + ([] if args.no_plain_split else ["plainsplit"])
                    )
                ctxs = {tag: make_ctx(tag) for tag in tags}
                op_key = {"AgGemm": "ag_gemm", "GemmRs": "gemm_rs", "GemmAr": "gemm_ar"}[cls_name]
                err = 0.0
                expected = ref.reference(op_key, a, b, world, rank)
                for ctx in ctxs.values():
                    for _ in range(2):  # with a graph: eager + capture, then a replay (graph: the fast path's)
                        out.fill_(float("nan"))
                        ctx(a, b, out=out)
                        err = max(err, ref.rel_error(out, expected))
                graph_ctx = ctxs["graph"]
                if args.correctness_only:
                    row.update(correctness_only(ctxs, a, b, out, expected, ref, err))
                    say(
                        f"{name:18s} {f'{m_op}x{k}x{n}':>16s} correctness only: rel_err {row['rel_err']:.1e} over "
                        f"{row['calls']} calls per context ({', '.join(row['call_mode'].values())}), "
                        f"captures {row['graph_captures']}: {'PASS' if row['passed'] else 'FAIL'}"
                    )
                    del ctxs
                    graph_ctx = ctx = None
                    rows.append(row)
                    write_results(args.out_dir, kind, world, shared, rows, rank)
                    if gg is not None:
                        gg.barrier()
                    continue
                kernel = graph_ctx.kernel_name
                row.update(
                    rel_err=err,
                    kernel=kernel,
                    input_tensor=getattr(graph_ctx, "input", ""),
                    call_mode={tag: c.call_mode for tag, c in ctxs.items()},
                    fast_path=graph_ctx._fast is not None,  # repeated calls take OpContext._fast_call
                )
                for tag, ctx in ctxs.items():
                    row[f"host_us_{tag}"] = host_us(lambda: ctx(a, b, out=out, check=False))
                    ctx.check()
                # The same calls with new tensor objects each call (views of the same tensors:
                # the same addresses, so the same graph): the fast path compares every operand's
                # metadata instead of recognising the objects that passed last time.
                # (Cycling through 64 prepared views adds about 0.1 us per call.)
                views = iter([(a.view(a.shape), b.view(b.shape), out.view(out.shape)) for _ in range(64)] * 64)

                def call_new_objects():
                    va, vb, vo = next(views)
                    graph_ctx(va, vb, out=vo, check=False)

                row["host_us_graph_new_objects"] = host_us(call_new_objects, batches=15, per_batch=20)
                graph_ctx.check()
                # Where the graph path's host time goes: the replay alone, the guarded replay the
                # fast path makes (capture query and timeout looks included), the full checks alone.
                replay = next(iter(graph_ctx.graphs._graphs.values()), None)
                if replay is not None:
                    row["replay_only_host_us"] = host_us(replay.replay)
                    fast = graph_ctx._fast
                    if fast is not None:
                        row["guarded_replay_host_us"] = host_us(lambda: replay.replay_unless(fast.monitor, fast.flag))
                    graph_ctx.check()
                a_shape = (m_op // world, k) if cls_name == "AgGemm" else (m_op, k)
                row["checks_only_host_us"] = host_us(
                    lambda: graph_ctx._check_operands(a, "a", a_shape, b, "b", a_to_kernel=cls_name != "AgGemm")
                )
                local_a = torch.randn(m_op, k, generator=gen, device=device).to(dtype)  # the whole local GEMM
                mm_out = torch.empty(m_op, n, dtype=dtype, device=device)
                row["torch_mm_host_us"] = host_us(lambda: torch.mm(local_a, b, out=mm_out))
                # Kernel starts side by side, call by call in one profile: the op with its graph,
                # the bare replay of that same graph (the floor of any call that replays it),
                # torch.mm (an op that does nothing before its kernel), the full path and, with
                # --eager, the eager context.
                fns = {"graph": ((lambda: graph_ctx(a, b, out=out, check=False)), (kernel,))}
                if replay is not None:
                    fns["replay"] = (replay.replay, (kernel,))
                fns["mm"] = ((lambda: torch.mm(local_a, b, out=mm_out)), MM_KERNEL_NAMES)
                for tag in ("full", "eager", "onegraph", "plainsplit"):
                    if tag in ctxs:
                        fns[tag] = ((lambda ctx=ctxs[tag]: ctx(a, b, out=out, check=False)), (kernel,))
                starts = calls_to_start_us(fns, clock, calls=args.start_calls)
                for ctx in ctxs.values():
                    ctx.check()
                for tag in ("graph", "full", "eager", "onegraph", "plainsplit"):
                    if tag in starts:
                        row[f"kernel_start_us_{tag}"] = starts[tag]["us"]
                        row[f"kernel_start_{tag}"] = starts[tag]
                if "replay" in starts:
                    row["replay_only_start_us"] = starts["replay"]["us"]
                    row["replay_only_start"] = starts["replay"]
                row["torch_mm_start_us"] = starts["mm"]["us"]
                row["torch_mm_start"] = starts["mm"]
                row["start_graph_minus_mm_start_us"] = row["kernel_start_us_graph"] - row["torch_mm_start_us"]
                row["start_graph_minus_replay_start_us"] = row["kernel_start_us_graph"] - row.get(
                    "replay_only_start_us", float("nan")
                )
                row["host_graph_minus_replay_host_us"] = row["host_us_graph"] - row.get(
                    "replay_only_host_us", float("nan")
                )
                row["collective_host_us"] = None
                if world > 1 and not shared:
                    import torch.distributed as dist

                    if cls_name == "AgGemm":
                        full = torch.empty(m_op, k, dtype=dtype, device=device)
                        coll = lambda: dist.all_gather_into_tensor(full, a, group=group)  # noqa: E731
                    elif cls_name == "GemmRs":
                        coll = lambda: dist.reduce_scatter_tensor(out, mm_out, group=group)  # noqa: E731
                    else:
                        coll = lambda: dist.all_reduce(mm_out, group=group)  # noqa: E731
                    row["collective_host_us"] = host_us(coll)
                if not args.no_stamps and graph_ctx.gemm is not None:
                    # The profiler-free instrument (call_clock.py): the op's graph re-captured
                    # with a stamp as its first node and one right before the GEMM; the floor
                    # (a graph of one stamp, launched as the fast path launches) and an eager
                    # Triton stamp beside it; then the same calls inside the profiler.
                    row.update(
                        stamped_measurement(
                            graph_ctx,
                            a,
                            b,
                            out,
                            expected,
                            clock,
                            args.start_calls,
                            ref,
                            variants={tag: ctxs[tag] for tag in ("onegraph", "plainsplit") if tag in ctxs},
                        )
                    )
                base = row["torch_mm_host_us"] + (row["collective_host_us"] or 0.0)
                row["host_graph_over_baseline"] = row["host_us_graph"] / base
                row["targets"] = targets_met(row)
                row["graph_captures"] = graph_ctx.graphs.captures  # 1: every timed call replayed
                coll_txt = (
                    f"{row['collective_host_us']:9.1f}" if row["collective_host_us"] is not None else f"{'-':>9s}"
                )
                nan = float("nan")
                say(
                    f"{name:18s} {f'{m_op}x{k}x{n}':>16s} {row['host_us_graph']:10.1f} "
                    f"{row.get('host_us_eager', nan):10.1f} {row['kernel_start_us_graph']:11.1f} "
                    f"{row.get('kernel_start_us_eager', nan):11.1f} {row['torch_mm_host_us']:8.1f} "
                    f"{row['torch_mm_start_us']:8.1f} {coll_txt} {err:8.1e}"
                )
                g_start = row["kernel_start_graph"]
                say(
                    f"{'':18s} {'':16s} replay alone {row.get('replay_only_host_us', nan):.1f} us host, "
                    f"kernel {row.get('replay_only_start_us', nan):.1f} us after it; checks alone "
                    f"{row['checks_only_host_us']:.1f} us; clock +-{g_start.get('host_offset_uncertainty_us', nan):.1f} us "
                    f"(profiler offset spread {g_start.get('profiler_offset_spread_us', nan):.1f} us, "
                    f"a Triton probe starts {g_start.get('triton_probe_us', nan):.1f} us after its call)"
                )
                say(
                    f"{'':18s} {'':16s} full path (fast path off): {row.get('host_us_full', nan):.1f} us host, "
                    f"kernel {row.get('kernel_start_us_full', nan):.1f} us after it; guarded replay alone "
                    f"{row.get('guarded_replay_host_us', nan):.1f} us host"
                )
                if "stamp_gemm_us" in row:
                    say(
                        f"{'':18s} {'':16s} no profiler: GEMM start {row['stamp_gemm_us']:.1f} us after the call "
                        f"(at most {row['gemm_start_upper_us']:.1f}; graph's first node "
                        f"{row['stamp_first_node_us']:.1f}); floor: bare graph {row['floor_graph_us']:.1f} us, "
                        f"eager Triton stamp {row['floor_triton_us']:.1f} us; profiler adds "
                        f"{row['profiler_adds_graph_us']:+.1f} us (graph) {row['profiler_adds_triton_us']:+.1f} us "
                        f"(Triton); clock +-{row['stamp_clock_uncertainty_us']:.1f} us, drift "
                        f"{row['stamp_clock_drift_us']:+.1f} us, timer step {row['timer_step_us']:.3f} us"
                    )
                if "stamp_tail_fork_us" in row or "stamp_tail_fork_error" in row:
                    say(
                        f"{'':18s} {'':16s} split: the tail's fork (the chunks can begin) "
                        f"{row.get('stamp_tail_fork_us', nan):.1f} us after the call"
                        f"{' (plain split: ' + format(row['stamp_tail_fork_us_plainsplit'], '.1f') + ' us)' if 'stamp_tail_fork_us_plainsplit' in row else ''}"
                        f"{' ERROR ' + row['stamp_tail_fork_error'][:120] if 'stamp_tail_fork_error' in row else ''}"
                    )
                for tag, words in (
                    ("onegraph", "the call as one graph (before the split)"),
                    ("plainsplit", "split, start event before the GEMM, done event by the host (before 2026-12-03)"),
                ):
                    if f"stamp_gemm_us_{tag}" in row:
                        say(
                            f"{'':18s} {'':16s} {words}: GEMM stamp {row[f'stamp_gemm_us_{tag}']:.1f} us "
                            f"(first node {row.get(f'stamp_first_node_us_{tag}', nan):.1f}), host "
                            f"{row.get(f'host_us_{tag}', nan):.1f} us; split: {row['stamp_gemm_us']:.1f} us "
                            f"(first node {row['stamp_first_node_us']:.1f}), host {row['host_us_graph']:.1f} us"
                        )
                say(
                    f"{'':18s} {'':16s} host with new tensor objects each call (all compared): "
                    f"{row['host_us_graph_new_objects']:.1f} us"
                )
                say(f"{'':18s} {'':16s} {describe_targets(row)}")
                del ctxs
                graph_ctx = replay = fns = ctx = None  # every context of the row freed before the next
            except Exception as exc:  # noqa: BLE001 - a failed row is reported, the rest still run
                row["error"] = f"{type(exc).__name__}: {exc}"
                say(f"{name:18s} {f'{m_op}x{k}x{n}':>16s} ERROR {row['error'][:200]}")
            rows.append(row)
            write_results(args.out_dir, kind, world, shared, rows, rank)  # after each row: a time limit keeps the rest
            if gg is not None:
                gg.barrier()
    if args.correctness_only:
        checked = [r for r in rows if r.get("correctness_only")]
        say(
            f"SUMMARY correctness-only world={world} shared={shared} passed="
            f"{sum(r['passed'] for r in checked)} of {len(rows)} rows ({len(rows) - len(checked)} failed to run)"
        )
    else:
        say("targets (module docstring):\n" + summarize_targets([r for r in rows if "targets" in r]))
    if rank == 0:
        print(f"wrote {results_path(args.out_dir, kind, world, shared)}", flush=True)


def correctness_only(ctxs, a, b, out, expected, ref, err, replays: int = 4) -> dict:
    """The row of --correctness-only: each context (after its eager call and capture, done by the
    caller) replayed `replays` more times with the output and the heap's buffers poisoned before
    each (a replay that read the last call's chunks, or did not wait for this call's, sees NaN),
    every result against the fp32 reference; the worst relative error, and whether each context
    replayed its one graph."""
    tolerance = ref.TOLERANCE[torch.bfloat16]
    for ctx in ctxs.values():
        for _ in range(replays):
            ref.poison(ctx)
            out.fill_(float("nan"))
            ctx(a, b, out=out, check=False)
            err = max(err, ref.rel_error(out, expected))
        ctx.check()
    captures = {tag: c.graphs.captures for tag, c in ctxs.items()}
    return {
        "rel_err": err,
        "correctness_only": True,
        "calls": 2 + replays,
        "call_mode": {tag: c.call_mode for tag, c in ctxs.items()},
        "split_graph": {tag: c.graphs.split for tag, c in ctxs.items()},
        "graph_captures": captures,
        "passed": err < tolerance and all(n == 1 for n in captures.values()),
    }


def stamped_measurement(ctx, a, b, out, expected, clock, calls, ref, variants=None) -> dict:
    """The profiler-free kernel-start row fields (call_clock.py, "The profiler-free instrument"):
    the op's context instrumented with a stamp right before the GEMM alone (slot 1: where the
    GEMM starts), the floor graph stamping slot 2, an eager Triton stamp into slot 3, medians of
    `calls` calls each, without and then with the profiler (which also gives the gap from that
    stamp to the GEMM); then the op re-captured with a stamp as its graph's first node alone
    (slot 0). variants: tag -> the same op graphed another way (onegraph: the call as one graph,
    before the split; plainsplit: the split as it was before 2026-12-03), each GEMM and first
    node stamped alike and timed in turn with it (fields stamp_*_us_<tag>)."""
    from call_clock import StampGraph, instrument_op, stamped_starts

    floor = StampGraph(clock, 2)
    ops = {"op": ctx, **(variants or {})}
    err = 0.0

    def instrument(c, first_slot, gemm_slot, fork_slot=None):
        nonlocal err
        instrument_op(c, clock, first_slot=first_slot, gemm_slot=gemm_slot, fork_slot=fork_slot)
        captures = c.graphs.captures
        for _ in range(2):  # the first call captures the stamped graph, the second replays it (fast path)
            out.fill_(float("nan"))
            c(a, b, out=out, check=False)
            c.check()
            err = max(err, ref.rel_error(out, expected))
        return captures

    captures = {key: instrument(c, None, 1) for key, c in ops.items()}
    fns = {key: ((lambda c=c: c(a, b, out=out, check=False)), (1,)) for key, c in ops.items()}
    fns["floor"] = (floor.replay, (2,))
    fns["triton"] = ((lambda: clock.probe(3)), (3,))
    plain = stamped_starts(fns, clock, calls=calls)
    profiled = stamped_starts(fns, clock, calls=calls, profiled=True, gap_kernels=(ctx.kernel_name,))
    recaptures = {key: c.graphs.captures - captures[key] for key, c in ops.items()}
    for c in ops.values():
        instrument(c, 0, None)
    first = stamped_starts(
        {key: ((lambda c=c: c(a, b, out=out, check=False)), (0,)) for key, c in ops.items()}, clock, calls=calls
    )
    for c in ops.values():
        c.check()
    before_gemm = plain["op"]["stamps"][0]
    gap = profiled["op"].get("gemm_after_stamp_us", {"us": float("nan")})
    # The tail's start (split contexts): a stamp before the fork of the side streams, i.e. when
    # the chunks can begin; its own pass, and a failure here loses only these fields.
    tail = {}
    try:
        split_ops = {key: c for key, c in ops.items() if c.graphs.split}
        for c in split_ops.values():
            instrument(c, None, None, fork_slot=4)
        forks = stamped_starts(
            {key: ((lambda c=c: c(a, b, out=out, check=False)), (4,)) for key, c in split_ops.items()},
            clock,
            calls=calls,
        )
        for key in split_ops:
            tail["stamp_tail_fork_us" + ("" if key == "op" else f"_{key}")] = forks[key]["stamps"][0]["us"]
    except Exception as exc:  # noqa: BLE001 - reported in the row, the rest stands
        tail["stamp_tail_fork_error"] = f"{type(exc).__name__}: {exc}"
    one = {}
    for tag, c in (variants or {}).items():
        one.update(
            {
                f"stamp_gemm_us_{tag}": plain[tag]["stamps"][0]["us"],
                f"stamp_first_node_us_{tag}": first[tag]["stamps"][0]["us"],
                f"recaptures_{tag}": recaptures[tag],
                f"split_graph_{tag}": c.graphs.split,
                f"head_branch_{tag}": c.graphs.head_branch,
                f"tail_records_done_{tag}": c.graphs.tail_records_done,
            }
        )
    return {
        **tail,
        **one,
        "split_graph": ctx.graphs.split,
        "stamped_rel_err": err,
        "stamped_recaptures": recaptures["op"],  # 1: every timed stamped call replayed
        "stamp_first_node_us": first["op"]["stamps"][0]["us"],  # the op graph's first node (own capture)
        "stamp_gemm_us": before_gemm["us"],  # where the GEMM starts (no profiler)
        "gemm_after_stamp_us": gap["us"],  # the GEMM's start less that stamp's (profiled, device clock)
        "gemm_start_upper_us": before_gemm["us"] + gap["us"],
        "floor_graph_us": plain["floor"]["stamps"][0]["us"],
        "floor_triton_us": plain["triton"]["stamps"][0]["us"],
        "profiler_adds_graph_us": profiled["floor"]["stamps"][0]["us"] - plain["floor"]["stamps"][0]["us"],
        "profiler_adds_triton_us": profiled["triton"]["stamps"][0]["us"] - plain["triton"]["stamps"][0]["us"],
        "profiler_adds_op_gemm_stamp_us": profiled["op"]["stamps"][0]["us"] - before_gemm["us"],
        "stamp_clock_uncertainty_us": max(
            plain["op"]["host_offset_uncertainty_us"],
            profiled["op"]["host_offset_uncertainty_us"],
            first["op"]["host_offset_uncertainty_us"],
        ),
        "stamp_clock_drift_us": plain["op"]["clock_drift_us"],
        "timer_step_us": plain["op"]["timer_step_us"],
        "stamped": {"plain": plain, "profiled": profiled, "first_node": first},
    }


def targets_met(row: dict) -> dict:
    """Each target of the module docstring: met (True), missed (False), or None if unmeasured."""

    def le(value, bound):
        return None if value is None or value != value else bool(value <= bound)

    return {
        f"host_graph_le_{TARGET_HOST_US:g}us": le(row.get("host_us_graph"), TARGET_HOST_US),
        f"host_graph_le_{TARGET_HOST_OVER_BASELINE:g}x_baseline": le(
            row.get("host_graph_over_baseline"), TARGET_HOST_OVER_BASELINE
        ),
        f"kernel_start_graph_le_{TARGET_START_US:g}us": le(row.get("kernel_start_us_graph"), TARGET_START_US),
        f"start_minus_replay_start_le_{TARGET_START_OVER_REPLAY_US:g}us": le(
            row.get("start_graph_minus_replay_start_us"), TARGET_START_OVER_REPLAY_US
        ),
        f"start_minus_mm_start_le_{TARGET_START_OVER_MM_US:g}us": le(
            row.get("start_graph_minus_mm_start_us"), TARGET_START_OVER_MM_US
        ),
        f"gemm_start_no_profiler_upper_le_{TARGET_START_US:g}us": le(row.get("gemm_start_upper_us"), TARGET_START_US),
        f"gemm_start_no_profiler_lower_le_{TARGET_START_US:g}us": le(row.get("stamp_gemm_us"), TARGET_START_US),
    }


def describe_targets(row: dict) -> str:
    """One line: each target with the row's value and met / NOT met."""
    nan = float("nan")
    shown = (  # (label, value, format), in the order of targets_met
        ("host <= 20 us", row.get("host_us_graph", nan), "{:.1f} us"),
        ("host <= 1.5x mm+coll", row.get("host_graph_over_baseline", nan), "{:.2f}x"),
        ("start <= 15 us (profiler)", row.get("kernel_start_us_graph", nan), "{:.1f} us"),
        ("start - replay start <= 5 us", row.get("start_graph_minus_replay_start_us", nan), "{:+.1f} us"),
        ("start - mm start <= 10 us", row.get("start_graph_minus_mm_start_us", nan), "{:+.1f} us"),
        ("start <= 15 us (stamps, upper)", row.get("gemm_start_upper_us", nan), "{:.1f} us"),
        ("start <= 15 us (stamps, lower)", row.get("stamp_gemm_us", nan), "{:.1f} us"),
    )
    words = {True: "met", False: "NOT met", None: "not measured"}
    parts = [
        f"{label} ({fmt.format(value)}): {words[met]}"
        for (label, value, fmt), met in zip(shown, row["targets"].values())
    ]
    return "targets: " + "; ".join(parts)


def summarize_targets(rows: list) -> str:
    """How many measured rows meet each target."""
    lines = []
    for name in rows[0]["targets"] if rows else ():
        seen = [r["targets"][name] for r in rows if "targets" in r and r["targets"][name] is not None]
        lines.append(f"  {name}: met on {sum(seen)} of {len(seen)} rows")
    return "\n".join(lines)


def results_path(out_dir, kind, world, shared) -> Path:
    slug = kind.replace(" ", "-").lower()
    return Path(out_dir) / f"call-path-{slug}-w{world}{'-shared' if shared else ''}-{datetime.date.today()}.json"


def write_results(out_dir, kind, world, shared, rows, rank) -> None:
    if rank != 0:
        return
    path = results_path(out_dir, kind, world, shared)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "kind": kind,
                "world": world,
                "shared_gpu": shared,
                "date": str(datetime.date.today()),
                "targets": {
                    "host_us_graph": TARGET_HOST_US,
                    "host_graph_over_baseline": TARGET_HOST_OVER_BASELINE,
                    "kernel_start_us": TARGET_START_US,
                    "kernel_start_minus_replay_start_us": TARGET_START_OVER_REPLAY_US,
                    "kernel_start_minus_torch_mm_start_us": TARGET_START_OVER_MM_US,
                },
                "kernel_start_method": "bench/call_clock.py (host clock and profiler kernel starts on %globaltimer)",
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
