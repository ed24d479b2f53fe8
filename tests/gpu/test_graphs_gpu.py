"""GPU correctness of the call path under CUDA graphs (torchrun; one GPU per rank, or every rank
on one GPU: gpu_group.py).

    torchrun --nproc_per_node=W tests/gpu/test_graphs_gpu.py [--calls 200] [--results-file FILE]

For every op (ag_gemm, gemm_rs and gemm_ar with reduce-add chunks, gemm_rs / gemm_ar with the
staged epilogue) x backend (copy-engine, sm-copy; nccl where ranks have their own GPUs), fused:
- own-graph: the context replays its own graph; `calls` calls with fresh inputs written into the
  same buffers (the first runs eagerly and is captured, every later one is a replay), the output and
  the heap's buffers poisoned with NaN before each, each result against an fp32 reference;
- user-graph: the call captured once in the caller's torch.cuda.graph, then `calls` replays with
  fresh inputs copied in and the output poisoned before each;
- interleaved: own-graph calls, replays of a user graph and eager calls, alternating on one context;
- missing-chunk: a chunk that never moves, inside a replayed user graph and inside the context's
  own graph: the rank it should land on gets a WaitTimeoutError naming it from ctx.check().
NCCL contexts cannot be captured (their watchdog needs events of each call): there the context
must run eagerly and a call inside the caller's capture must raise UserError saying so.
Prints PASS/FAIL lines and `SUMMARY graphs world=W passed=P failed=F`; exits 1 on any failure.
"""

import argparse
import sys

import torch

import test_ops_gpu as base
from gpu_group import NCCL_SKIP_REASON, GpuGroup

OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "gemm_rs_epilogue", "gemm_ar_epilogue")
BACKENDS = ("copy-engine", "sm-copy", "nccl")
DTYPE = torch.bfloat16


def shape(op, world):
    m, k, n, _ = base.shapes(world)[0]  # every shard a multiple of every BLOCK_M: the epilogue runs
    return m, k, n


def fill_inputs(a, b, gen):
    """Fresh random values into the fixed operand buffers (what a graph's caller does)."""
    a.copy_(torch.randn(a.shape, generator=gen, device=a.device).to(a.dtype))
    k = b.shape[0]
    b.copy_((torch.randn(b.shape, generator=gen, device=b.device) / k**0.5).to(b.dtype))


def check_one(ctx, op, a, b, out, world, rank):
    return base.rel_error(out, base.reference(op, a, b, world, rank))


def own_graph(res, name, op, backend, group, world, rank, calls, gen):
    m, k, n = shape(op, world)
    ctx = base.make_ctx(op, group, m, k, n, DTYPE, backend, mode="fused", algorithm="direct", split=1)
    a, b = base.inputs(op, m, k, n, DTYPE, world, gen)
    out = base.out_buffer(op, m, n, world, DTYPE)
    if ctx.capture_refusal is not None:
        ctx(a, b, out=out)
        err = check_one(ctx, op, a, b, out, world, rank)
        res.record(
            name,
            ctx.call_mode == "eager" and err < base.TOLERANCE[DTYPE],
            f"call_mode={ctx.call_mode} rel_err={err:.2e} (not capturable: runs eagerly)",
        )
        return
    worst = 0.0
    for _ in range(calls):
        fill_inputs(a, b, gen)
        base.poison(ctx)
        out.fill_(float("nan"))
        ctx(a, b, out=out, check=False)
        worst = max(worst, check_one(ctx, op, a, b, out, world, rank))
    ctx.check()
    ok = worst < base.TOLERANCE[DTYPE] and ctx.call_mode == "graph" and ctx.graphs.captures == 1
    res.record(
        name,
        ok,
        f"calls={calls} worst_rel_err={worst:.2e} call_mode={ctx.call_mode} "
        f"captures={ctx.graphs.captures} split={ctx.graphs.split} {base.describe(ctx)}",
    )


def capture(ctx, a, b, out):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        ctx(a, b, out=out, check=False)
    return graph


def user_graph(res, name, op, backend, group, world, rank, calls, gen):
    from syncopate.errors import UserError

    m, k, n = shape(op, world)
    ctx = base.make_ctx(op, group, m, k, n, DTYPE, backend, mode="fused", algorithm="direct", split=1)
    a, b = base.inputs(op, m, k, n, DTYPE, world, gen)
    out = base.out_buffer(op, m, n, world, DTYPE)
    if ctx.capture_refusal is not None:
        try:
            capture(ctx, a, b, out)
            res.record(name, False, "a context that cannot be captured was captured")
        except UserError as exc:
            res.record(name, "cannot be captured in a CUDA graph" in str(exc), f"error={str(exc)[:160]!r}")
        torch.cuda.synchronize()
        return
    graph = capture(ctx, a, b, out)
    worst = 0.0
    for _ in range(calls):
        fill_inputs(a, b, gen)
        base.poison(ctx)
        out.fill_(float("nan"))
        graph.replay()
        worst = max(worst, check_one(ctx, op, a, b, out, world, rank))
    ctx.check()
    res.record(name, worst < base.TOLERANCE[DTYPE], f"replays={calls} worst_rel_err={worst:.2e} {base.describe(ctx)}")


def interleaved(res, name, op, backend, group, world, rank, gen, rounds=6):
    m, k, n = shape(op, world)
    ctx = base.make_ctx(op, group, m, k, n, DTYPE, backend, mode="fused", algorithm="direct", split=1)
    if ctx.capture_refusal is not None:
        return
    a, b = base.inputs(op, m, k, n, DTYPE, world, gen)
    out = base.out_buffer(op, m, n, world, DTYPE)
    graph = capture(ctx, a, b, out)
    worst, kinds = 0.0, []
    for i in range(3 * rounds):
        kind = ("own-graph", "user-graph", "eager")[i % 3]
        fill_inputs(a, b, gen)
        base.poison(ctx)
        out.fill_(float("nan"))
        if kind == "user-graph":
            graph.replay()
        else:
            ctx.graphs.enabled = kind == "own-graph"
            ctx(a, b, out=out, check=False)
        kinds.append(kind)
        worst = max(worst, check_one(ctx, op, a, b, out, world, rank))
    ctx.graphs.enabled = True
    ctx.check()
    res.record(
        name,
        worst < base.TOLERANCE[DTYPE],
        f"calls={len(kinds)} (own-graph, user-graph, eager in turn) worst_rel_err={worst:.2e}",
    )


def missing_chunk(res, name, op, backend, group, world, rank, gen):
    """A dropped chunk inside a replayed user graph, then inside the context's own graph."""
    if world < 2:
        return
    import syncopate as sy
    from syncopate.errors import WaitTimeoutError
    from syncopate.ops.ag_gemm import INPUT as AG_INPUT
    from syncopate.ops.staged_gemm import staged_plan

    m, k, n = shape(op, world)
    if op.endswith("_epilogue"):
        plan = staged_plan(
            world=world,
            m=m,
            n=n,
            split=1,
            dtype="bf16",
            backend=backend,
            collective="all-reduce" if op == "gemm_ar_epilogue" else "reduce-scatter",
        )
    else:
        coll, tensor, cols = {
            "ag_gemm": ("all-gather", "a", k),
            "gemm_rs": ("reduce-scatter", "c", n),
            "gemm_ar": ("all-reduce", "c", n),
        }[op]
        # The plan the context makes (AG+GEMM gathers from its input: ops/ag_gemm.py), so that
        # the chunk ids agree.
        plan = sy.make_plan(
            coll,
            world_size=world,
            shape=[m, cols],
            algorithm="direct",
            dtype="bf16",
            backend=backend,
            tensor=tensor,
            input=AG_INPUT if op == "ag_gemm" else "",
        )
    dropped = next(
        c
        for c in plan.chunks
        if c.dst == 1 and c.src != c.dst and (not op.endswith("_epilogue") or c.dst_tensor == "p")
    )
    ctx = base.make_ctx(
        op,
        group,
        m,
        k,
        n,
        DTYPE,
        backend,
        mode="fused",
        algorithm="direct",
        split=1,
        drop_chunk=dropped.id,
        wait_bound_ns=300_000_000,
    )
    if ctx.capture_refusal is not None:
        return
    a, b = base.inputs(op, m, k, n, DTYPE, world, gen)
    out = base.out_buffer(op, m, n, world, DTYPE)
    for where in ("user-graph", "own-graph"):
        raised = None
        try:
            if where == "user-graph":
                capture(ctx, a, b, out).replay()
            else:
                ctx(a, b, out=out, check=False)
            ctx.check()
        except WaitTimeoutError as exc:
            raised = str(exc)
        label = f"{name} {where} chunk={dropped.id} ({dropped.src}->{dropped.dst})"
        if rank == dropped.dst:
            res.record(label, raised is not None and f"chunk {dropped.id}" in raised, f"error={raised!r}")
        else:
            res.record(label + " (sender side)", True, f"error={raised!r}")
        base.GROUP.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--results-file", default="")
    parser.add_argument(
        "--hang-dump-s",
        type=float,
        default=0,
        help="print every thread's Python stack after this many seconds (diagnosing a hang)",
    )
    args = parser.parse_args()
    if args.hang_dump_s > 0:
        import faulthandler

        faulthandler.dump_traceback_later(args.hang_dump_s, repeat=True)
    group_info = GpuGroup()
    base.GROUP = group_info
    rank, world, group = group_info.rank, group_info.world, group_info.group
    log = open(f"{args.results_file}.rank{rank}", "w") if args.results_file else None
    res = base.Results(rank, log)
    if rank == 0:
        print(f"== mode: {group_info.mode}", flush=True)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2024 + rank)
    for op in OPS:
        for backend in BACKENDS:
            if not group_info.backend_usable(backend):
                if rank == 0:
                    print(f"SKIP graphs {op} backend={backend}: {NCCL_SKIP_REASON}", flush=True)
                continue
            tag = f"{op} backend={backend} world={world}"
            for section, fn in (
                ("own-graph", lambda n: own_graph(res, n, op, backend, group, world, rank, args.calls, gen)),
                ("user-graph", lambda n: user_graph(res, n, op, backend, group, world, rank, args.calls, gen)),
                ("interleaved", lambda n: interleaved(res, n, op, backend, group, world, rank, gen)),
                ("missing-chunk", lambda n: missing_chunk(res, n, op, backend, group, world, rank, gen)),
            ):
                name = f"graphs {section} {tag}"
                base.guarded(res, name, lambda: fn(name))
    totals = group_info.all_reduce_sum(torch.tensor([res.passed, res.failed], device="cuda"))
    if rank == 0:
        line = (
            f"SUMMARY graphs world={world} passed={int(totals[0])} failed={int(totals[1])} "
            f"device={torch.cuda.get_device_name()} mode={group_info.mode}"
        )
        print(line, flush=True)
        if log:
            log.write(line + "\n")
    group_info.barrier()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
