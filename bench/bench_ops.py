"""Tensor-parallel ops, every way of running them, timed in one run (one process per GPU).

The one command (from the repository root of a device machine; builds the runtime first):

    bench/run_bench.sh [--quick] [bench_ops.py options]      # torchrun over every visible GPU

which comes down to (with the compiled package on PYTHONPATH):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --standalone --nproc-per-node 2 bench/bench_ops.py [--quick] [--ops ...]

For each row of bench/shapes.py at this world size, all in one run: cuBLAS GEMM alone and the
NCCL collective alone (their max is the floor: perfect overlap), sequential NCCL + cuBLAS,
PyTorch async-TP (torch.ops.symm_mem fused ops), two-stream overlap, the kernel-level mode's
variants (bench/kernel_level_variants.py: kl_plain, kl_priority, kl_occupancy, kl_both),
Syncopate fused per backend (syncopate_ce / _sm / _nccl) and the simulator's choice
(syncopate_auto). Every variant's output is checked (NaN-poisoned; relative error vs an fp32
reference) before it is timed; a Syncopate context's bounded waits are checked again after
its timed calls. Times: median over samples of each rank's CUDA-event time, each sample after
a GPU-side barrier, then the max over ranks. Per row: ratios to the floor, speedups over
sequential and async-TP, the simulator's predicted time next to the measured one, what auto
chose; at the end the targets of issue #7 (bench/targets.py), met or missed by how much.
Rank 0 prints a line per row as it goes and rewrites the JSON after every row (a time-out
keeps what was measured), then a table, the targets and a PNG plot, under --out ($OUT if
set, else bench/results/). `--list` and `--dry-run` need no GPU.
"""

from __future__ import annotations

import os

# Multicast (NVLS) off in every process before NCCL or symmetric memory initialise: on the
# lent machines it can take the host's shared GPUs out of service.
for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value
# A Syncopate wait that times out costs its bound on every call: 2 s (not the package's 10 s)
# keeps a broken variant from eating the run. Read when syncopate.runtime is imported.
os.environ.setdefault("SYNCOPATE_WAIT_BOUND_MS", "2000")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dist_timing  # noqa: E402
import op_variants  # noqa: E402
import shapes  # noqa: E402
import syncopate_variants  # noqa: E402
import targets  # noqa: E402

BASE_VARIANTS = ("gemm", "collective", "sequential", "async_tp", "two_stream")
KERNEL_LEVEL = ("kl_plain", "kl_priority", "kl_occupancy", "kl_both")
SYNCOPATE = tuple(syncopate_variants.SETTINGS)
ALL_VARIANTS = BASE_VARIANTS + KERNEL_LEVEL + SYNCOPATE
TABLE = ("sequential", "async_tp", "two_stream", "kl_best") + SYNCOPATE


def parse_variants(text: str) -> tuple[str, ...]:
    """The variants to run, in table order; gemm and collective always (they make the floor).
    ValueError naming an unknown name (kernel-level names: kl_*, whatever
    kernel_level_variants.py offers)."""
    asked = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in asked if v not in ALL_VARIANTS and not v.startswith("kl_")]
    if unknown:
        raise ValueError(
            f"--variants: unknown {unknown}; choose from {', '.join(ALL_VARIANTS)}"
            " (or another kl_* name of bench/kernel_level_variants.py)"
        )
    wanted = set(asked) | {"gemm", "collective"}
    extra = [v for v in asked if v not in ALL_VARIANTS]
    return tuple(v for v in ALL_VARIANTS if v in wanted) + tuple(extra)


def kernel_level(op: str, a, b, chunks: int, group, names: tuple[str, ...]) -> dict:
    """Helper C's kernel-level variants for this row, or a skip reason for each name."""
    names = tuple(n for n in names if n.startswith("kl_"))
    if not names:
        return {}
    try:
        import kernel_level_variants
    except Exception as error:
        return {
            n: f"bench/kernel_level_variants.py not importable: {type(error).__name__}: {str(error)[:200]}"
            for n in names
        }
    try:
        got = kernel_level_variants.variants(op, a, b, chunks, group)
    except Exception as error:
        return {n: f"kernel_level_variants.variants failed: {type(error).__name__}: {str(error)[:200]}" for n in names}
    return {n: got.get(n, f"kernel_level_variants.variants gave no {n} for {op}") for n in names}


def bench_row(problem, op, args, names, classes, missing, rank, world) -> dict:
    device = torch.device(dist_timing.DEVICE)
    group = dist.group.WORLD
    started = time.monotonic()
    a, b, refs = dist_timing.make_inputs(problem, op, rank, world, torch.bfloat16, device)
    variants = dict(op_variants.BUILDERS[op](a, b, args.chunks))
    variants.update(kernel_level(op, a, b, args.chunks, group, names))
    built = syncopate_variants.build(
        op, a, b, problem.m, problem.b_layout, group, tuple(n for n in names if n in SYNCOPATE), classes, missing
    )
    variants.update(built.variants)
    row = {
        "op": op,
        "world": world,
        "m": problem.m,
        "k": problem.k,
        "n": problem.n,
        "b_layout": problem.b_layout,
        "label": problem.label,
        "variants": {},
        "syncopate": built.info,
    }
    for name in names:
        row["variants"][name] = dist_timing.measure(
            name,
            variants.get(name, f"{name} not offered for {op}"),
            refs.get(name, refs["op"]),
            op,
            args.samples,
            args.warmup,
            built.after.get(name),
        )
    row.update(targets.row_metrics(row))
    torch.cuda.synchronize()
    dist.barrier()  # no peer still touches a heap about to be freed
    built.close()
    del a, b, refs, variants, built
    gc.collect()
    torch.cuda.empty_cache()
    row["seconds"] = time.monotonic() - started
    return row


def row_line(i: int, total: int, row: dict) -> str:
    """One line per finished row: ratios to the floor, auto's choice, prediction errors."""
    ratio = row.get("ratio_to_floor", {})
    kl = [ratio[n] for n in ratio if n.startswith("kl_")]
    cells = []
    for name in TABLE:
        value = min(kl) if name == "kl_best" and kl else ratio.get(name)
        short = name.replace("syncopate_", "")
        cells.append(f"{short} {value:.3f}" if value is not None else f"{short} -")
    auto = row.get("auto_chose", {})
    pred = " ".join(
        f"{n.replace('syncopate_', '')} {p['error']:+.0%}" for n, p in row.get("predicted_vs_measured", {}).items()
    )
    return (
        f"[{i + 1}/{total}] {row['op']} {row['m']}x{row['k']}x{row['n']} {row['b_layout']} "
        f"{row['label']}: floor {row.get('floor_ms', math.nan):.3f} ms; /floor: "
        + ", ".join(cells)
        + f"; auto: {auto.get('decision')} {auto.get('backend')}"
        + f"; sim error: {pred or '-'}; {row['seconds']:.1f} s"
    )


def print_table(rows: list[dict]) -> None:
    print(
        f"{'op':8} {'M x K x N':>20} {'B':>2} {'gemm':>7} {'coll':>7} {'floor':>7} "
        + " ".join(f"{n.replace('syncopate_', 'sy_'):>10}" for n in TABLE)
        + f" {'auto':>10} {'best/seq':>8}"
    )
    print(f"{'':48}" + "time / floor".center(11 * len(TABLE)))
    for r in rows:
        v = targets.ms_of(r)
        ratio = r.get("ratio_to_floor", {})
        kl = [ratio[n] for n in ratio if n.startswith("kl_")]
        cells = []
        for n in TABLE:
            value = min(kl) if n == "kl_best" and kl else ratio.get(n)
            cells.append(f"{value:>10.3f}" if value is not None else f"{'-':>10}")
        best = r.get("best_fused", {})
        speedup = (v["sequential"] / best["ms"]) if best and "sequential" in v else None
        print(
            f"{r['op']:8} {r['m']:>6}x{r['k']:>6}x{r['n']:>6} {r['b_layout']:>2} "
            f"{v.get('gemm', math.nan):>7.3f} {v.get('collective', math.nan):>7.3f} "
            f"{r.get('floor_ms', math.nan):>7.3f} "
            + " ".join(cells)
            + f" {str(r.get('auto_chose', {}).get('decision', '-')):>10}"
            + (f" {speedup:>8.3f}" if speedup else f" {'-':>8}")
        )
    reasons = {f"{n}: {x['skipped']}" for r in rows for n, x in r["variants"].items() if "skipped" in x}
    for reason in sorted(reasons):
        print(f"skipped {reason}")
    failures = [
        (r["op"], r["label"], f"{r['m']}x{r['k']}x{r['n']}", n, x["failed"])
        for r in rows
        for n, x in r["variants"].items()
        if "failed" in x
    ]
    print(f"correctness failures: {len(failures) if failures else 'none'}")
    for failure in failures:
        print("  FAILED", *failure)


def plot(rows: list[dict], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        return f"no plot: {error}"
    plotted = [r for r in rows if r.get("ratio_to_floor")]
    shown = [n for n in TABLE if n != "kl_best" and any(n in r["ratio_to_floor"] for r in plotted)]
    shown += sorted({n for r in plotted for n in r["ratio_to_floor"] if n.startswith("kl_")})
    if not plotted or not shown:
        return "no plot: no row has a floor and a timed variant"
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(plotted)), 5))
    width = 0.8 / len(shown)
    for i, name in enumerate(shown):
        xs = [j + i * width for j in range(len(plotted))]
        ax.bar(xs, [r["ratio_to_floor"].get(name, 0) for r in plotted], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(targets.FLOOR_LIMIT, color="grey", linewidth=0.6, linestyle="--")
    ax.set_xticks([j + 0.4 for j in range(len(plotted))])
    ax.set_xticklabels([f"{r['op']} {r['m']}x{r['k']}x{r['n']}" for r in plotted], rotation=90, fontsize=6)
    ax.set_ylabel("time / max(GEMM, collective)  (lower is better)")
    ax.set_ylim(0, min(4.0, 1.05 * max(max(r["ratio_to_floor"].values()) for r in plotted)))
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="ag_gemm,gemm_rs,gemm_ar")
    parser.add_argument("--quick", action="store_true", help="baselines rows only, 10 samples (unless --samples)")
    parser.add_argument("--labels", default="", help="comma-separated substrings; keep rows whose label contains one")
    parser.add_argument("--rows", default=None, help="i:j, indices as --list prints them")
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument(
        "--variants", default=",".join(ALL_VARIANTS), help="comma-separated; gemm and collective always run"
    )
    parser.add_argument("--samples", type=int, default=None, help="default 20 (--quick 10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=4, help="pieces per shard, two_stream and kernel-level")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="start no row after this many seconds (default 480, --quick 200)"
    )
    parser.add_argument(
        "--nccl-timeout-s",
        type=float,
        default=240,
        help="a collective stuck this long aborts the run (JSON so far is kept)",
    )
    parser.add_argument(
        "--world", type=int, default=None, help="world size for --list/--dry-run (default $WORLD_SIZE or 2)"
    )
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    parser.add_argument(
        "--dry-run", action="store_true", help="rows x variants and an estimate of the run time; no GPU"
    )
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in shapes.OPS]
    if unknown:
        parser.error(f"--ops: unknown {unknown}; choose from {', '.join(shapes.OPS)}")
    args.ops = tuple(ops)
    try:
        args.variants = parse_variants(args.variants)
        args.row_slice = shapes.parse_slice(args.rows) if args.rows else None
    except ValueError as error:
        parser.error(str(error))
    if args.max_rows is not None and args.max_rows < 1:
        parser.error("--max-rows must be at least 1")
    if args.samples is None:
        args.samples = 10 if args.quick else 20
    if args.budget_s is None:
        args.budget_s = 200.0 if args.quick else 480.0
    if args.samples < 1 or args.warmup < 0 or args.chunks < 1:
        parser.error("--samples and --chunks must be >= 1, --warmup >= 0")
    return args


def selected_rows(args, world: int):
    labels = tuple(s for s in args.labels.split(",") if s)
    return shapes.select_rows(
        shapes.op_rows(world, args.ops),
        quick=args.quick,
        labels=labels,
        row_slice=args.row_slice,
        max_rows=args.max_rows,
    )


def estimate_s(todo, variants, samples: int, warmup: int) -> float:
    """A rough run time: per variant (1 checked + warmup + samples) calls of the floor-ish op
    time (cuBLAS at ~600 TFLOP/s and ~0.1 ms of barrier/sync per sample), plus context
    building: ~0.5 s per Syncopate or kernel-level context (heap, tables, warm-up, barrier)
    and ~40 s of first Triton compiles. Guesses until a GPU run gives the real "seconds"."""
    total = 40.0
    for p, op in todo:
        m, k, n = p.local_gemm()
        op_ms = max(0.02, 2 * m * k * n / 600e12 * 1e3)
        calls = 1 + warmup + samples
        total += len(variants) * calls * (op_ms + 0.1) / 1e3
        total += 0.5 * sum(1 for v in variants if v.startswith(("syncopate_", "kl_")))
    return total


def main(argv=None) -> int:
    args = parse_args(argv)
    world = args.world or int(os.environ.get("WORLD_SIZE", "2"))
    todo = selected_rows(args, world)
    if args.list or args.dry_run:
        for i, (p, op) in enumerate(todo):
            print(f"{i:3} {op:8} {p.m:>6} {p.k:>6} {p.n:>6} {p.b_layout} {p.label}")
        if args.dry_run:
            print(
                f"world {world}: {len(todo)} rows x {len(args.variants)} variants "
                f"({', '.join(args.variants)}), {args.samples} samples + {args.warmup} warm-up; "
                f"estimated {estimate_s(todo, args.variants, args.samples, args.warmup):.0f} s "
                f"(budget {args.budget_s:.0f} s: rows not started by then are listed as not run)"
            )
        return 0
    if not torch.cuda.is_available():
        print("bench_ops: no CUDA device (use --list or --dry-run here)", file=sys.stderr)
        return 2
    started = time.monotonic()
    rank, world, local_rank = dist_timing.init(args.nccl_timeout_s)
    todo = selected_rows(args, world)
    classes, missing = syncopate_variants.load_classes()
    props = torch.cuda.get_device_properties(local_rank)
    now = datetime.datetime.now(datetime.timezone.utc)
    kind = dist_timing.device_kind(props, world)
    out_dir = Path(args.out)
    json_path = out_dir / f"bench_ops_{kind}_{now:%Y-%m-%d_%H%M}.json"
    report = {
        "benchmark": "bench_ops",
        "device": props.name,
        "device_kind": kind,
        "world": world,
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "nccl": str(torch.cuda.nccl.version()),
        "env": {
            n: os.environ.get(n)
            for n in (
                "NCCL_NVLS_ENABLE",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NVSHMEM_DISABLE_NVLS",
                "SYNCOPATE_WAIT_BOUND_MS",
                "CUDA_DEVICE_MAX_CONNECTIONS",
            )
        },
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k != "row_slice"},
        "method": "per variant: 1 checked run (NaN-poisoned output, rel. error vs fp32), "
        "warm-up, then samples each after a one-element all-reduce, CUDA events "
        "per rank, median per rank, max over ranks",
        "syncopate_ops": missing or "imported",
        "complete": False,
        "rows": [],
        "not_run": [],
        "targets": None,
    }
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        print(
            f"world {world} x {props.name}; torch {torch.__version__}; {len(todo)} rows; "
            f"variants {', '.join(args.variants)}; syncopate: {missing or 'imported'}",
            flush=True,
        )
    for i, (problem, op) in enumerate(todo):
        # Every rank agrees to start a row (rank 0's clock decides): a row begun on one rank
        # only would hang in its first collective.
        if dist_timing.any_rank(rank == 0 and time.monotonic() - started > args.budget_s):
            report["not_run"] = [f"{o} {p.m}x{p.k}x{p.n} {p.label}" for p, o in todo[i:]]
            if rank == 0:
                print(f"budget of {args.budget_s:.0f} s spent: {len(todo) - i} rows not run", flush=True)
            break
        row = bench_row(problem, op, args, args.variants, classes, missing, rank, world)
        report["rows"].append(row)
        if rank == 0:
            print(row_line(i, len(todo), row), flush=True)
            report["targets"] = targets.evaluate(report["rows"])
            dist_timing.write_json(json_path, report)
    if rank == 0:
        report["complete"] = not report["not_run"]
        report["targets"] = targets.evaluate(report["rows"])
        report["seconds"] = time.monotonic() - started
        dist_timing.write_json(json_path, report)
        problem = plot(report["rows"], json_path.with_suffix(".png"))
        print(f"wrote {json_path}" + (f" ({problem})" if problem else " and .png"))
        print_table(report["rows"])
        print("\n".join(targets.format_report(report["targets"])))
        print(f"total {report['seconds']:.0f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
