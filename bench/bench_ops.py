"""Tensor-parallel ops, every way of running them, timed in one run (one process per GPU).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 bench/bench_ops.py [--quick] [--ops ag_gemm,gemm_rs,gemm_ar]

For each row of bench/shapes.py at this world size: cuBLAS GEMM alone and the NCCL collective
alone (their max is the floor: perfect overlap), sequential NCCL + cuBLAS, PyTorch async-TP
(torch.ops.symm_mem fused ops), two-stream kernel-level overlap (collective pieces on NCCL's
high-priority stream, GEMM pieces on the compute stream) and Syncopate's fused op when
syncopate.ops imports. Every variant's output is checked (NaN-poisoned where it writes into
a buffer; relative error vs an fp32 reference) before it is timed. Times: median over samples
of each rank's CUDA-event time, then the max over ranks. Rank 0 prints ratios and writes JSON
and a PNG plot under --out ($OUT if set, else bench/results/).
"""

from __future__ import annotations

import os

# Multicast (NVLS) off in every process before NCCL or symmetric memory initialise: on the
# lent machines it can take the host's shared GPUs out of service.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import op_variants  # noqa: E402
import shapes  # noqa: E402
import timing  # noqa: E402
from local_import import load_ops  # noqa: E402

VARIANTS = ("gemm", "collective", "sequential", "async_tp", "two_stream", "syncopate")
ERROR_LIMIT = {"ag_gemm": 1e-2, "gemm_rs": 2e-2, "gemm_ar": 2e-2}  # bf16 sums round per hop


def make_inputs(problem: shapes.Problem, op: str, rank: int, world: int, dtype, device):
    """This rank's operands (fresh random data) and fp32 references for its outputs:
    {"op": the op's result, "gemm": this rank's GEMM alone, "collective": the collective alone
    (run on the GEMM's output, or on A for the all-gather)}."""
    seed = zlib.crc32(f"{op} {problem.label} {problem.m} {problem.k} {problem.n}".encode())
    own = torch.Generator(device=device).manual_seed(seed + 7919 * (rank + 1))
    shared = torch.Generator(device=device).manual_seed(seed)  # same stream on every rank

    def rand(gen, *size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(dtype)

    def weight(gen, k, n):  # [K, N]; a transposed [N, K] nn.Linear weight for "nk" rows
        return rand(gen, n, k).t() if problem.b_layout == "nk" else rand(gen, k, n)

    if op == "ag_gemm":
        a = rand(own, problem.m // world, problem.k)
        b = weight(shared, problem.k, problem.n)  # replicated: identical on every rank
        gathered = torch.empty((problem.m, problem.k), dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, a)
        ref = gathered.float() @ b.float()
        return a, b, {"op": ref, "gemm": ref, "collective": gathered}
    k_local = problem.k // world
    a = rand(own, problem.m, k_local)
    b = weight(own, k_local, problem.n)
    local = a.float() @ b.float()
    if op == "gemm_rs":
        ref = torch.empty((problem.m // world, problem.n), dtype=torch.float32, device=device)
        dist.reduce_scatter_tensor(ref, local)
    else:
        ref = local.clone()
        dist.all_reduce(ref)
    return a, b, {"op": ref, "gemm": local, "collective": ref}


def check(variant, ref: torch.Tensor, op: str) -> tuple[float, str | None]:
    """Run once with the output poisoned (where it is not also an input); returns
    (relative error, failure or None)."""
    fn, get_out, poison = variant
    try:
        if poison:
            get_out().fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        out = get_out()
    except Exception as error:  # a variant that cannot run here is reported, not fatal
        return math.inf, f"{type(error).__name__}: {str(error)[:300]}"
    if out.shape != ref.shape:
        return math.inf, f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    err = timing.relative_error(out, ref)
    return err, None if err < ERROR_LIMIT[op] else f"relative error {err:.3g}"


def time_variant(fn, samples: int, warmup: int) -> float:
    """This rank's median ms; every sample starts after a GPU-side barrier (tiny all-reduce)."""
    token = torch.zeros(1, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    values = []
    for _ in range(samples):
        dist.all_reduce(token)
        values.append(timing.time_once_ms(fn))
    return statistics.median(values)


def max_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def any_rank(flag: bool) -> bool:
    t = torch.tensor([1 if flag else 0], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def bench_row(problem, op, args, ops_module, ops_reason, dtype, rank, world) -> dict:
    device = torch.device("cuda")
    a, b, refs = make_inputs(problem, op, rank, world, dtype, device)
    variants = op_variants.BUILDERS[op](a, b, args.chunks, ops_module, ops_reason)
    row = {"op": op, "world": world, "m": problem.m, "k": problem.k, "n": problem.n,
           "b_layout": problem.b_layout, "label": problem.label, "variants": {}}
    for name in VARIANTS:
        variant = variants[name]
        if isinstance(variant, str):
            row["variants"][name] = {"skipped": variant}
            continue
        err, failure = check(variant, refs.get(name, refs["op"]), op)
        err = max_over_ranks(err)
        # Every rank must agree to time a variant: a collective run on some ranks only hangs.
        if any_rank(failure is not None):
            row["variants"][name] = {"rel_error": err, "failed": failure or "failed on a peer"}
            continue
        ms = max_over_ranks(time_variant(variant[0], args.samples, args.warmup))
        row["variants"][name] = {"ms": ms, "rel_error": err}
    v = {n: x["ms"] for n, x in row["variants"].items() if "ms" in x}
    if "gemm" in v and "collective" in v:
        row["floor_ms"] = max(v["gemm"], v["collective"])
        row["ratio_to_floor"] = {n: v[n] / row["floor_ms"] for n in v
                                 if n not in ("gemm", "collective")}
    if "sequential" in v:
        row["speedup_over_sequential"] = {n: v["sequential"] / v[n] for n in v
                                          if n not in ("gemm", "collective", "sequential")}
    del a, b, refs, variants
    torch.cuda.empty_cache()
    return row


def print_table(rows: list[dict]) -> None:
    shown = ("sequential", "async_tp", "two_stream", "syncopate")
    print(f"{'op':8} {'M x K x N':>20} {'B':>2} {'gemm':>7} {'coll':>7} {'floor':>7} "
          + " ".join(f"{n + '/fl':>14}" for n in shown))
    for r in rows:
        v = r["variants"]
        ratio = r.get("ratio_to_floor", {})
        cells = []
        for n in shown:
            cells.append(f"{ratio[n]:>14.3f}" if n in ratio else f"{'-':>14}")
        print(f"{r['op']:8} {r['m']:>6}x{r['k']:>6}x{r['n']:>6} {r['b_layout']:>2} "
              f"{v['gemm'].get('ms', math.nan):>7.3f} {v['collective'].get('ms', math.nan):>7.3f} "
              f"{r.get('floor_ms', math.nan):>7.3f} " + " ".join(cells))
    reasons = {f"{n}: {x['skipped']}" for r in rows for n, x in r["variants"].items()
               if "skipped" in x}
    for reason in sorted(reasons):
        print(f"skipped {reason}")
    failures = [(r["op"], r["label"], n, x["failed"]) for r in rows
                for n, x in r["variants"].items() if "failed" in x]
    print(f"correctness failures: {failures if failures else 'none'}")


def plot(rows: list[dict], path: Path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        return f"no plot: {error}"
    shown = [n for n in ("sequential", "async_tp", "two_stream", "syncopate")
             if any(n in r.get("ratio_to_floor", {}) for r in rows)]
    plotted = [r for r in rows if "ratio_to_floor" in r]
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(plotted)), 5))
    width = 0.8 / max(1, len(shown))
    for i, name in enumerate(shown):
        xs = [j + i * width for j in range(len(plotted))]
        ax.bar(xs, [r["ratio_to_floor"].get(name, 0) for r in plotted], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + 0.4 for j in range(len(plotted))])
    ax.set_xticklabels([f"{r['op']} {r['m']}x{r['k']}x{r['n']}" for r in plotted],
                       rotation=90, fontsize=6)
    ax.set_ylabel("time / max(GEMM, collective)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="ag_gemm,gemm_rs,gemm_ar")
    parser.add_argument("--quick", action="store_true", help="baselines rows only")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=4, help="pieces per shard, two_stream")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    parser.add_argument("--out", default=os.environ.get("OUT") or
                        str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in op_variants.BUILDERS]
    if unknown:
        parser.error(f"unknown op(s) {unknown}; choose from {sorted(op_variants.BUILDERS)}")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    problems = shapes.op_problems(world)
    if args.quick:
        problems = [p for p in problems if p.label == "baseline"]
    todo = [(p, op) for p in problems for op in ops
            if (op == "ag_gemm") == (p.op == "ag_gemm")]  # gemm_ar reuses gemm_rs's rows
    if args.list:
        for p, op in todo:
            print(op, p.m, p.k, p.n, p.b_layout, p.label)
        return 0
    if not torch.cuda.is_available():
        print("bench_ops: no CUDA device", file=sys.stderr)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    options = dist.ProcessGroupNCCL.Options()
    options.is_high_priority_stream = True  # collectives ahead of compute when they overlap
    dist.init_process_group("nccl", pg_options=options,
                            device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references must be fp32
    ops_module, ops_reason = load_ops()
    props = torch.cuda.get_device_properties(local_rank)
    if rank == 0:
        print(f"world {world} x {props.name}; torch {torch.__version__}; {len(todo)} rows; "
              f"{ops_reason}", flush=True)
    rows = []
    for problem, op in todo:
        row = bench_row(problem, op, args, ops_module, ops_reason, torch.bfloat16, rank, world)
        rows.append(row)
        if rank == 0:
            seq = row.get("ratio_to_floor", {}).get("sequential", math.nan)
            print(f"  {op} {problem.m}x{problem.k}x{problem.n} {problem.label}: "
                  f"sequential/floor {seq:.3f}", flush=True)
    if rank == 0:
        now = datetime.datetime.now(datetime.timezone.utc)
        kind = f"{props.name.lower().replace('nvidia ', 'nvidia-').replace(' ', '-')}-x{world}"
        report = {"benchmark": "bench_ops", "device": props.name, "device_kind": kind,
                  "world": world, "date": now.isoformat(timespec="seconds"),
                  "torch": torch.__version__, "nccl": str(torch.cuda.nccl.version()),
                  "env": {n: os.environ.get(n) for n in ("NCCL_NVLS_ENABLE",
                          "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")},
                  "chunks": args.chunks, "samples": args.samples, "syncopate_ops": ops_reason,
                  "rows": rows}
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"bench_ops_{kind}_{now:%Y-%m-%d_%H%M}"
        (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=1))
        problem = plot(rows, out_dir / f"{stem}.png")
        print(f"wrote {out_dir / stem}.json" + (f" ({problem})" if problem else " and .png"))
        print_table(rows)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
