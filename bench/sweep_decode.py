"""Sweep of the one-launch GEMM kernels (kernels/gemm_one_launch.py) on the decode rows that miss
cuBLAS and on the small-M FP8 rows that miss torch._scaled_mm (issue 18).

    python bench/sweep_decode.py --budget 138 --workers 15 --out $OUT/gemm18
    python bench/sweep_decode.py --dry-run       # the plan (rows, variants, kernels), no GPU

The rows: the 10 decode GEMMs (M = 128..1024, both B layouts) still above 1.04x cuBLAS in the
nvidia-h200 verification of 2026-11-25 (bench/results/gemm18-nvidia-h200-2026-11-25/), and the
12 small-M FP8 GEMMs above 1.05x torch._scaled_mm (per-tensor) on nvidia-h100-x1 that day. Candidates per row, beside the model's current pick:
- stream-K with one flattened K-step loop (gemm_stream_k_flat_kernel) for six blocks: every
  program the same number of K-steps, no idle multiprocessor in the last wave;
- split-K in one launch with host descriptors (gemm_tail_fixup_kernel, dp_tiles 0) where the
  blocks' tiles fill under one wave and the split brings the items to >= 0.7 of one wave;
- the split tail in one launch (the same kernel, whole waves whole) for the main blocks at
  1.1-3.9 waves of tiles.
Every variant is checked against fp32 with NaN-poisoned outputs, all timed in one run
(bench_gemm.bench_shape / bench_fp8_shape: CUDA graphs, interleaved, median). Every kernel is
compiled first in parallel processes; variants not compiled by the compile deadline are skipped.
Writes one JSON after every row.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gemm  # noqa: E402
import shapes  # noqa: E402
import sweep_small_m  # noqa: E402

GemmConfig = bench_gemm.GemmConfig
kernels = bench_gemm.kernels

# (M, K, N): decode rows above 1.04x cuBLAS on nvidia-h200, 2026-11-25 12:37 (worst first).
DECODE_ROWS = (
    (512, 8192, 5120),
    (1024, 4096, 3072),
    (128, 8192, 5120),
    (128, 4096, 3072),
    (512, 4096, 3072),
    (1024, 8192, 5120),
    (128, 14336, 8192),
    (128, 2048, 4096),
    (128, 7168, 4096),
    (128, 4096, 8192),
)
# The B layouts each decode row is swept in.
DECODE_LAYOUTS = ("nk", "kn")
# (M, K, N, layout): the small-M FP8 rows above 1.05x torch._scaled_mm (per-tensor scales) on
# nvidia-h100-x1, 2026-11-25 14:07 (main's bench/results/gemm18-nvidia-h100-x1-2026-11-25/), worst
# first; [N, K] B only (a [K, N] FP8 B runs the same kernel on its kept K-major copy).
FP8_ROWS = (
    (128, 7168, 4096, "nk"),
    (128, 4096, 3072, "nk"),
    (512, 8192, 5120, "nk"),
    (512, 4096, 3072, "nk"),
    (128, 8192, 5120, "nk"),
    (128, 2048, 4096, "nk"),
    (1024, 4096, 3072, "nk"),
    (256, 8192, 8192, "nk"),
    (256, 2048, 8192, "nk"),
    (256, 4096, 8192, "nk"),
    (1024, 8192, 5120, "nk"),
    (512, 7168, 4096, "nk"),
)
# (BM, BN, BK, stages, warps, epilogue split)
SK_BLOCKS = (
    (128, 256, 64, 3, 8, 2),
    (128, 128, 64, 4, 4, 1),
    (128, 128, 64, 5, 4, 1),
    (128, 64, 64, 6, 4, 1),
    (128, 64, 128, 4, 4, 1),
    (64, 128, 64, 4, 4, 1),
)
FIXUP_BLOCKS = (
    (128, 128, 64, 4, 4, 1),
    (128, 128, 64, 6, 4, 1),
    (128, 64, 64, 6, 4, 1),
    (128, 64, 128, 4, 4, 1),
    (64, 128, 64, 4, 4, 1),
    (64, 64, 128, 4, 4, 1),
)
TAIL_BLOCKS = ((128, 256, 64, 3, 8, 2), (128, 128, 64, 4, 4, 1), (128, 128, 64, 6, 4, 1))
FP8_SK_BLOCKS = ((128, 64, 128, 6, 4, 1), (128, 128, 128, 4, 4, 1), (128, 256, 128, 3, 8, 2), (64, 128, 128, 4, 4, 1))
FP8_FIXUP_BLOCKS = ((128, 64, 128, 6, 4, 1), (128, 128, 128, 4, 4, 1), (64, 128, 128, 4, 4, 1))
FP8_TAIL_BLOCKS = ((128, 256, 128, 3, 8, 2), (128, 128, 128, 4, 4, 1))
MIN_K_STEPS_PER_SPLIT = 8


def config_of(block: tuple, **kw) -> GemmConfig:
    bm, bn, bk, st, w, e = block
    return GemmConfig(bm, bn, bk, 8, st, w, True, e, 1.0, **kw)


def candidates(m: int, n: int, k: int, num_sms: int, fp8: bool = False) -> dict[str, GemmConfig]:
    """name -> config: the one-launch variants of one row (see the module docstring)."""
    out = {}
    for block in FP8_SK_BLOCKS if fp8 else SK_BLOCKS:
        cfg = config_of(block, stream_k=True)
        out[cfg.name] = cfg
    for block in FP8_FIXUP_BLOCKS if fp8 else FIXUP_BLOCKS:
        tiles = math.ceil(m / block[0]) * math.ceil(n / block[1])
        if tiles >= num_sms:
            continue
        for split in (2, 3, 4, 6):
            items = tiles * split
            if (
                items <= num_sms
                and sweep_small_m.wave_fill(items, num_sms) >= 0.7
                and math.ceil(k / block[2]) >= split * MIN_K_STEPS_PER_SPLIT
            ):
                cfg = config_of(block, split_k=split, split_fixup=True)
                out[cfg.name] = cfg
    for block in FP8_TAIL_BLOCKS if fp8 else TAIL_BLOCKS:
        tiles = math.ceil(m / block[0]) * math.ceil(n / block[1])
        if num_sms < tiles < 4 * num_sms and tiles % num_sms:
            for split in (2, 3, 4):
                if (tiles % num_sms) * split <= num_sms and math.ceil(k / block[2]) >= split * MIN_K_STEPS_PER_SPLIT:
                    cfg = config_of(block, split_k=split, split_tail=True, split_fixup=True)
                    out[cfg.name] = cfg
    return out


def compile_one(task: tuple) -> tuple:
    """Runs one variant once in a worker process (Triton compiles it into its disk cache)."""
    key, (kind, cfg, layout, m, k, n) = task
    import torch

    try:
        dtype = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = (
            torch.randn(n, k, device="cuda").to(dtype).t()
            if layout == "nk"
            else torch.randn(k, n, device="cuda").to(dtype)
        )
        if kind == "fp8":
            kernels.gemm_fp8(a, b, torch.tensor(1.0, device="cuda"), torch.ones(1, n, device="cuda"), config=cfg)
        else:
            kernels.gemm(a, b, config=cfg)
        torch.cuda.synchronize()
        return key, ""
    except Exception as error:  # reported; the variant is then skipped
        return key, f"{kind} {cfg.name} {layout}: {type(error).__name__}: {str(error)[:300]}"


def key_of(kind: str, cfg: GemmConfig, layout: str, m: int, k: int, n: int, num_sms: int) -> tuple:
    """What decides the compiled kernel: bench_gemm.compile_task's key (config, layout, grid
    specialisation, stream-K slots); the FP8 scale mode does not (both modes share a kernel)."""
    shape = shapes.GemmShape(m, k, n, layout, labels=())
    return bench_gemm.compile_task("fp8" if kind == "fp8" else "bf16", cfg, shape, "", num_sms)[0]


def plan(num_sms: int, device_ok: bool):
    """[(kind, shape, model config, {name: config})] for every row, decode rows first."""
    import torch

    out = []
    known = {(s.m, s.k, s.n, s.b_layout): s for s in shapes.local_gemm_shapes()}
    for m, k, n in DECODE_ROWS:
        for layout in DECODE_LAYOUTS:
            shape = known.get((m, k, n, layout)) or shapes.GemmShape(m, k, n, layout, labels=("decode",))
            if device_ok:
                model = kernels.select_config(m, n, k, torch.device("cuda"), torch.bfloat16, local=True)
            else:
                model = kernels.choose_config(m, n, k, num_sms, 2, 232448 - 1024, local=True)
            cands = {model.name: model}
            cands.update(candidates(m, n, k, num_sms))
            out.append(("bf16", shape, model, cands))
    for m, k, n, layout in FP8_ROWS:
        shape = known.get((m, k, n, layout)) or shapes.GemmShape(m, k, n, layout, labels=("fp8",))
        if device_ok:
            model = kernels.gemm_fp8_module.select_fp8_config(m, n, k, torch.device("cuda"), local=True)
        else:
            model = kernels.gemm_fp8_module.choose_fp8_config(m, n, k, num_sms, 232448 - 1024, local=True)
        cands = {model.name: model}
        cands.update(candidates(m, n, k, num_sms, fp8=True))
        out.append(("fp8", shape, model, cands))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=138.0, help="seconds for the whole run")
    parser.add_argument("--compile-share", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--dry-run", action="store_true", help="print the plan for 132 SMs; no GPU")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    start = time.time()
    if args.dry_run:
        rows = plan(132, False)
        keys = {key_of(kind, c, s.b_layout, s.m, s.k, s.n, 132) for kind, s, _, cs in rows for c in cs.values()}
        for kind, s, model, cs in rows:
            print(f"{kind} {s.m}x{s.k}x{s.n} {s.b_layout}: model {model.name}; {len(cs)} variants: {sorted(cs)}")
        print(f"{len(rows)} rows, {sum(len(c) for *_, c in rows)} variants, {len(keys)} kernels")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("sweep_decode: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    kind_name = bench_gemm.device_kind(props.name)
    rows = plan(num_sms, True)
    tasks = {}
    for kind, s, _, cands in rows:
        for cfg in cands.values():
            tasks.setdefault(
                key_of(kind, cfg, s.b_layout, s.m, s.k, s.n, num_sms), (kind, cfg, s.b_layout, s.m, s.k, s.n)
            )
    print(f"device {props.name} ({kind_name}), {num_sms} SMs; {len(rows)} rows, {len(tasks)} kernels", flush=True)
    compiled = sweep_small_m.precompile(tasks, args.workers, start + args.budget * args.compile_share, compile_one)
    print(f"compiled {len(compiled)}/{len(tasks)} kernels at {time.time() - start:.0f} s", flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"sweep_decode_{kind_name}_{now:%Y-%m-%d_%H%M}.json"
    report = {
        "benchmark": "sweep_decode",
        "device": props.name,
        "device_kind": kind_name,
        "num_sms": num_sms,
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": bench_gemm.triton.__version__,
        "samples": args.samples,
        "method": "bench_gemm.bench_shape / bench_fp8_shape: CUDA graphs, interleaved replays, median per call; "
        "NaN-poisoned outputs, rel. error vs fp32 reference",
        "compiled_kernels": len(compiled),
        "kernels": len(tasks),
        "complete": False,
        "rows": [],
    }
    for kind, s, model, cands in rows:
        if time.time() - start > args.budget - 5:
            print("budget reached; stopping", flush=True)
            break
        runnable = {
            name: cfg
            for name, cfg in cands.items()
            if key_of(kind, cfg, s.b_layout, s.m, s.k, s.n, num_sms) in compiled
        }
        try:
            if kind == "fp8":
                row = bench_gemm.bench_fp8_shape(s, runnable, model.name, args.samples)
            else:
                row = bench_gemm.bench_shape(s, runnable, model.name, torch.bfloat16, args.samples)
                cublas = row["variants"]["cublas"].get("ms")
                for v in row["variants"].values():
                    if "ms" in v and cublas:
                        v["ratio"] = v["ms"] / cublas
        except Exception as error:  # recorded; the next row still runs
            print(f"{kind} {s.m}x{s.k}x{s.n} {s.b_layout}: {type(error).__name__}: {error}", flush=True)
            report["rows"].append(
                {
                    "kind": kind,
                    "m": s.m,
                    "k": s.k,
                    "n": s.n,
                    "b_layout": s.b_layout,
                    "error": f"{type(error).__name__}: {str(error)[:500]}",
                }
            )
            torch.cuda.empty_cache()
            continue
        row["kind"] = kind
        row["skipped_uncompiled"] = sorted(set(cands) - set(runnable))
        report["rows"].append(row)
        path.write_text(json.dumps(report, indent=1))
        if kind == "fp8":
            summary = " ".join(
                f"{mode}: model {row.get(f'ratio_model_{mode}', math.nan):.3f} best "
                f"{row.get(f'ratio_best_{mode}', math.nan):.3f} ({row.get(f'best_{mode}')})"
                for mode in ("tensor", "row")
            )
        else:
            summary = (
                f"model {row.get('ratio_model', math.nan):.3f} ({model.name}); best "
                f"{row.get('ratio_best', math.nan):.3f} ({row.get('best_variant')})"
            )
        print(f"{kind} {s.m}x{s.k}x{s.n} {s.b_layout}: {summary} [{time.time() - start:.0f} s]", flush=True)
    report["complete"] = len(report["rows"]) == len(rows)
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}: {len(report['rows'])}/{len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
