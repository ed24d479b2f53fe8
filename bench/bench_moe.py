"""MoE dispatch rows (issue 19): the up-projection of a routed MoE layer, per rank.

    python bench/bench_moe.py [--shapes mixtral,deepseek] [--out FILE]          # world 1
    torchrun --nproc_per_node=W bench/bench_moe.py ...                           # any world

Variants, each timed with CUDA events (median of --iters after --warmup; every rank times its
own, rank 0 writes the rows):
  sequential       MoeDispatchCombine.dispatch_gemm: counts all-to-all, rows all-to-all
                   (NCCL, or nothing at world 1), one torch.matmul per local expert
  grouped_mm       the same rows through torch._grouped_mm (where this torch has it), GEMM only
  syncopate_local  kernels/moe_gemm.py (Triton grouped GEMM over capacity slots, counts read on
                   the device), GEMM only, on the rows as the dispatch plan lands them, at the
                   config ops/moe_fused.py picks (grouped_config); syncopate_local_sweep_ms
                   times it beside other configs (--sweep N) and without TMA (_ptr)
  fused            MoeDispatchCombine(mode="fused"): the MoE dispatch plan's copy-engine chunks
                   (whole capacity slots; sm_copy_*: the same with SM-copy chunks, which move
                   only each slot's counted rows) overlapped with the transformed grouped GEMM, the
                   whole dispatch (packing, counts, rows, GEMM, unpacking with a host sync);
                   and its parts: fused_call_ms (MoeFusedDispatch alone: pack, chunks, kernel),
                   fused_kernel_landed_ms (the transformed kernel, chunks already landed),
                   fused_chunks_only_ms (the plan's chunks, no kernel)
  combine_*        the combine of silu(h) (down-projection [E, intermediate, hidden], rows home,
                   weighted sum): sequential (a matmul per expert, all-to-all, index_add) and
                   fused (the notifying grouped GEMM, slots sent home as their tiles finish)
  fused_slots_*    MoeDispatchCombine.dispatch_slots (ops/moe_slots.py: rows left in the capacity
                   slots, every index on the device, no host synchronization), and layer_* the
                   whole layer (dispatch, silu, combine) sequential against the slot path
  *_host_ms        the host's milliseconds inside one call (its own work and any wait for the
                   device in it), the device drained between calls; *_syncs_per_call: the host
                   synchronizations torch reports in one call (set_sync_debug_mode "warn")
--label names the run in the JSON (the GPU request runs the rows "before" with an older
package's MoE modules and "after" with the tree's, in one run: bench/gpu_request_moe19.sh).
Rows: shape, tokens per rank, experts, top-k, hidden, intermediate, routing (balanced or skewed:
one hot expert), capacity, each variant's milliseconds and TFLOP/s (routed rows only). The
simulator's predictions: sim_at_capacity_* with every slot full, sim_counts_* for this call's
routing histogram (moe_fused.predict_for_counts: tiles past a slot's count compute nothing).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

SHAPES = {
    # name: (tokens per rank, experts, top_k, hidden, intermediate)
    "mixtral": (4096, 8, 2, 4096, 14336),
    "deepseek": (2048, 64, 8, 7168, 2048),
    # DeepSeek-V3's routed experts (256, top-8, hidden 7168, expert width 2048) at the 4096
    # tokens per rank of DeepEP's normal-kernel benchmark
    "deepseek-v3": (4096, 256, 8, 7168, 2048),
    "small": (512, 8, 2, 1024, 2048),
}


def _sweep():
    from syncopate.ops.moe_fused import GroupedConfig

    return [
        GroupedConfig(128, 128, 64, 8, 4, group_m=8),
        GroupedConfig(128, 256, 64, 8, 3),
        GroupedConfig(128, 128, 64, 8, 3),
        GroupedConfig(64, 128, 64, 4, 4),
        GroupedConfig(128, 128, 64, 4, 4),
        GroupedConfig(128, 128, 64, 8, 4, group_m=4),
    ]


SWEEP = []
PARTIAL = {}  # the row being measured


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def host_ms(fn, warmup, iters):
    """Median milliseconds the host spends inside fn() (its own work and any wait for the device
    in it), the device drained between calls so no call waits for an earlier one's queue."""
    import time

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def syncs_per_call(fn):
    """How many host synchronizations torch reports in one fn() call (set_sync_debug_mode
    "warn": a warning per synchronizing call; the runtime's own C++ waits are not torch's and do
    not count, the ops here make none on the host)."""
    import warnings

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught)


def host_profile(path, label, fn, calls=20):
    """cProfile of `calls` calls of fn (the device drained before and after): where the host's
    time in a call goes, by function, into `path` (cumulative and own time, top 35 each)."""
    import cProfile
    import io
    import pstats

    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    for key in ("cumulative", "tottime"):
        pstats.Stats(prof, stream=text).sort_stats(key).print_stats(35)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"==== {label}: {calls} calls\n{text.getvalue()}\n")


def slots_rows(group, world, experts, top_k, capacity, x, ids, w_up, h, layout, inter, hidden, gen, device, args):
    """The capacity-slot path (MoeDispatchCombine.dispatch_slots / combine_slots: no host
    synchronization): its dispatch, the whole layer (dispatch, silu, combine) beside the
    sequential layer's, host milliseconds and host synchronizations per call of each."""
    from syncopate.ops.moe import MoeDispatchCombine, _slot_rows

    out = {}
    layer = MoeDispatchCombine(group if world > 1 else None, num_experts=experts, top_k=top_k)
    slots = MoeDispatchCombine(
        group if world > 1 else None, num_experts=experts, top_k=top_k, capacity=capacity, backend=args.slots_backend
    )
    out["fused_slots_backend"] = args.slots_backend
    h_s, lay = slots.dispatch_slots(x, ids, w_up)
    slots.check()
    h_s_rows = h_s[_slot_rows(layout.recv_counts, capacity, device)]
    out["fused_slots_rel_err_vs_sequential"] = float((h_s_rows.float() - h.float()).norm() / h.float().norm())
    out["fused_slots_ms"] = time_ms(lambda: slots.dispatch_slots(x, ids, w_up), args.warmup, args.iters)
    out["fused_slots_host_ms"] = host_ms(lambda: slots.dispatch_slots(x, ids, w_up), args.warmup, args.iters)
    out["fused_slots_syncs_per_call"] = syncs_per_call(lambda: slots.dispatch_slots(x, ids, w_up))
    out["sequential_host_ms"] = host_ms(lambda: layer.dispatch_gemm(x, ids, w_up), args.warmup, args.iters)
    out["sequential_syncs_per_call"] = syncs_per_call(lambda: layer.dispatch_gemm(x, ids, w_up))
    local = w_up.shape[0]
    w_down = (torch.randn(local, inter, hidden, generator=gen) / inter**0.5).to(device, torch.bfloat16)
    weights = torch.rand(x.shape[0], top_k, generator=gen).to(device, torch.bfloat16)

    def seq_layer():
        hh, ll = layer.dispatch_gemm(x, ids, w_up)
        return layer.combine_gemm(torch.nn.functional.silu(hh), w_down, ll, weights)

    def slots_layer():
        hh, ll = slots.dispatch_slots(x, ids, w_up)
        return slots.combine_slots(torch.nn.functional.silu(hh), w_down, ll, weights)

    y_ref, y = seq_layer(), slots_layer()
    slots.check()
    out["layer_slots_rel_err_vs_sequential"] = float((y.float() - y_ref.float()).norm() / y_ref.float().norm())
    out["layer_sequential_ms"] = time_ms(seq_layer, args.warmup, args.iters)
    out["layer_slots_ms"] = time_ms(slots_layer, args.warmup, args.iters)
    out["layer_sequential_host_ms"] = host_ms(seq_layer, args.warmup, args.iters)
    out["layer_slots_host_ms"] = host_ms(slots_layer, args.warmup, args.iters)
    out["layer_sequential_syncs_per_call"] = syncs_per_call(seq_layer)
    out["layer_slots_syncs_per_call"] = syncs_per_call(slots_layer)
    if args.host_profile:
        fused = MoeDispatchCombine(
            group if world > 1 else None, num_experts=experts, top_k=top_k, capacity=capacity, mode="fused"
        )
        for label, fn in (
            ("sequential dispatch_gemm", lambda: layer.dispatch_gemm(x, ids, w_up)),
            ("fused dispatch_gemm", lambda: fused.dispatch_gemm(x, ids, w_up)),
            ("slots dispatch_slots", lambda: slots.dispatch_slots(x, ids, w_up)),
            ("slots layer", slots_layer),
        ):
            host_profile(args.host_profile, label, fn)
        fused.check()
    slots.check()
    return out


def fused_parts(fused, x, ids, w_up, args):
    """Milliseconds of the fused dispatch's parts (see run_shape)."""
    from syncopate.ops.moe_fused import MoeFusedDispatch

    fd = next(iter(fused._fused.values()))
    captured = {}
    original = MoeFusedDispatch.__call__

    def capture(self, *call_args):
        captured["args"] = call_args
        return original(self, *call_args)

    MoeFusedDispatch.__call__ = capture
    try:
        fused.dispatch_gemm(x, ids, w_up)
    finally:
        MoeFusedDispatch.__call__ = original
    out = {"fused_config": fd.config.name}
    out["fused_call_ms"] = time_ms(lambda: fd(*captured["args"]), args.warmup, args.iters)
    h = torch.empty((fd.x_recv.shape[0], fd.n), dtype=fd.dtype, device=fd.device)
    out["fused_kernel_landed_ms"] = time_ms(
        lambda: fd._launch(fd._args(w_up, h), fd.ws.epoch_word), args.warmup, args.iters
    )

    def chunks_only():
        ws = fd.ws
        ws.begin()
        ws.publish()
        ws.fork()
        ws.issue_chunks()
        ws.end()

    out["fused_chunks_only_ms"] = time_ms(chunks_only, args.warmup, args.iters)
    return out


def combine_rows(layer, h, layout, fused, x, ids, w_up, inter, hidden, top_k, gen, device, args):
    """The combine (down-projection, rows home, weighted sum) of silu(h): sequential and fused."""
    out = {}
    local = w_up.shape[0]
    w_down = (torch.randn(local, inter, hidden, generator=gen) / inter**0.5).to(device, torch.bfloat16)
    weights = torch.rand(x.shape[0], top_k, generator=gen).to(device, torch.bfloat16)
    act = torch.nn.functional.silu(h)
    y_ref = layer.combine_gemm(act, w_down, layout, weights)
    out["combine_sequential_ms"] = time_ms(
        lambda: layer.combine_gemm(act, w_down, layout, weights), args.warmup, args.iters
    )
    try:
        h_f, layout_f = fused.dispatch_gemm(x, ids, w_up)
        act_f = torch.nn.functional.silu(h_f)
        y = fused.combine_gemm(act_f, w_down, layout_f, weights)
        out["combine_fused_rel_err_vs_sequential"] = float((y.float() - y_ref.float()).norm() / y_ref.float().norm())
        out["combine_fused_ms"] = time_ms(
            lambda: fused.combine_gemm(act_f, w_down, layout_f, weights), args.warmup, args.iters
        )
        fc = next(iter(fused._fused_combine.values()))
        out["combine_fused_config"] = fc.config.name
    except Exception as exc:
        out["combine_fused_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def profile_calls(label, fused, layer, x, ids, w_up, args):
    """torch.profiler tables (host and device time per op) of 3 fused and 3 sequential
    dispatches and combines, into --profile-dir: where the time outside the kernels goes."""
    from torch.profiler import ProfilerActivity, profile

    out = Path(args.profile_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(5)
    inter, hidden = w_up.shape[2], w_up.shape[1]
    w_down = (torch.randn(w_up.shape[0], inter, hidden, generator=gen) / inter**0.5).to(x.device, torch.bfloat16)
    weights = torch.rand(x.shape[0], ids.shape[1], generator=gen).to(x.device, torch.bfloat16)
    for who, op in (("fused", fused), ("sequential", layer)):

        def step():
            h, lay = op.dispatch_gemm(x, ids, w_up)
            op.combine_gemm(torch.nn.functional.silu(h), w_down, lay, weights)

        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=40)
        cuda = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        (out / f"{label}-{who}.txt").write_text(table + "\n\n" + cuda + "\n")


def routing(tokens, experts, top_k, skewed, gen, device):
    logits = torch.randn(tokens, experts, generator=gen)
    if skewed:
        logits[:, 0] += 4.0
    return torch.topk(logits, top_k, dim=1).indices.to(device)


def run_shape(name, skewed, group, rank, world, device, args):
    from syncopate.kernels import moe_gemm
    from syncopate.ops import moe_fused
    from syncopate.ops.moe import MoeDispatchCombine

    tokens, experts, top_k, hidden, inter = SHAPES[name]
    local = experts // world
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
    ids = routing(tokens, experts, top_k, skewed, gen, device)
    w_up = (torch.randn(local, hidden, inter, generator=gen) / hidden**0.5).to(device, torch.bfloat16)
    layer = MoeDispatchCombine(group if world > 1 else None, num_experts=experts, top_k=top_k)
    h, layout = layer.dispatch_gemm(x, ids, w_up)
    rows = layout.rows_per_expert
    routed = sum(rows)
    flop = 2.0 * routed * hidden * inter
    row = dict(
        shape=name,
        world=world,
        tokens_per_rank=tokens,
        experts=experts,
        top_k=top_k,
        hidden=hidden,
        intermediate=inter,
        routing="skewed" if skewed else "balanced",
        rows_per_local_expert=rows,
    )
    PARTIAL["row"] = row  # what a run cut off by its time limit still writes (main's SIGTERM handler)
    seq = time_ms(lambda: layer.dispatch_gemm(x, ids, w_up), args.warmup, args.iters)
    row["sequential_ms"] = seq
    row["sequential_tflops"] = flop / seq / 1e9
    grouped = torch.empty(routed, hidden, device=device, dtype=torch.bfloat16)
    if hasattr(torch, "_grouped_mm") and routed:
        offs = torch.tensor(rows, device=device, dtype=torch.int32).cumsum(0).to(torch.int32)
        try:
            ms = time_ms(lambda: torch._grouped_mm(grouped, w_up, offs=offs), args.warmup, args.iters)
            row["grouped_mm_ms"] = ms
            row["grouped_mm_tflops"] = flop / ms / 1e9
        except Exception as exc:  # not every build/GPU has it
            row["grouped_mm_error"] = f"{type(exc).__name__}: {exc}"[:200]
    # Capacity slots as the dispatch plan lands them: one slot per (source rank, local expert).
    recv = layout.recv_counts
    biggest = max((n for r in recv for n in r), default=0)
    if world > 1:  # every rank's plan must have the same capacity
        import torch.distributed as dist

        top = torch.tensor([biggest], device=device)
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        biggest = int(top)
    capacity = max(128, -(-biggest // 128) * 128)
    slots = world * local
    counts = torch.tensor([n for r in recv for n in r], dtype=torch.int32, device=device)
    a = torch.randn(slots * capacity, hidden, generator=gen).to(device, torch.bfloat16)
    c = torch.empty(slots * capacity, inter, device=device, dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    row["capacity"] = capacity
    default = moe_fused.grouped_config(capacity)
    sweep = {}
    # The default last, TMA last: `c` then holds what the correctness check below reads.
    for cfg in [c_ for c_ in SWEEP if c_ != default and capacity % c_.block_m == 0][: args.sweep] + [default]:
        for tma in (False, True) if cfg == default else (True,):
            launch_args, meta = moe_fused.grouped_gemm_args(
                a,
                w_up,
                c,
                counts,
                capacity,
                cfg.block_m,
                cfg.block_n,
                cfg.block_k,
                sms,
                group_m=cfg.group_m,
                use_tma=tma,
            )
            try:
                ms = time_ms(
                    lambda: moe_gemm.moe_grouped_gemm[(sms,)](
                        *launch_args, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages
                    ),
                    args.warmup,
                    args.iters,
                )
                sweep[f"{cfg.name}{'_tma' if tma else '_ptr'}"] = round(ms, 4)
            except Exception as exc:
                sweep[f"{cfg.name}{'_tma' if tma else '_ptr'}"] = f"{type(exc).__name__}: {exc}"[:200]
    row["syncopate_local_config"] = default.name
    row["syncopate_local_sweep_ms"] = sweep
    ms = sweep.get(f"{default.name}_tma")
    if isinstance(ms, float):
        row["syncopate_local_ms"] = ms
        row["syncopate_local_tflops"] = flop / ms / 1e9
    if args.fused:
        # The fused dispatch (the plan's copy-engine chunks + the transformed grouped GEMM), and
        # its parts: the MoeFusedDispatch call alone (pack, chunks, kernel; no routing, no
        # unpacking), the transformed kernel alone (its chunks already landed), the chunks alone.
        fused_capacity = capacity
        try:
            fused = MoeDispatchCombine(
                group if world > 1 else None, num_experts=experts, top_k=top_k, capacity=fused_capacity, mode="fused"
            )
            h_fused, _ = fused.dispatch_gemm(x, ids, w_up)
            row["fused_rel_err_vs_sequential"] = float((h_fused.float() - h.float()).norm() / h.float().norm())
            ms = time_ms(lambda: fused.dispatch_gemm(x, ids, w_up), args.warmup, args.iters)
            row["fused_ms"] = ms
            row["fused_tflops"] = flop / ms / 1e9
            row["fused_capacity"] = fused_capacity
            row["fused_host_ms"] = host_ms(lambda: fused.dispatch_gemm(x, ids, w_up), args.warmup, args.iters)
            row["fused_syncs_per_call"] = syncs_per_call(lambda: fused.dispatch_gemm(x, ids, w_up))
            row.update(fused_parts(fused, x, ids, w_up, args))
        except Exception as exc:
            row["fused_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if args.combine:
            try:
                row.update(combine_rows(layer, h, layout, fused, x, ids, w_up, inter, hidden, top_k, gen, device, args))
            except Exception as exc:
                row["combine_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if args.slots:
            try:
                row.update(
                    slots_rows(
                        group,
                        world,
                        experts,
                        top_k,
                        fused_capacity,
                        x,
                        ids,
                        w_up,
                        h,
                        layout,
                        inter,
                        hidden,
                        gen,
                        device,
                        args,
                    )
                )
            except Exception as exc:
                row["fused_slots_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if args.sm_copy:
            # The same with SM-copy chunks: only each slot's counted rows move (the copy kernel
            # reads the count on the device), keys prefixed sm_copy_.
            try:
                fused_sm = MoeDispatchCombine(
                    group if world > 1 else None,
                    num_experts=experts,
                    top_k=top_k,
                    capacity=fused_capacity,
                    mode="fused",
                    backend="sm-copy",
                )
                h_sm, _ = fused_sm.dispatch_gemm(x, ids, w_up)
                row["sm_copy_fused_rel_err_vs_sequential"] = float((h_sm.float() - h.float()).norm() / h.float().norm())
                row["sm_copy_fused_ms"] = time_ms(lambda: fused_sm.dispatch_gemm(x, ids, w_up), args.warmup, args.iters)
                row.update({f"sm_copy_{k}": v for k, v in fused_parts(fused_sm, x, ids, w_up, args).items()})
                if args.combine:
                    comb = combine_rows(
                        layer, h, layout, fused_sm, x, ids, w_up, inter, hidden, top_k, gen, device, args
                    )
                    row.update({f"sm_copy_{k}": v for k, v in comb.items() if k.startswith("combine_fused")})
            except Exception as exc:
                row["sm_copy_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if args.profile_dir:
            try:
                profile_calls(f"{name}-{'skewed' if skewed else 'balanced'}", fused, layer, x, ids, w_up, args)
            except Exception as exc:
                row["profile_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:  # the simulator: every slot full, and this call's routing histogram (every rank's counts)
            cfg = moe_fused.grouped_config(fused_capacity)
            pred = moe_fused.predict_at_capacity(
                world, local, fused_capacity, hidden, inter, block_m=cfg.block_m, block_n=cfg.block_n
            )
            row["sim_at_capacity_fused_ms"] = pred.fused_us / 1e3
            row["sim_at_capacity_sequential_ms"] = pred.sequential_us / 1e3
            histogram = [recv]
            if world > 1:
                import torch.distributed as dist

                histogram = [None] * world
                dist.all_gather_object(histogram, recv, group=group)
            pred = moe_fused.predict_for_counts(
                [list(map(list, h_)) for h_ in histogram], fused_capacity, hidden, inter
            )
            row["sim_counts_fused_ms"] = pred.fused_us / 1e3
            row["sim_counts_sequential_ms"] = pred.sequential_us / 1e3
            row["sim_counts_gemm_alone_ms"] = pred.gemm_alone_us / 1e3
        except Exception as exc:
            row["sim_error"] = f"{type(exc).__name__}: {exc}"[:300]
    # Correctness of the timed kernel on one slot with rows (bf16 tolerance).
    q = next((i for i in range(slots) if int(counts[i])), None)
    if q is not None:
        n = int(counts[q])
        ref = a[q * capacity : q * capacity + n].float() @ w_up[q % local].float()
        err = float((c[q * capacity : q * capacity + n].float() - ref).norm() / ref.norm())
        row["syncopate_local_rel_err"] = err
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="mixtral,deepseek")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", default="")
    parser.add_argument("--only", default="", help="rows to run, e.g. mixtral:balanced,deepseek:balanced")
    parser.add_argument("--sweep", type=int, default=4, help="grouped GEMM configs to time beside the default")
    parser.add_argument(
        "--profile-dir", default="", help="write torch.profiler tables of the fused and sequential layer"
    )
    parser.add_argument("--no-combine", dest="combine", action="store_false", help="skip the combine rows")
    parser.add_argument("--no-fused", dest="fused", action="store_false", help="skip the fused dispatch rows")
    parser.add_argument(
        "--no-sm-copy", dest="sm_copy", action="store_false", help="skip the fused rows with SM-copy chunks"
    )
    parser.add_argument(
        "--no-slots", dest="slots", action="store_false", help="skip the capacity-slot rows (dispatch_slots)"
    )
    parser.add_argument("--slots-backend", default="copy-engine", help="the slot rows' chunk backend")
    parser.add_argument("--label", default="", help="a name for this run in the JSON (e.g. before / after)")
    parser.add_argument("--host-profile", default="", help="append cProfile tables of the host's calls to this file")
    args = parser.parse_args()
    SWEEP.extend(_sweep())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    group = None
    if world > 1:
        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        dist.init_process_group("nccl")
        group = dist.group.WORLD
    device = torch.device("cuda", torch.cuda.current_device())
    import datetime

    import triton

    run = dict(
        device=torch.cuda.get_device_name(device),
        date_utc=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        world=world,
        torch=torch.__version__,
        triton=triton.__version__,
        warmup=args.warmup,
        iters=args.iters,
        label=args.label,
    )
    rows = []

    def cut_off(signum, frame):
        # `timeout` ends the run: write the rows so far and the one being measured, marked.
        if rank == 0 and args.out and PARTIAL.get("row") is not None:
            partial = dict(PARTIAL["row"], cut_off_by_signal=signum, device=torch.cuda.get_device_name(device))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(dict(run=run, rows=rows + [partial]), indent=1) + "\n")
            print(json.dumps(partial), flush=True)
        os._exit(124)

    import signal

    signal.signal(signal.SIGTERM, cut_off)
    if args.only:  # in the order given
        todo = [(entry.split(":")[0], entry.split(":")[1] == "skewed") for entry in args.only.split(",")]
    else:
        todo = [(name, skewed) for name in args.shapes.split(",") for skewed in (False, True)]
    for name, skewed in todo:
        try:
            row = run_shape(name, skewed, group, rank, world, device, args)
        except Exception as exc:
            row = dict(
                shape=name, routing="skewed" if skewed else "balanced", error=f"{type(exc).__name__}: {exc}"[:500]
            )
        row["device"] = torch.cuda.get_device_name(device)
        PARTIAL["row"] = None
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
            if args.out:  # after every row: a run cut off by its time limit keeps what it measured
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(dict(run=run, rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
