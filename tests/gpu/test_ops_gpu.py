"""GPU correctness of the fused ops under torchrun (one process per GPU).

    torchrun --nproc_per_node=W tests/gpu/test_ops_gpu.py [--quick] [--results-file FILE] [--list]

One GPU per rank where the machine has W GPUs, else every rank on the GPUs there are (gpu_group.py:
gloo bootstrap, NCCL rows skipped by name; correctness only).

matrix: every op (ag_gemm, gemm_rs, gemm_ar) x backend (copy-engine, sm-copy, nccl) x mode
(fused, sequential) x shape x dtype (fp16, bf16) x B layout (kn: [K, N] row-major; nk: the
transpose view of an nn.Linear weight [N, K]). gemm_rs and gemm_ar run with reduce="chunks"
(reduce-add chunks); gemm_rs_epilogue / gemm_ar_epilogue are GemmRs / GemmAr(reduce="epilogue")
(the staged partials added in the fused GEMM's epilogue; GEMM+AR then gathers the reduced boxes
by copy chunks), fused only: where the shard is a multiple of every BLOCK_M it must run the
staged kernel; elsewhere reduce="epilogue" must be refused by name and reduce="auto" must fall
back to chunks and say why in ctx.reason, then run correctly. Shapes (M is a multiple of the world size):
a multiple of every block; one a multiple of none that TMA still describes; one whose N makes
the row pitch unaligned for TMA (the transformed pointer kernel) with small M. Random inputs
drawn afresh for every call, the output and the symmetric buffers poisoned with NaN before every
call, relative error ||out - ref|| / ||ref|| against an fp32 torch reference from the same inputs.
algorithms: ring and bidir plans with split factors, fused. auto: the simulator's choice
(everything "auto"), including shapes where it fuses. back-to-back: 200 calls per op and backend
with no reset and no check in between, each call's result compared afterwards. missing-chunk: a
chunk never moves; the rank it should land on must get a WaitTimeoutError naming it.

--quick: bf16 only, the two unaligned shapes (the epilogue rows: the aligned one and one
unaligned), nk only where fused, the copy-engine for the back-to-back calls (about a quarter of
the cases). --list prints the cases and exits (no GPU).

Prints one line per case and a last line `SUMMARY world=W passed=P failed=F`; exits 1 on any
failure. Run it through tests/gpu/run.sh, which sets the environment (multicast off).
"""

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

# The package staged by run.sh has no calib/ (an installed one does): use the repository's.
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))
# The staged epilogue is opt-in for reduce="auto" until its speed is measured on several GPUs (ops/staged_gemm.py):
# here auto may take it, so its choice is exercised too.
os.environ.setdefault("SYNCOPATE_AUTO_STAGED", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

BACKENDS = ("copy-engine", "sm-copy", "nccl")
MODES = ("fused", "sequential")
LAYOUTS = ("kn", "nk")
DTYPES = (torch.float16, torch.bfloat16)
OPS = ("ag_gemm", "gemm_rs", "gemm_ar")
# GemmRs / GemmAr(reduce="epilogue"): own rows in every section but auto and custom-ops (the
# custom op is auto).
EPILOGUE_OPS = ("gemm_rs_epilogue", "gemm_ar_epilogue")
MATRIX_OPS = OPS + EPILOGUE_OPS
# fp32 reference vs fp16/bf16 operands with fp32 accumulation (plus one rounding of each
# partial before a reduction): bounds from the operands' unit roundoff, with margin.
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


def shapes(world):
    """(M, K, N, what); M is a multiple of the world size."""
    return [
        (256 * world, 512, 768, "multiple of every block"),
        (255 * world, 328, 712, "multiple of no block, TMA"),
        (50 * world, 200, 700, "small M, N pitch not 16-byte aligned: pointer kernel"),
    ]


def auto_shapes(world):
    # Large enough that "auto" fuses AG+GEMM (ops/choice.py); GEMM+RS/AR choose NCCL + mm there
    # since the measured reduce-add tail was added to the choice.
    return shapes(world) + [(4096 * world, 8192, 8192, "large: AG+GEMM fuses")]


def matrix_cases(world, quick):
    """(op, backend, mode, (m, k, n, what), dtype, layout) of the matrix."""
    out = []
    for op in MATRIX_OPS:
        for backend in BACKENDS:
            for mode in ("fused",) if op in EPILOGUE_OPS else MODES:
                # --quick keeps the unaligned shapes; the epilogue also keeps the one it runs on.
                quick_shapes = shapes(world)[:2] if op in EPILOGUE_OPS else shapes(world)[1:]
                for shape in quick_shapes if quick else shapes(world):
                    for dtype in (torch.bfloat16,) if quick else DTYPES:
                        for layout in LAYOUTS:
                            if quick and mode == "sequential" and layout == "nk":
                                continue
                            out.append((op, backend, mode, shape, dtype, layout))
    return out


def algorithm_cases(quick):
    """(op, algorithm, split), fused with the copy-engine."""
    combos = [("ring", 2), ("bidir", 1)] if quick else [("ring", 1), ("ring", 2), ("bidir", 1), ("bidir", 2)]
    splits = (2,) if quick else (2, 4)  # sub-chunks of the staged plans
    staged = [(op, "direct", split) for op in EPILOGUE_OPS for split in splits]
    return [(op, alg, split) for op in OPS for alg, split in combos] + staged


def base_op(op):
    """The op whose inputs, reference and output shape a case uses."""
    return op.removesuffix("_epilogue")


def epilogue_applies(m, world):
    """Whether the shard is a multiple of every BLOCK_M the GEMM may pick (kernels/configs.py:
    128 and 64), so that GemmRs / GemmAr(reduce="epilogue") must run the staged kernel."""
    return (m // world) % 256 == 0


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
    from syncopate.ops.ag_gemm import AgGemm
    from syncopate.ops.gemm_ar import GemmAr
    from syncopate.ops.gemm_rs import GemmRs

    cls = {"ag_gemm": AgGemm, "gemm_rs": GemmRs, "gemm_ar": GemmAr}[base_op(op)]
    if op in ("gemm_rs", "gemm_ar"):
        kw.setdefault("reduce", "chunks")
    elif op in EPILOGUE_OPS:
        kw.setdefault("reduce", "epilogue")
    return cls(group, m=m, k=k, n=n, dtype=dtype, backend=backend, **kw)


def inputs(op, m, k, n, dtype, world, gen, layout="kn"):
    op = base_op(op)
    dev = torch.device("cuda", torch.cuda.current_device())
    rows = m // world if op == "ag_gemm" else m
    a = torch.randn(rows, k, generator=gen, device=dev).to(dtype)
    if layout == "nk":  # an nn.Linear weight [N, K], passed as its transpose view
        b = (torch.randn(n, k, generator=gen, device=dev) / k**0.5).to(dtype).t()
    else:
        b = (torch.randn(k, n, generator=gen, device=dev) / k**0.5).to(dtype)
    return a, b


GROUP = None  # the GpuGroup of this process (main())


def reference(op, a, b, world, rank):
    """fp32 torch result on this rank for the same inputs on every rank."""
    op = base_op(op)
    if op == "ag_gemm":
        return GROUP.all_gather_cat(a).float() @ b.float()
    partial = GROUP.all_reduce_sum(a.float() @ b.float())
    if op == "gemm_rs":
        rows = partial.shape[0] // world
        return partial[rank * rows : (rank + 1) * rows]
    return partial


def poison(ctx):
    # The heap's buffers of the context: gathered A, or C and (staged GEMM+RS/AR) the staging p.
    for name in ("a_full", "c", "p"):
        buf = getattr(ctx, name, None)
        if isinstance(buf, torch.Tensor):
            buf.fill_(float("nan"))


def out_buffer(op, m, n, world, dtype):
    rows = m // world if base_op(op) == "gemm_rs" else m
    return torch.full((rows, n), float("nan"), dtype=dtype, device="cuda")


def describe(ctx):
    return (
        f"decision={ctx.decision} origin={ctx.kernel_origin} kernel={ctx.kernel_name} "
        f"backend={ctx.backend} algorithm={ctx.algorithm} split={ctx.split} order={ctx.tile_order} "
        f"gemm={ctx.gemm_config} reduce={getattr(ctx, 'reduce', '-')}"
    )


def check_calls(res, name, ctx, op, m, k, n, dtype, world, rank, gen, layout, calls=3, expect=None, expect_reduce=None):
    """`calls` checked calls on poisoned buffers; records the worst relative error."""
    worst = 0.0
    for _ in range(calls):
        a, b = inputs(op, m, k, n, dtype, world, gen, layout)
        poison(ctx)
        out = out_buffer(op, m, n, world, dtype)
        ctx(a, b, out=out)
        worst = max(worst, rel_error(out, reference(op, a, b, world, rank)))
    ok = worst < TOLERANCE[dtype]
    detail = f"rel_err={worst:.2e} {describe(ctx)}"
    if expect is not None and ctx.decision != expect:
        ok, detail = False, f"expected decision {expect}, got: {detail}"
    if expect_reduce is not None and ctx.reduce != expect_reduce:
        ok, detail = False, f"expected reduce={expect_reduce}, got: {detail}; reason: {ctx.reason}"
    if expect_reduce == "epilogue" and ctx.kernel_name != "gemm_reduce_kernel":
        ok, detail = False, f"the staged context runs {ctx.kernel_name}: {detail}"
    if expect_reduce == "chunks" and op in EPILOGUE_OPS and "reduction by reduce-add chunks:" not in ctx.reason:
        ok, detail = False, f"the fallback to chunks does not say why: {ctx.reason!r}"
    if ctx.decision == "fused" and ctx.kernel_origin != "transformer":
        ok, detail = False, f"fused without the transformer's kernel: {detail}"
    res.record(name, ok, detail)


def guarded(res, name, fn):
    """Runs one case; an exception is a failed result, then every rank meets at a barrier."""
    start = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - a failure is a result, keep going
        res.record(name, False, f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
    dist.barrier()
    return time.perf_counter() - start


def run_matrix(res, group, world, rank, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + rank)
    for op, backend, mode, (m, k, n, _), dtype, layout in matrix_cases(world, quick):
        name = f"{op} backend={backend} mode={mode} M={m} K={k} N={n} {str(dtype)[6:]} b={layout}"

        def case():
            if op in EPILOGUE_OPS and not epilogue_applies(m, world):
                epilogue_refused_by_name(res, name, op, group, m, k, n, dtype, backend, layout)
                ctx = make_ctx(
                    op,
                    group,
                    m,
                    k,
                    n,
                    dtype,
                    backend,
                    mode=mode,
                    b_layout=layout,
                    algorithm="direct",
                    split=1,
                    reduce="auto",
                )
                check_calls(
                    res, name, ctx, op, m, k, n, dtype, world, rank, gen, layout, expect=mode, expect_reduce="chunks"
                )
                return
            ctx = make_ctx(op, group, m, k, n, dtype, backend, mode=mode, b_layout=layout, algorithm="direct", split=1)
            check_calls(
                res,
                name,
                ctx,
                op,
                m,
                k,
                n,
                dtype,
                world,
                rank,
                gen,
                layout,
                expect=mode,
                expect_reduce="epilogue" if op in EPILOGUE_OPS else None,
            )

        guarded(res, name, case)


def epilogue_refused_by_name(res, name, op, group, m, k, n, dtype, backend, layout):
    """GemmRs / GemmAr(reduce="epilogue") on a shape the staged kernel cannot run: a UserError
    naming why, raised on every rank alike before any GPU work or collective."""
    from syncopate.errors import UserError

    try:
        make_ctx(op, group, m, k, n, dtype, backend, mode="fused", b_layout=layout, algorithm="direct", split=1)
        res.record(
            name + " (refusal)",
            False,
            "reduce='epilogue' was accepted for a shard that is not a multiple of every BLOCK_M",
        )
    except UserError as exc:
        ok = "reduce='epilogue' cannot run here" in str(exc)
        res.record(name + " (refusal)", ok, f"error={str(exc)!r}")


def run_algorithms(res, group, world, rank, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321 + rank)
    for op, algorithm, split in algorithm_cases(quick):
        m, k, n, _ = shapes(world)[0 if op in EPILOGUE_OPS else 1]  # the staged plan needs whole tiles per shard
        name = f"{op} algorithm={algorithm} split={split} backend=copy-engine mode=fused M={m} K={k} N={n} bf16"

        def case():
            ctx = make_ctx(
                op, group, m, k, n, torch.bfloat16, "copy-engine", mode="fused", algorithm=algorithm, split=split
            )
            check_calls(
                res,
                name,
                ctx,
                op,
                m,
                k,
                n,
                torch.bfloat16,
                world,
                rank,
                gen,
                "kn",
                expect="fused",
                expect_reduce="epilogue" if op in EPILOGUE_OPS else None,
            )

        guarded(res, name, case)


def run_auto(res, group, world, rank, quick):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(555 + rank)
    cases = auto_shapes(world)
    for op in OPS:
        for m, k, n, what in cases[2:] if quick else cases:
            name = f"{op} auto M={m} K={k} N={n} bf16 ({what})"

            def case():
                ctx = make_ctx(op, group, m, k, n, torch.bfloat16, "auto")
                check_calls(res, name, ctx, op, m, k, n, torch.bfloat16, world, rank, gen, "kn", calls=2)
                if rank == 0:
                    print(
                        f"  auto: {name}: {ctx.reason}; predicted_us="
                        f"{ {key: round(v, 1) for key, v in ctx.predicted_us.items()} }",
                        flush=True,
                    )

            guarded(res, name, case)


def run_custom_ops(res, group, world, rank):
    """The public torch custom ops (syncopate.ops.*), eager and under torch.compile, with both
    B layouts (each keys its own cached context)."""
    import syncopate.ops as sops

    gen = torch.Generator(device="cuda")
    gen.manual_seed(7 + rank)
    m, k, n, _ = shapes(world)[0]
    for op in OPS:
        fn = getattr(sops, op)
        for mode, layout in (("eager", "kn"), ("eager", "nk"), ("compiled", "kn")):
            name = f"custom-op {op} {mode} M={m} K={k} N={n} bf16 b={layout}"

            def case():
                a, b = inputs(op, m, k, n, torch.bfloat16, world, gen, layout)
                call = fn if mode == "eager" else torch.compile(fn, fullgraph=True)
                out = call(a, b)
                err = rel_error(out, reference(op, a, b, world, rank))
                res.record(name, err < TOLERANCE[torch.bfloat16], f"rel_err={err:.2e}")

            guarded(res, name, case)


def run_back_to_back(res, group, world, rank, quick, calls=200):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99 + rank)
    dtype = torch.bfloat16
    for op in MATRIX_OPS:
        m, k, n, _ = shapes(world)[0 if op in EPILOGUE_OPS else 1]
        for backend in ("copy-engine",) if quick else BACKENDS:
            for mode in ("fused",) if quick or op in EPILOGUE_OPS else MODES:
                name = f"back-to-back calls={calls} {op} backend={backend} mode={mode} M={m} K={k} N={n}"

                def case():
                    ctx = make_ctx(op, group, m, k, n, dtype, backend, mode=mode, algorithm="direct", split=1)
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
                    staged_ok = op not in EPILOGUE_OPS or ctx.reduce == "epilogue"
                    res.record(
                        name,
                        worst < TOLERANCE[dtype] and ctx.decision == mode and staged_ok,
                        f"worst_rel_err={worst:.2e} wall={elapsed:.2f}s {describe(ctx)}",
                    )

                guarded(res, name, case)


def run_missing_chunk(res, group, world, rank, quick):
    if world < 2:
        return
    import syncopate as sy
    from syncopate.errors import WaitTimeoutError
    from syncopate.ops.ag_gemm import INPUT as AG_INPUT
    from syncopate.ops.staged_gemm import staged_plan

    for op in ("ag_gemm", "gemm_rs") + EPILOGUE_OPS:
        m, k, n, _ = shapes(world)[0 if op in EPILOGUE_OPS else 1]  # the matrix's shapes: kernels compiled
        for backend in BACKENDS:
            for mode in ("fused",) if quick or op in EPILOGUE_OPS else MODES:
                coll, tensor = ("all-gather", "a") if op == "ag_gemm" else ("reduce-scatter", "c")
                if op in EPILOGUE_OPS:
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
                    plan = sy.make_plan(
                        coll,
                        world_size=world,
                        shape=[m, k if op == "ag_gemm" else n],
                        algorithm="direct",
                        dtype="bf16",
                        backend=backend,
                        tensor=tensor,
                        input=AG_INPUT if op == "ag_gemm" else "",  # the plan the context makes
                    )
                # Staged plans: a staging chunk (into p), which rank 1's own tiles wait for.
                dropped = next(
                    c
                    for c in plan.chunks
                    if c.dst == 1 and c.src != c.dst and (op not in EPILOGUE_OPS or c.dst_tensor == "p")
                )
                name = (
                    f"missing-chunk {op} backend={backend} mode={mode} chunk={dropped.id} "
                    f"({dropped.src}->{dropped.dst})"
                )

                def case():
                    ctx = make_ctx(
                        op,
                        group,
                        m,
                        k,
                        n,
                        torch.bfloat16,
                        backend,
                        mode=mode,
                        algorithm="direct",
                        split=1,
                        drop_chunk=dropped.id,
                        wait_bound_ns=300_000_000,
                    )
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

                guarded(res, name, case)


SECTIONS = ("matrix", "algorithms", "auto", "custom-ops", "back-to-back", "missing-chunk")


def list_cases(world, quick):
    for op, backend, mode, (m, k, n, what), dtype, layout in matrix_cases(world, quick):
        print(f"matrix {op} {backend} {mode} M={m} K={k} N={n} {str(dtype)[6:]} b={layout} ({what})")
    for op, alg, split in algorithm_cases(quick):
        print(f"algorithms {op} {alg} split={split}")
    for m, k, n, what in auto_shapes(world)[2:] if quick else auto_shapes(world):
        print(f"auto x3 ops M={m} K={k} N={n} ({what})")
    print(f"matrix cases: {len(matrix_cases(world, quick))}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--results-file", default="")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated, of {SECTIONS}")
    parser.add_argument(
        "--list",
        type=int,
        metavar="WORLD",
        default=0,
        help="print the cases for this world size and exit (no GPU needed)",
    )
    args = parser.parse_args()
    parts = args.only.split(",")
    unknown = [p for p in parts if p not in SECTIONS]
    if unknown:
        parser.error(f"--only: unknown sections {unknown}; choose from {SECTIONS}")
    if args.list:
        list_cases(args.list, args.quick)
        return
    global GROUP, BACKENDS
    from gpu_group import NCCL_SKIP_REASON, GpuGroup

    GROUP = GpuGroup()
    rank, world, group = GROUP.rank, GROUP.world, GROUP.group
    log = open(f"{args.results_file}.rank{rank}", "w") if args.results_file else None
    res = Results(rank, log)
    if rank == 0:
        print(f"== mode: {GROUP.mode}", flush=True)
    if GROUP.shared:
        BACKENDS = tuple(b for b in BACKENDS if GROUP.backend_usable(b))
        if rank == 0:
            print(f"SKIP every backend=nccl row: {NCCL_SKIP_REASON}", flush=True)
    runners = {
        "matrix": lambda: run_matrix(res, group, world, rank, args.quick),
        "algorithms": lambda: run_algorithms(res, group, world, rank, args.quick),
        "auto": lambda: run_auto(res, group, world, rank, args.quick),
        "custom-ops": lambda: run_custom_ops(res, group, world, rank),
        "back-to-back": lambda: run_back_to_back(res, group, world, rank, args.quick),
        "missing-chunk": lambda: run_missing_chunk(res, group, world, rank, args.quick),
    }
    for section in SECTIONS:
        if section in parts:
            start = time.perf_counter()
            runners[section]()
            if rank == 0:
                print(f"== section {section}: {time.perf_counter() - start:.1f}s", flush=True)
    totals = GROUP.all_reduce_sum(torch.tensor([res.passed, res.failed], device="cuda"))
    if rank == 0:
        line = (
            f"SUMMARY world={world} passed={int(totals[0])} failed={int(totals[1])} "
            f"device={torch.cuda.get_device_name()} mode={GROUP.mode}"
        )
        print(line, flush=True)
        if log:
            log.write(line + "\n")
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
