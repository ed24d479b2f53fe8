"""MoE dispatch rows (issue 19): the up-projection of a routed MoE layer, per rank.

    python bench/bench_moe.py [--shapes mixtral,deepseek] [--out FILE]          # world 1
    torchrun --nproc_per_node=W bench/bench_moe.py ...                           # any world

Variants, each timed with CUDA events (median of --iters after --warmup; every rank times its
own, rank 0 writes the rows):
  sequential       MoeDispatchCombine.dispatch_gemm: counts all-to-all, rows all-to-all
                   (NCCL, or nothing at world 1), one torch.matmul per local expert
  grouped_mm       the same rows through torch._grouped_mm (where this torch has it), GEMM only
  syncopate_local  kernels/moe_gemm.py (Triton grouped GEMM over capacity slots, counts read on
                   the device), GEMM only, on the rows as the dispatch plan lands them
  fused            MoeDispatchCombine(mode="fused"): the MoE dispatch plan's copy-engine chunks
                   (whole capacity slots) overlapped with the transformed grouped GEMM, the
                   whole dispatch (packing, counts, rows, GEMM, unpacking with a host sync)
Rows: shape, tokens per rank, experts, top-k, hidden, intermediate, routing (balanced or skewed:
one hot expert), capacity, each variant's milliseconds and TFLOP/s (routed rows only). The
simulator's prediction (sim_at_capacity_*) is for every slot full: it does not model run-time
counts (tiles past a slot's count skipping) yet.
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
    "small": (512, 8, 2, 1024, 2048),
}
BLOCK_M, BLOCK_N, BLOCK_K, WARPS, STAGES = 128, 128, 64, 8, 3


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
    capacity = max(BLOCK_M, -(-biggest // BLOCK_M) * BLOCK_M)
    slots = world * local
    counts = torch.tensor([n for r in recv for n in r], dtype=torch.int32, device=device)
    a = torch.randn(slots * capacity, hidden, generator=gen).to(device, torch.bfloat16)
    c = torch.empty(slots * capacity, inter, device=device, dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    launch_args, meta = moe_fused.grouped_gemm_args(a, w_up, c, counts, capacity, BLOCK_M, BLOCK_N, BLOCK_K, sms)
    ms = time_ms(
        lambda: moe_gemm.moe_grouped_gemm[(sms,)](*launch_args, **meta, num_warps=WARPS, num_stages=STAGES),
        args.warmup,
        args.iters,
    )
    row["capacity"] = capacity
    row["syncopate_local_ms"] = ms
    row["syncopate_local_tflops"] = flop / ms / 1e9
    if args.fused:
        # The fused dispatch (the plan's copy-engine chunks + the transformed grouped GEMM); its
        # capacity is a multiple of 64 (the fused tiles' rows).
        fused_capacity = max(64, -(-biggest // 64) * 64)
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
        except Exception as exc:
            row["fused_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:  # the simulator, every slot full (it does not model run-time counts yet)
            pred = moe_fused.predict_at_capacity(world, local, fused_capacity, hidden, inter)
            row["sim_at_capacity_fused_ms"] = pred.fused_us / 1e3
            row["sim_at_capacity_sequential_ms"] = pred.sequential_us / 1e3
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
    parser.add_argument("--no-fused", dest="fused", action="store_false", help="skip the fused dispatch rows")
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    group = None
    if world > 1:
        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        dist.init_process_group("nccl")
        group = dist.group.WORLD
    device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for name in args.shapes.split(","):
        for skewed in (False, True):
            try:
                row = run_shape(name, skewed, group, rank, world, device, args)
            except Exception as exc:
                row = dict(
                    shape=name, routing="skewed" if skewed else "balanced", error=f"{type(exc).__name__}: {exc}"[:500]
                )
            row["device"] = torch.cuda.get_device_name(device)
            rows.append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)
    if rank == 0 and args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
