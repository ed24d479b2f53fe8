"""Config sweep of the local GEMM on the small-M op rows (M = 128..2048), both B layouts, vs cuBLAS.

    python bench/sweep_small_m.py --budget 135 --workers 15 --out $OUT/gemm18

Calibrates the config rule in python/syncopate/kernels/configs.py (issue 18). Each shape:
cuBLAS (torch.mm) and a set of candidate configs of `kernels.gemm`, every one checked against an
fp32 reference with NaN-poisoned outputs, then all timed in one run (bench_gemm.bench_shape:
CUDA graphs, interleaved replays, median). Writes one JSON after every shape, so a run cut off
by its time budget keeps what it measured.

Which candidates, and why (the bound of each row decides what can help it):
- One wave of the device's multiprocessors is the unit: a block whose tiles fill 0.7-1.0 (or
  1.7-2.0) waves wastes little; 1.1-1.5 waves waste a third of the chip. So every block is
  kept unsplit only where its wave fill is good, and each splittable block gets the split-K
  factors (two launches) that bring its work items to a good fill.
- Small M is memory bound on B's bytes (M = 128: 128 FLOP per byte of B), so blocks that read
  B once (BLOCK_M = 128 at M = 128), deeper pipelines (128x128 with 6 stages), BLOCK_K 128,
  and a 128x32 block (one wave of tiles at N = 4096 without split-K partials) are candidates.
- 64-row and 128x64 blocks with 112 KiB of shared memory fit two programs per multiprocessor:
  with one program per tile (non-persistent) the hardware overlaps one's epilogue with the
  other's loads; timed where their tiles exceed one wave.
- Split-K of the last partial wave only (whole tiles for the whole waves, one launch of
  gemm_split_tail_kernel plus a reduction of the tail tiles' partials) for the two main blocks
  where their tiles fill 1.1-3.9 waves: the quantisation loss without partials for every tile.
- A balanced grid below one wave (every program the same number of tiles) for persistent
  blocks whose tiles fill 1-2 waves: the same number of waves, fewer programs contending.
Compile time bounds the sweep: every distinct kernel is compiled first in parallel processes
(bench_gemm.precompile), and variants whose kernel did not compile within the budget are
skipped, not compiled in the timed loop.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gemm  # noqa: E402
import shapes  # noqa: E402

GemmConfig = bench_gemm.GemmConfig
kernels = bench_gemm.kernels

# (BM, BN, BK, stages, warps, epilogue split): the blocks the sweep draws from.
BLOCK_128x256 = (128, 256, 64, 3, 8, 2)
BLOCK_128x128 = (128, 128, 64, 4, 4, 1)
BLOCKS = (
    BLOCK_128x256,
    BLOCK_128x128,
    (128, 128, 64, 6, 4, 1),  # deeper pipeline: more of B in flight (memory-bound rows)
    (128, 128, 64, 4, 8, 1),  # two consumer warpgroups of 64 rows each
    (128, 64, 64, 6, 4, 1),
    (128, 64, 128, 4, 4, 1),
    (64, 128, 64, 4, 4, 1),
    (64, 64, 128, 4, 4, 1),
    (128, 32, 128, 4, 4, 1),  # M = 128 only: B read once, N/32 tiles
)
# Blocks that get split-K candidates (two launches).
SPLIT_BLOCKS = (BLOCK_128x256, BLOCK_128x128, (128, 64, 64, 6, 4, 1), (64, 128, 64, 4, 4, 1), (64, 64, 128, 4, 4, 1))
# Blocks with at most 112 KiB of shared memory (two programs per multiprocessor), timed with one
# program per tile where their tiles exceed one wave.
TWO_PER_SM_BLOCKS = ((64, 128, 64, 4, 4, 1), (128, 64, 64, 4, 4, 1))
MIN_K_STEPS_PER_SPLIT = 8
GOOD_FILL = 0.7  # work items / (waves x multiprocessors) at or above which a grid is kept
PREVIOUS = (
    Path(__file__).resolve().parent
    / "results"
    / "gemm-nvidia-h200-2026-11-25"
    / "bench_gemm_nvidia-h200_2026-11-25_0907_smallm.json"
)


def wave_fill(items: int, num_sms: int) -> float:
    return items / (math.ceil(items / num_sms) * num_sms)


def config_of(block: tuple, **kw) -> GemmConfig:
    bm, bn, bk, st, w, e = block
    return GemmConfig(bm, bn, bk, 8, st, w, True, e, 1.0, **kw)


def candidates(m: int, n: int, k: int, num_sms: int, short: bool) -> dict[str, tuple[GemmConfig, int | None]]:
    """name -> (config, grid override or None) for one shape. `short`: rows already at cuBLAS
    last time get the two main blocks and their splits only (a regression guard, not a search)."""
    out: dict[str, tuple[GemmConfig, int | None]] = {}
    blocks = (BLOCK_128x256, BLOCK_128x128) if short else BLOCKS
    for block in blocks:
        bm, bn, bk = block[:3]
        if bn == 32 and m > 128:
            continue
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        main = block in (BLOCK_128x256, BLOCK_128x128)
        # Decode rows (M = 128): every block unsplit, none fills the chip well.
        if main or m <= 128 or wave_fill(tiles, num_sms) >= GOOD_FILL or tiles >= 3 * num_sms:
            cfg = config_of(block)
            out[cfg.name] = (cfg, None)
        if block in SPLIT_BLOCKS and tiles < 2 * num_sms:
            for split in (2, 3, 4):
                items = tiles * split
                if math.ceil(k / bk) < split * MIN_K_STEPS_PER_SPLIT or items > 3 * num_sms:
                    continue
                if wave_fill(items, num_sms) >= GOOD_FILL:
                    cfg = config_of(block, split_k=split)
                    out[cfg.name] = (cfg, None)
        # Split only the last partial wave's tiles (gemm_split_tail_kernel): whole waves stay
        # whole tiles, the tail tiles' K is split to fill the last wave.
        if main and num_sms < tiles < 4 * num_sms and tiles % num_sms:
            tail = tiles % num_sms
            for split in (2, 3, 4):
                if tail * split <= num_sms and math.ceil(k / bk) >= split * MIN_K_STEPS_PER_SPLIT:
                    cfg = config_of(block, split_k=split, split_tail=True)
                    out[cfg.name] = (cfg, None)
        if not short and num_sms < tiles < 2 * num_sms and main:
            grid = math.ceil(tiles / 2)
            cfg = config_of(block)
            out[f"grid{grid}/{cfg.name}"] = (cfg, grid)
    if not short:
        for block in TWO_PER_SM_BLOCKS:
            tiles = math.ceil(m / block[0]) * math.ceil(n / block[1])
            if num_sms < tiles <= 4 * num_sms:
                cfg = config_of(block, persistent=False)
                out[cfg.name] = (cfg, None)
    return out


def launch_grid(cfg: GemmConfig, grid: int | None, m: int, n: int, k: int, num_sms: int) -> int:
    if grid is None:
        return bench_gemm.launch_grid(cfg, m, n, k, num_sms)
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    return max(1, min(grid, tiles * cfg.split_k))


def compile_key(cfg: GemmConfig, layout: str, grid: int) -> tuple:
    """What decides which compiled kernel a launch uses: the config (non-persistent is the same
    kernel at another grid), the layout, and Triton's specialisation of the grid argument."""
    return (dataclasses.replace(cfg, persistent=True), layout, grid % 16 == 0, grid == 1)


def compile_one(task: tuple) -> tuple:
    key, (cfg, layout, m, k, n, grid) = task
    import torch

    try:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = (
            torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
            if layout == "nk"
            else torch.randn(k, n, device="cuda").to(torch.bfloat16)
        )
        kernels.gemm(a, b, config=cfg, num_programs=grid)
        torch.cuda.synchronize()
        return key, ""
    except Exception as error:  # reported; the variant is then skipped
        return key, f"{cfg.name} {layout}: {type(error).__name__}: {str(error)[:200]}"


def precompile(tasks: dict, workers: int, deadline: float, compile_fn=None) -> set:
    """Compiles every task in `workers` processes (with compile_fn, default compile_one: it takes
    (key, task), returns (key, problem or "")); returns the keys compiled before `deadline`."""
    done, problems = set(), []
    ctx = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    futures = [pool.submit(compile_fn or compile_one, item) for item in tasks.items()]
    try:
        for future in concurrent.futures.as_completed(futures, timeout=max(1.0, deadline - time.time())):
            try:
                key, problem = future.result()
            except Exception as error:  # a worker that died (e.g. BrokenProcessPool): skip its kernel
                problems.append(f"{type(error).__name__}: {str(error)[:200]}")
                continue
            (problems.append(problem) if problem else done.add(key))
    except concurrent.futures.TimeoutError:
        print(f"precompile: deadline reached, {len(done)}/{len(tasks)} compiled", flush=True)
    if len(done) + len(problems) == len(futures):
        pool.shutdown(wait=True)
    else:
        workers_left = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers_left:
            proc.terminate()  # workers this function started, still compiling
    if problems:
        print(f"precompile problems: {problems}", flush=True)
    return done


def previous_ratios() -> dict:
    try:
        rows = json.loads(PREVIOUS.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return {}
    return {(r["m"], r["k"], r["n"], r["b_layout"]): r.get("ratio_model", 2.0) for r in rows}


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=135.0, help="seconds for the whole run")
    parser.add_argument("--compile-share", type=float, default=0.45, help="share of the budget for compiling")
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-m", type=int, default=2048)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    start = time.time()
    if not torch.cuda.is_available():
        print("sweep_small_m: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    kind = bench_gemm.device_kind(props.name)
    before = previous_ratios()
    # Each small-M op-row GEMM in its own layout first (worst last time first), then the other.
    own = [s for s in shapes.local_gemm_shapes() if s.m <= args.max_m]
    own.sort(key=lambda s: -before.get((s.m, s.k, s.n, s.b_layout), 2.0))
    keys = {(s.m, s.k, s.n, s.b_layout) for s in own}
    other = [
        dataclasses.replace(s, b_layout="kn" if s.b_layout == "nk" else "nk")
        for s in own
        if (s.m, s.k, s.n, "kn" if s.b_layout == "nk" else "nk") not in keys
    ]
    plans = []
    for shape in own + other:
        short = before.get((shape.m, shape.k, shape.n, shape.b_layout), 2.0) <= 1.02
        if shape in other:
            short = before.get((shape.m, shape.k, shape.n, "kn" if shape.b_layout == "nk" else "nk"), 2.0) <= 1.02
        chosen = kernels.select_config(shape.m, shape.n, shape.k, torch.device("cuda"), torch.bfloat16, local=True)
        cands = {chosen.name: (chosen, None)}
        cands.update(candidates(shape.m, shape.n, shape.k, num_sms, short))
        plans.append((shape, chosen, cands))
    tasks = {}
    for shape, _, cands in plans:
        for cfg, grid in cands.values():
            g = launch_grid(cfg, grid, shape.m, shape.n, shape.k, num_sms)
            key = compile_key(cfg, shape.b_layout, g)
            tasks.setdefault(key, (cfg, shape.b_layout, shape.m, shape.k, shape.n, grid))
    print(
        f"device {props.name} ({kind}), {num_sms} SMs; {len(plans)} shapes, "
        f"{sum(len(c) for _, _, c in plans)} variants, {len(tasks)} kernels to compile",
        flush=True,
    )
    compiled = precompile(tasks, args.workers, start + args.budget * args.compile_share)
    print(f"compiled {len(compiled)}/{len(tasks)} kernels at {time.time() - start:.0f} s", flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"sweep_small_m_{kind}_{now:%Y-%m-%d_%H%M}.json"
    report = {
        "benchmark": "sweep_small_m",
        "device": props.name,
        "device_kind": kind,
        "num_sms": num_sms,
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": bench_gemm.triton.__version__,
        "samples": args.samples,
        "method": "bench_gemm.bench_shape: CUDA graphs, interleaved replays, median per call; "
        "NaN-poisoned outputs, rel. error vs fp32 reference",
        "compiled_kernels": len(compiled),
        "kernels": len(tasks),
        "complete": False,
        "rows": [],
    }
    for shape, chosen, cands in plans:
        if time.time() - start > args.budget - 4:
            print("budget reached; stopping", flush=True)
            break
        runnable = {}
        for name, (cfg, grid) in cands.items():
            g = launch_grid(cfg, grid, shape.m, shape.n, shape.k, num_sms)
            if compile_key(cfg, shape.b_layout, g) in compiled:
                runnable[name] = (cfg, grid)
        configs = {name: cfg for name, (cfg, _) in runnable.items()}
        programs = {name: grid for name, (_, grid) in runnable.items() if grid is not None}
        try:
            row = bench_gemm.bench_shape(shape, configs, chosen.name, torch.bfloat16, args.samples, programs)
        except Exception as error:  # recorded; the next shape still runs
            print(f"{shape.m}x{shape.k}x{shape.n} {shape.b_layout}: {type(error).__name__}: {error}", flush=True)
            report["rows"].append(
                {
                    "m": shape.m,
                    "k": shape.k,
                    "n": shape.n,
                    "b_layout": shape.b_layout,
                    "error": f"{type(error).__name__}: {str(error)[:500]}",
                }
            )
            torch.cuda.empty_cache()
            continue
        cublas = row["variants"]["cublas"].get("ms")
        for name, v in row["variants"].items():
            if "ms" in v and cublas:
                v["ratio"] = v["ms"] / cublas
        row["skipped_uncompiled"] = sorted(set(cands) - set(runnable))
        report["rows"].append(row)
        path.write_text(json.dumps(report, indent=1))
        print(
            f"{shape.m}x{shape.k}x{shape.n} {shape.b_layout}: cuBLAS {cublas * 1000 if cublas else math.nan:.1f} us;"
            f" model {row.get('ratio_model', math.nan):.3f} ({chosen.name}); best "
            f"{row.get('ratio_best', math.nan):.3f} ({row.get('best_variant')}) [{time.time() - start:.0f} s]",
            flush=True,
        )
    report["complete"] = len(report["rows"]) == len(plans)
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}: {len(report['rows'])}/{len(plans)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
