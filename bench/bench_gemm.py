"""Local GEMM vs cuBLAS (torch.mm) on every local GEMM of the benchmark's op rows.

    python bench/bench_gemm.py                 # the config the model picks, vs cuBLAS
    python bench/bench_gemm.py --sweep         # also every candidate config (calibrates the model)
    python bench/bench_gemm.py --quick         # baselines rows only

Each shape: fresh random bf16 inputs (several sets when one fits in L2), outputs poisoned with
NaN, relative error of every variant vs an fp32 reference, then all variants timed in the same
run (CUDA graphs, interleaved, median). Writes JSON to --out (default: $OUT if set, else
bench/results/) named with the device kind and date; prints a table of ratios last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shapes  # noqa: E402
import timing  # noqa: E402
from local_import import load_kernels  # noqa: E402

kernels, KERNELS_FROM = load_kernels()
GemmConfig = kernels.GemmConfig

# Extra configs the sweep times beside the model's candidates, to see what the model misses.
# (Warp specialisation on/off is not swept: Triton 3.6 emits the same PTX for both on sm_90.)
SWEEP_EXTRA = (
    GemmConfig(128, 256, 64, 8, 4, 8, True, 2, 1.0),
    GemmConfig(256, 128, 64, 8, 3, 8, True, 1, 1.0),
    GemmConfig(128, 256, 64, 8, 3, 8, True, 2, 1.0, flatten=False),
    GemmConfig(128, 128, 64, 8, 4, 8, True, 1, 1.0),
)
# Split-K configs, swept only where 128x256 tiles cannot fill the chip twice over.
SWEEP_SPLIT_K = tuple(
    GemmConfig(bm, bn, 64, 8, stages, warps, True, split_e, 1.0, split_k=split)
    for bm, bn, stages, warps, split_e, splits in ((64, 128, 4, 4, 1, (2, 3, 4)),
                                                   (128, 128, 4, 4, 1, (2, 3, 4)),
                                                   (128, 256, 3, 8, 2, (2, 3, 4)))
    for split in splits)
ERROR_LIMIT = 1e-2  # bf16 operands, fp32 accumulation, K up to 28672


def device_kind(name: str) -> str:
    lowered = name.lower()
    count = torch.cuda.device_count()
    if "h200" in lowered:
        return "nvidia-h200" if count == 1 else f"nvidia-h200-x{count}"
    if "h100" in lowered:
        return f"nvidia-h100-x{count}"
    return lowered.replace(" ", "-")


def make_inputs(shape: shapes.GemmShape, n_sets: int, dtype: torch.dtype, device):
    sets = []
    for _ in range(n_sets):
        a = torch.randn(shape.m, shape.k, dtype=dtype, device=device)
        if shape.b_layout == "nk":
            b = torch.randn(shape.n, shape.k, dtype=dtype, device=device).t()
        else:
            b = torch.randn(shape.k, shape.n, dtype=dtype, device=device)
        out = torch.empty(shape.m, shape.n, dtype=dtype, device=device)
        sets.append((a, b, out))
    return sets


def bench_shape(shape: shapes.GemmShape, configs: dict[str, GemmConfig], model_name: str,
                dtype: torch.dtype, samples: int) -> dict:
    device = torch.device("cuda")
    elem = torch.tensor([], dtype=dtype).element_size()
    per_set = (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * elem
    n_sets = timing.input_sets_for(per_set, device)
    sets = make_inputs(shape, n_sets, dtype, device)

    def run_cublas(i):
        a, b, out = sets[i]
        torch.mm(a, b, out=out)

    fns = {"cublas": run_cublas}
    for name, cfg in configs.items():
        fns[name] = lambda i, cfg=cfg: kernels.gemm(sets[i][0], sets[i][1], out=sets[i][2],
                                                    config=cfg)

    # Correctness: each variant on set 0, output poisoned first, vs an fp32 reference.
    a0, b0, out0 = sets[0]
    ref = torch.mm(a0.float(), b0.float())
    errors, results = {}, {}
    launch_errors = {}
    for name, fn in fns.items():
        out0.fill_(float("nan"))
        try:
            fn(0)
            torch.cuda.synchronize()
        except Exception as error:  # e.g. a config that runs out of shared memory
            launch_errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
            errors[name] = math.inf
            continue
        errors[name] = timing.relative_error(out0, ref)
        results[name] = out0.clone()
    bad = {n: e for n, e in errors.items() if not e < ERROR_LIMIT}
    timed = {n: f for n, f in fns.items() if n not in bad}
    times = timing.time_variants(timed, n_sets, samples=samples)
    # The graphs overwrote set 0's output: it must still be what the checked run produced.
    for name in timed:
        fns[name](0)
        torch.cuda.synchronize()
        if not torch.equal(out0, results[name]):
            errors[name] = timing.relative_error(out0, ref)
            bad[name] = errors[name]
    del ref, results, sets
    flops = 2.0 * shape.m * shape.n * shape.k
    row = {"m": shape.m, "k": shape.k, "n": shape.n, "b_layout": shape.b_layout,
           "labels": list(shape.labels), "input_sets": n_sets, "model_choice": model_name,
           "variants": {}}
    for name in fns:
        entry = {"rel_error": errors[name], "failed_check": name in bad}
        if name in launch_errors:
            entry["launch_error"] = launch_errors[name]
        if name in times:
            ms = times[name]["ms"]
            entry.update(ms=ms, spread=times[name]["spread"], tflops=flops / ms / 1e9)
        row["variants"][name] = entry
    cublas_ms = row["variants"]["cublas"].get("ms")
    triton_timed = {n: v["ms"] for n, v in row["variants"].items()
                    if n != "cublas" and "ms" in v and not v["failed_check"]}
    if cublas_ms and triton_timed:
        best = min(triton_timed, key=triton_timed.get)
        row["best_variant"] = best
        row["ratio_best"] = triton_timed[best] / cublas_ms
        if model_name in triton_timed:
            row["ratio_model"] = triton_timed[model_name] / cublas_ms
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'M':>6} {'K':>6} {'N':>6} {'B':>2} {'cuBLAS ms':>9} {'model ms':>9} "
          f"{'model/cuBLAS':>12} {'best/cuBLAS':>11}  model config -> best config")
    for r in rows:
        v = r["variants"]
        model = v.get(r["model_choice"], {})
        print(f"{r['m']:>6} {r['k']:>6} {r['n']:>6} {r['b_layout']:>2} "
              f"{v['cublas'].get('ms', math.nan):>9.4f} {model.get('ms', math.nan):>9.4f} "
              f"{r.get('ratio_model', math.nan):>12.3f} {r.get('ratio_best', math.nan):>11.3f}"
              f"  {r['model_choice']} -> {r.get('best_variant', '-')}")
    ratios = [r["ratio_model"] for r in rows if "ratio_model" in r]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        within = sum(1 for x in ratios if x <= 1.05)
        print(f"model config: geomean time ratio vs cuBLAS {geo:.3f}; "
              f"{within}/{len(ratios)} rows within 5%; worst {max(ratios):.3f}")
    failed = [(r["m"], r["k"], r["n"], n) for r in rows for n, v in r["variants"].items()
              if v["failed_check"] and "launch_error" not in v]
    launch = sorted({n for r in rows for n, v in r["variants"].items() if "launch_error" in v})
    if launch:
        print(f"configs that failed to launch (see JSON): {launch}")
    print(f"correctness failures: {failed if failed else 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="time every candidate config")
    parser.add_argument("--quick", action="store_true", help="baselines rows only")
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--out", default=os.environ.get("OUT") or
                        str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--limit", type=int, default=0, help="first N shapes only (0: all)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    kind = device_kind(props.name)
    gemm_shapes = shapes.local_gemm_shapes()
    if args.quick:
        gemm_shapes = [s for s in gemm_shapes if any("baseline" in l for l in s.labels)]
    if args.limit:
        gemm_shapes = gemm_shapes[:args.limit]
    print(f"device {props.name} ({kind}), {props.multi_processor_count} SMs, "
          f"L2 {props.L2_cache_size >> 20} MiB; torch {torch.__version__}, triton "
          f"{triton.__version__}; kernels from {KERNELS_FROM}; {len(gemm_shapes)} shapes",
          flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {"benchmark": "bench_gemm", "device": props.name, "device_kind": kind,
              "num_sms": props.multi_processor_count, "date": now.isoformat(timespec="seconds"),
              "torch": torch.__version__, "triton": triton.__version__, "dtype": args.dtype,
              "sweep": args.sweep, "samples": args.samples,
              "method": "CUDA graphs of calls, interleaved replays, median per call; "
                        "random inputs rotated over sets > 2x L2; NaN-poisoned outputs; "
                        "rel. error vs fp32 reference",
              "complete": False, "rows": []}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "_sweep" if args.sweep else ""
    path = out_dir / f"bench_gemm_{kind}_{now:%Y-%m-%d_%H%M}{suffix}.json"
    rows = report["rows"]
    for shape in gemm_shapes:
        chosen = kernels.select_config(shape.m, shape.n, shape.k, torch.device("cuda"), dtype)
        configs = {chosen.name: chosen}
        if args.sweep:
            for cfg in tuple(kernels.CANDIDATES) + SWEEP_EXTRA:
                configs.setdefault(cfg.name, cfg)
            if math.ceil(shape.m / 128) * math.ceil(shape.n / 256) < 2 * props.multi_processor_count:
                for cfg in SWEEP_SPLIT_K:
                    configs.setdefault(cfg.name, cfg)
        row = bench_shape(shape, configs, chosen.name, dtype, args.samples)
        rows.append(row)
        print(f"  {shape.m}x{shape.k}x{shape.n} {shape.b_layout}: model/cuBLAS "
              f"{row.get('ratio_model', math.nan):.3f}, best/cuBLAS "
              f"{row.get('ratio_best', math.nan):.3f} ({row.get('best_variant')})", flush=True)
        # Written after every shape: a run cut short by a time limit still leaves its rows.
        path.write_text(json.dumps(report, indent=1))
    report["complete"] = True
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
