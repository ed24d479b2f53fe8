"""GPU correctness of the fused ops under torchrun (one process per GPU).

    torchrun --nproc_per_node=W tests/gpu/test_ops_gpu.py [--quick] [--results-file FILE]

Every op (ag_gemm, gemm_rs, gemm_ar) x backend (copy-engine, sm-copy, nccl) x shape (one a
multiple of the 128x128 tile, one not, one small-M that runs sequentially) x dtype (fp16,
bf16): random inputs drawn afresh for every call, the output and the symmetric buffers poisoned
with NaN before every call, relative error ||out - ref|| / ||ref|| against an fp32 torch
reference computed from the same inputs. Then 200 back-to-back calls per op and backend with no
reset and no check in between, each call's result compared afterwards; and the missing-chunk
test: a chunk never moves, the rank it should land on must get a WaitTimeoutError naming it.

Prints one line per case and a last line `SUMMARY world=W passed=P failed=F`; exits 1 on any
failure. Run it through tests/gpu/run.sh, which sets the environment (multicast off).
"""

import argparse
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from syncopate.errors import WaitTimeoutError
from syncopate.ops.ag_gemm import AgGemm
from syncopate.ops.gemm_ar import GemmAr
from syncopate.ops.gemm_rs import GemmRs

BACKENDS = ("copy-engine", "sm-copy", "nccl")
DTYPES = (torch.float16, torch.bfloat16)
# fp32 reference vs fp16/bf16 operands with fp32 accumulation (plus one rounding of each
# partial before a reduction): bounds from the operands' unit roundoff, with margin.
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


def shapes(world):
    # (M, K, N); M is a multiple of the world size. Per-rank rows: >= 128 for the fused path.
    return [(256 * world, 512, 768),        # multiple of the tile
            (255 * world, 328, 700),        # not a multiple of the tile (M, N and K)
            (48 * world, 256, 384)]         # small M: the sequential fallback


class Results:
    def __init__(self, rank, log):
        self.rank, self.log, self.passed, self.failed = rank, log, 0, 0

    def record(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        line = f"{'PASS' if ok else 'FAIL'} rank={self.rank} {name} {detail}"
        print(line, flush=True)
        if self.log:
            self.log.write(line + "\n")
            self.log.flush()


def rel_error(out, ref):
    if not torch.isfinite(out).all():
        return float("inf")
    return (torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref)).item()


def make_ctx(op, group, m, k, n, dtype, backend, **kw):
    cls = {"ag_gemm": AgGemm, "gemm_rs": GemmRs, "gemm_ar": GemmAr}[op]
    return cls(group, m=m, k=k, n=n, dtype=dtype, backend=backend, **kw)


def inputs(op, m, k, n, dtype, world, gen):
    dev = torch.device("cuda", torch.cuda.current_device())
    if op == "ag_gemm":
        a = torch.randn(m // world, k, generator=gen, device=dev).to(dtype)
    else:
        a = torch.randn(m, k, generator=gen, device=dev).to(dtype)
    b = (torch.randn(k, n, generator=gen, device=dev) / k ** 0.5).to(dtype)
    return a, b


def reference(op, a, b, world, rank):
    """fp32 torch result on this rank for the same inputs on every rank."""
    if op == "ag_gemm":
        parts = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(parts, a)
        return torch.cat(parts).float() @ b.float()
    partial = a.float() @ b.float()
    dist.all_reduce(partial)
    if op == "gemm_rs":
        rows = partial.shape[0] // world
        return partial[rank * rows:(rank + 1) * rows]
    return partial


def poison(ctx):
    buf = ctx.a_full if hasattr(ctx, "a_full") else ctx.c
    buf.fill_(float("nan"))


def out_buffer(op, m, n, world, dtype):
    rows = m // world if op == "gemm_rs" else m
    return torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")


def run_matrix(res, group, world, rank, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + rank)
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        for backend in BACKENDS:
            for (m, k, n) in shapes(world)[: 2 if quick else 3]:
                for dtype in DTYPES:
                    name = f"{op} backend={backend} M={m} K={k} N={n} {str(dtype)[6:]}"
                    try:
                        ctx = make_ctx(op, group, m, k, n, dtype, backend)
                        worst = 0.0
                        for _ in range(3):
                            a, b = inputs(op, m, k, n, dtype, world, gen)
                            poison(ctx)
                            out = out_buffer(op, m, n, world, dtype)
                            ctx(a, b, out=out)
                            worst = max(worst, rel_error(out, reference(op, a, b, world, rank)))
                        res.record(name, worst < TOLERANCE[dtype],
                                   f"rel_err={worst:.2e} path={ctx.kernel_origin}")
                    except Exception as exc:  # noqa: BLE001 - a failure is a result, keep going
                        res.record(name, False, f"{type(exc).__name__}: {exc}")
                        traceback.print_exc()
                    dist.barrier()


def run_custom_ops(res, group, world, rank):
    """The public torch custom ops (syncopate.ops.*), eager and under torch.compile."""
    import syncopate.ops as sops

    gen = torch.Generator(device="cuda")
    gen.manual_seed(7 + rank)
    m, k, n = shapes(world)[0]
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        fn = getattr(sops, op)
        for mode in ("eager", "compiled"):
            name = f"custom-op {op} {mode} M={m} K={k} N={n} bf16"
            try:
                a, b = inputs(op, m, k, n, torch.bfloat16, world, gen)
                call = fn if mode == "eager" else torch.compile(fn, fullgraph=True)
                out = call(a, b)
                err = rel_error(out, reference(op, a, b, world, rank))
                res.record(name, err < TOLERANCE[torch.bfloat16], f"rel_err={err:.2e}")
            except Exception as exc:  # noqa: BLE001
                res.record(name, False, f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
            dist.barrier()


def run_back_to_back(res, group, world, rank, calls=200):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99 + rank)
    m, k, n = shapes(world)[1]
    dtype = torch.bfloat16
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):
        for backend in BACKENDS:
            name = f"back-to-back calls={calls} {op} backend={backend} M={m} K={k} N={n}"
            try:
                ctx = make_ctx(op, group, m, k, n, dtype, backend)
                ins, outs = [], []
                start = time.perf_counter()
                for _ in range(calls):
                    a, b = inputs(op, m, k, n, dtype, world, gen)
                    out = out_buffer(op, m, n, world, dtype)
                    ctx(a, b, out=out, check=False)
                    ins.append((a, b))
                    outs.append(out)
                ctx.check()
                elapsed = time.perf_counter() - start
                worst = max(rel_error(o, reference(op, a, b, world, rank)) for (a, b), o in zip(ins, outs))
                res.record(name, worst < TOLERANCE[dtype],
                           f"worst_rel_err={worst:.2e} wall={elapsed:.2f}s path={ctx.kernel_origin}")
            except Exception as exc:  # noqa: BLE001
                res.record(name, False, f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
            dist.barrier()


def run_missing_chunk(res, group, world, rank):
    if world < 2:
        return
    m, k, n = shapes(world)[0]
    import syncopate as sy

    for op in ("ag_gemm", "gemm_rs"):
        for backend in BACKENDS:
            coll, tensor = ("all-gather", "a") if op == "ag_gemm" else ("reduce-scatter", "c")
            plan = sy.make_plan(coll, world_size=world, shape=[m, k if op == "ag_gemm" else n],
                                algorithm="direct", dtype="bf16", backend=backend, tensor=tensor)
            dropped = next(c for c in plan.chunks if c.dst == 1 and c.src != c.dst)
            name = f"missing-chunk {op} backend={backend} chunk={dropped.id} ({dropped.src}->{dropped.dst})"
            try:
                ctx = make_ctx(op, group, m, k, n, torch.bfloat16, backend, drop_chunk=dropped.id,
                               wait_bound_ns=300_000_000)
                a, b = inputs(op, m, k, n, torch.bfloat16, world, torch.Generator(device="cuda"))
                try:
                    ctx(a, b, check=True)
                    raised = None
                except WaitTimeoutError as exc:
                    raised = str(exc)
                if rank == dropped.dst:
                    ok = raised is not None and f"chunk {dropped.id}" in raised
                    res.record(name, ok, f"error={raised!r}")
                else:
                    res.record(name + " (sender side)", True, f"error={raised!r}")
            except Exception as exc:  # noqa: BLE001
                res.record(name, False, f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
            dist.barrier()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--results-file", default="")
    parser.add_argument("--only", default="matrix,custom-ops,back-to-back,missing-chunk")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.get_world_size()
    log = open(f"{args.results_file}.rank{rank}", "w") if args.results_file else None
    res = Results(rank, log)
    group = dist.group.WORLD
    parts = args.only.split(",")
    if "matrix" in parts:
        run_matrix(res, group, world, rank, args.quick)
    if "custom-ops" in parts:
        run_custom_ops(res, group, world, rank)
    if "back-to-back" in parts:
        run_back_to_back(res, group, world, rank)
    if "missing-chunk" in parts:
        run_missing_chunk(res, group, world, rank)
    totals = torch.tensor([res.passed, res.failed], device="cuda")
    dist.all_reduce(totals)
    if rank == 0:
        line = f"SUMMARY world={world} passed={int(totals[0])} failed={int(totals[1])} device={torch.cuda.get_device_name()}"
        print(line, flush=True)
        if log:
            log.write(line + "\n")
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
