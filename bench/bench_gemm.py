"""Local GEMM vs cuBLAS (torch.mm) on every local GEMM of the benchmark's op rows.

    python bench/bench_gemm.py                 # the config the model picks, vs cuBLAS
    python bench/bench_gemm.py --sweep         # also every candidate config (calibrates the model)
    python bench/bench_gemm.py --quick         # baselines rows only
    python bench/bench_gemm.py --small-m       # M <= 2048 rows: many candidate configs each,
                                               # split-K one-launch fixup included, vs cuBLAS
    python bench/bench_gemm.py --fp8           # FP8 (e4m3) rows vs torch._scaled_mm, per-tensor
                                               # and row-wise scales
    --shapes 128x8192x5120nk,256x2048x8192kn   # only these local GEMMs (MxKxN + B layout)
    python bench/bench_gemm.py --issue --precompile 15 --samples 10
                                               # issue 18's whole table in one run: every op-row
                                               # GEMM in both B layouts vs cuBLAS, then FP8 vs
                                               # torch._scaled_mm; within-5% counts per group
    --compare OLD.json                         # also time OLD's model choice on each row
    --min-m 4096                               # only rows with M >= 4096

Each shape: fresh random bf16 inputs (several sets when one fits in L2), outputs poisoned with
NaN, relative error of every variant vs an fp32 reference, then all variants timed in the same
run (CUDA graphs, interleaved, median). Writes JSON to --out (default: $OUT if set, else
bench/results/) named with the device kind and date; prints a table of ratios last.
"""

from __future__ import annotations

import argparse
import dataclasses
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
HOST_DESC_PREFIX = "hostdesc/"

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
    for bm, bn, stages, warps, split_e, splits in (
        (64, 128, 4, 4, 1, (2, 3, 4)),
        (128, 128, 4, 4, 1, (2, 3, 4)),
        (128, 256, 3, 8, 2, (2, 3, 4)),
    )
    for split in splits
)
ERROR_LIMIT = 1e-2  # bf16 operands, fp32 accumulation, K up to 28672
# FP8: the operands are exact e4m3 values, the reference is their fp32 product; what is left is
# the bf16 rounding of C and the accumulation order.
FP8_ERROR_LIMIT = 1e-2
SMALL_M_MAX = 2048


def small_m_candidates(m: int, n: int, num_sms: int, full_sweep: bool = False) -> tuple[GemmConfig, ...]:
    """The configs --small-m times on a shape: the three blocks unsplit, and for blocks whose
    tiles leave the chip under two waves, split-K in one launch (fixup) with the factors that
    bring the work items to between 1 and 3 waves, plus the two-launch split-K at the same
    factors for 128x256 with --sweep (the model's own split-K choice is always timed)."""
    blocks = ((128, 256, 3, 8, 2), (128, 128, 4, 4, 1), (64, 128, 4, 4, 1))
    out = [GemmConfig(bm, bn, 64, 8, st, w, True, e, 1.0) for bm, bn, st, w, e in blocks]
    for bm, bn, st, w, e in blocks[:3]:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        if tiles >= 2 * num_sms:
            continue
        for split in (2, 4, 8):
            if tiles * split > 3 * num_sms or tiles * split < num_sms * 0.75:
                continue
            out.append(GemmConfig(bm, bn, 64, 8, st, w, True, 1, 1.0, split_k=split, split_fixup=True))
            if (bm, bn) == (128, 256) and split <= 4 and full_sweep:
                out.append(GemmConfig(bm, bn, 64, 8, st, w, True, 1, 1.0, split_k=split))
    return tuple(out)


# The blocks --small-m --wide times (BM, BN, BK, stages, warps, epilogue split), each persistent,
# non-persistent (one program per tile) and as stream-K where it has fewer than four waves of
# tiles; the split-K factor that brings 128x128 / 128x64 / 64x128 work to one wave, two-launch.
WIDE_BLOCKS = (
    (128, 256, 64, 3, 8, 2),
    (128, 128, 64, 4, 4, 1),
    (64, 128, 64, 4, 4, 1),
    (128, 64, 64, 6, 4, 1),
    (64, 64, 128, 4, 4, 1),
    (128, 64, 128, 4, 4, 1),
    (128, 128, 128, 3, 4, 1),
)
WIDE_STREAM_K = (
    (128, 256, 64, 3, 8, 2),
    (128, 128, 64, 4, 4, 1),
    (64, 128, 64, 4, 4, 1),
    (128, 64, 64, 6, 4, 1),
)
WIDE_SPLIT = (
    (128, 128, 64, 4, 4, 1),
    (128, 64, 64, 6, 4, 1),
    (64, 128, 64, 4, 4, 1),
)


# Blocks also timed with host-made TMA descriptors (bench/gemm_experiments.py).
WIDE_HOST_DESC = ((64, 128, 64, 4, 4, 1),)


def host_descriptor_gemm():
    import gemm_experiments

    return gemm_experiments.gemm_host_descriptors


def wide_candidates(m: int, n: int, k: int, num_sms: int) -> tuple[GemmConfig, ...]:
    """The configs --small-m --wide times on a shape (see WIDE_BLOCKS)."""
    out = []
    for bm, bn, bk, st, w, e in WIDE_BLOCKS:
        cfg = GemmConfig(bm, bn, bk, 8, st, w, True, e, 1.0)
        out.append(cfg)
        if math.ceil(m / bm) * math.ceil(n / bn) > num_sms:
            out.append(dataclasses.replace(cfg, persistent=False))
    for bm, bn, bk, st, w, e in WIDE_STREAM_K:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        if tiles < 4 * num_sms and tiles % num_sms:
            out.append(GemmConfig(bm, bn, bk, 8, st, w, True, 1, 1.0, stream_k=True))
    for bm, bn, bk, st, w, e in WIDE_SPLIT:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        split = round(num_sms / tiles)
        if tiles < num_sms and split >= 2 and math.ceil(k / bk) >= 8 * split:
            out.append(GemmConfig(bm, bn, bk, 8, st, w, True, e, 1.0, split_k=split))
    return tuple(out)


# FP8 configs timed beside the model's choice (BLOCK_K 128: one K-step moves the bytes of a
# bf16 64-deep step).
FP8_EXTRA = (
    GemmConfig(128, 256, 128, 8, 3, 8, True, 2, 1.0),
    GemmConfig(128, 256, 128, 8, 4, 8, True, 2, 1.0),
    GemmConfig(128, 128, 128, 8, 4, 4, True, 1, 1.0),
    GemmConfig(64, 128, 128, 8, 4, 4, True, 1, 1.0),
    GemmConfig(128, 256, 64, 8, 4, 8, True, 2, 1.0),
)


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


def bench_shape(
    shape: shapes.GemmShape,
    configs: dict[str, GemmConfig],
    model_name: str,
    dtype: torch.dtype,
    samples: int,
    programs: dict[str, int] | None = None,
) -> dict:
    """Every variant of `configs` (name -> config) and cuBLAS on one shape: checked, then timed.
    `programs`: name -> grid size for variants launched with fewer programs than the default."""
    programs = programs or {}
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
        if name.startswith(HOST_DESC_PREFIX):
            fns[name] = lambda i, cfg=cfg: host_descriptor_gemm()(sets[i][0], sets[i][1], sets[i][2], cfg)
        else:
            fns[name] = lambda i, cfg=cfg, grid=programs.get(name): kernels.gemm(
                sets[i][0], sets[i][1], out=sets[i][2], config=cfg, num_programs=grid
            )

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
    del ref, results
    sets.clear()  # frees the inputs before the next shape's
    flops = 2.0 * shape.m * shape.n * shape.k
    row = {
        "m": shape.m,
        "k": shape.k,
        "n": shape.n,
        "b_layout": shape.b_layout,
        "labels": list(shape.labels),
        "input_sets": n_sets,
        "model_choice": model_name,
        "variants": {},
    }
    for name in fns:
        entry = {"rel_error": errors[name], "failed_check": name in bad}
        if name in launch_errors:
            entry["launch_error"] = launch_errors[name]
        if name in times:
            ms = times[name]["ms"]
            entry.update(ms=ms, spread=times[name]["spread"], tflops=flops / ms / 1e9)
        row["variants"][name] = entry
    cublas_ms = row["variants"]["cublas"].get("ms")
    triton_timed = {
        n: v["ms"] for n, v in row["variants"].items() if n != "cublas" and "ms" in v and not v["failed_check"]
    }
    if cublas_ms and triton_timed:
        best = min(triton_timed, key=triton_timed.get)
        row["best_variant"] = best
        row["ratio_best"] = triton_timed[best] / cublas_ms
        if model_name in triton_timed:
            row["ratio_model"] = triton_timed[model_name] / cublas_ms
    return row


def parse_config_name(name: str) -> GemmConfig:
    """GemmConfig.name back to the config (efficiency 1.0: not part of the name)."""
    parts = name.split("_")
    bm, bns, bk = parts[0].split("x")
    bm, bk = int(bm), int(bk)
    bn, _, bn2 = bns.partition("+")
    bn = int(bn)
    fields = {"split_k": 1, "split_fixup": False, "split_tail": False, "persistent": True, "stream_k": False}
    fields["block_n2"] = int(bn2) if bn2 else 0
    fields["flatten"] = True
    stages = warps = group = epilogue = None
    ws = True
    for part in parts[1:]:
        if part in ("ws", "nows"):
            ws = part == "ws"
        elif part == "nf":
            fields["flatten"] = False
        elif part == "np":
            fields["persistent"] = False
        elif part == "sk":
            fields["stream_k"] = True
        elif part[0] == "s" and part[1:].isdigit():
            stages = int(part[1:])
        elif part[0] == "w" and part[1:].isdigit():
            warps = int(part[1:])
        elif part[0] == "g" and part[1:].isdigit():
            group = int(part[1:])
        elif part[0] == "e" and part[1:].isdigit():
            epilogue = int(part[1:])
        elif part[0] in "kt" and part[1:].rstrip("f").isdigit():
            fields["split_k"] = int(part[1:].rstrip("f"))
            fields["split_fixup"] = part.endswith("f")
            fields["split_tail"] = part[0] == "t"
        else:
            raise ValueError(f"config name {name!r}: unknown part {part!r}")
    if None in (stages, warps, group, epilogue):
        raise ValueError(f"config name {name!r}: stages, warps, group and epilogue are required")
    cfg = GemmConfig(bm, bn, bk, group, stages, warps, ws, epilogue, 1.0, **fields)
    if cfg.name != name:
        raise ValueError(f"config name {name!r} parsed as {cfg.name!r}")
    return cfg


def earlier_choices(path: str) -> dict[tuple, GemmConfig]:
    """(m, k, n, layout) -> the config an earlier run's model chose (its JSON's model_choice)."""
    rows = json.loads(Path(path).read_text())["rows"]
    return {(r["m"], r["k"], r["n"], r["b_layout"]): parse_config_name(r["model_choice"]) for r in rows}


def shape_group(labels: list[str] | tuple[str, ...]) -> str:
    """The docs/PERFORMANCE.md group of a local GEMM, from its first op row's label."""
    words = labels[0].split() if labels else []
    if "baseline" in words:
        return "baselines"
    if "small-M" in words:
        return "small-M rows of the baselines"
    if any(w in words for w in (f"M{t}" for t in shapes.DECODE_TOKENS)):
        return "decode (M = 128-1024)"
    if any(w in words for w in (f"M{t}" for t in shapes.MODEL_TOKENS)):
        return "model layers (M = 4096, 8192)"
    return "other"


def print_groups(rows: list[dict], key: str, title: str) -> None:
    """Per group (and all): geomean of row[key], rows within 5%, worst."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if key in r:
            groups.setdefault(shape_group(r["labels"]), []).append(r[key])
            groups.setdefault("all", []).append(r[key])
    for name, ratios in groups.items():
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(
            f"{title} {name}: {len(ratios)} GEMMs, geomean {geo:.3f}, "
            f"{sum(1 for x in ratios if x <= 1.05)}/{len(ratios)} within 5%, worst {max(ratios):.3f}"
        )


def print_table(rows: list[dict]) -> None:
    print(
        f"{'M':>6} {'K':>6} {'N':>6} {'B':>2} {'cuBLAS ms':>9} {'model ms':>9} "
        f"{'model/cuBLAS':>12} {'best/cuBLAS':>11}  model config -> best config"
    )
    for r in rows:
        v = r["variants"]
        model = v.get(r["model_choice"], {})
        print(
            f"{r['m']:>6} {r['k']:>6} {r['n']:>6} {r['b_layout']:>2} "
            f"{v['cublas'].get('ms', math.nan):>9.4f} {model.get('ms', math.nan):>9.4f} "
            f"{r.get('ratio_model', math.nan):>12.3f} {r.get('ratio_best', math.nan):>11.3f}"
            f"  {r['model_choice']} -> {r.get('best_variant', '-')}"
        )
    ratios = [r["ratio_model"] for r in rows if "ratio_model" in r]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        within = sum(1 for x in ratios if x <= 1.05)
        print(
            f"model config: geomean time ratio vs cuBLAS {geo:.3f}; "
            f"{within}/{len(ratios)} rows within 5%; worst {max(ratios):.3f}"
        )
    print_groups(rows, "ratio_model", "bf16 model config,")
    print_groups(rows, "ratio_compare", "bf16 --compare run's choice,")
    failed = [
        (r["m"], r["k"], r["n"], n)
        for r in rows
        for n, v in r["variants"].items()
        if v["failed_check"] and "launch_error" not in v
    ]
    launch = sorted({n for r in rows for n, v in r["variants"].items() if "launch_error" in v})
    if launch:
        print(f"configs that failed to launch (see JSON): {launch}")
    print(f"correctness failures: {failed if failed else 'none'}")


def _compile_one(task: tuple) -> str:
    """Runs one config once (in a worker process) on the shape of a row that will time it, with
    the grid the timed run launches, so that Triton compiles the kernel it will use (the same
    specialisation of every integer argument) into its on-disk cache."""
    _, (kind, cfg, layout, mode, m, k, n, grid) = task
    try:
        dtype = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = (
            torch.randn(n, k, device="cuda").to(dtype).t()
            if layout == "nk"
            else torch.randn(k, n, device="cuda").to(dtype)
        )
        if kind == "fp8":
            sa, sb = (
                (torch.tensor(1.0, device="cuda"), torch.tensor(1.0, device="cuda"))
                if mode == "tensor"
                else (torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda"))
            )
            kernels.gemm_fp8(a, b, sa, sb, config=cfg)
        elif kind == "hostdesc":
            host_descriptor_gemm()(a, b, torch.empty(m, n, dtype=dtype, device="cuda"), cfg)
        else:
            kernels.gemm(a, b, config=cfg)
        torch.cuda.synchronize()
        return ""
    except Exception as error:  # reported, and the timed run will show it again
        return f"{cfg.name} {layout} {mode}: {type(error).__name__}: {str(error)[:200]}"


def launch_grid(cfg: GemmConfig, m: int, n: int, k: int, num_sms: int) -> int:
    """The grid `gemm` launches cfg with on this shape."""
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.width)
    if cfg.stream_k:
        return max(1, min(num_sms, tiles * math.ceil(k / cfg.block_k)))
    work = tiles * cfg.split_k
    if cfg.split_tail and cfg.split_fixup:
        dp_tiles = kernels.gemm_one_launch_module.tail_fixup_split(tiles, num_sms, True)
        work = max(dp_tiles, (tiles - dp_tiles) * cfg.split_k)
    elif cfg.split_tail:
        dp_tiles = kernels.gemm_module.split_tail_work(tiles, num_sms)
        work = dp_tiles + (tiles - dp_tiles) * cfg.split_k
    programs = num_sms if cfg.persistent else work
    return max(1, min(programs, work if cfg.split_k > 1 else tiles))


def compile_task(kind: str, cfg: GemmConfig, shape, mode: str, num_sms: int) -> tuple:
    """(key, what to run): the key is what decides which compiled kernel the timed run uses --
    the config (a non-persistent one is the persistent kernel at another grid size), the
    layout, the scale mode, whether the grid is a multiple of 16 (Triton specialises integer
    arguments on it), stream-K's slot count; one run per key."""
    grid = launch_grid(cfg, shape.m, shape.n, shape.k, num_sms)
    slots = 0
    if cfg.stream_k:
        tiles = math.ceil(shape.m / cfg.block_m) * math.ceil(shape.n / cfg.block_n)
        slots = kernels.gemm_one_launch_module.stream_k_slots(tiles, math.ceil(shape.k / cfg.block_k), grid)
    key = (kind, dataclasses.replace(cfg, persistent=True), shape.b_layout, mode, grid % 16 == 0, grid == 1, slots)
    return key, (kind, cfg, shape.b_layout, mode, shape.m, shape.k, shape.n, grid)


def precompile(tasks: list[tuple], workers: int) -> None:
    """Compiles the configs a run will time in `workers` processes at once (Triton compiles one
    kernel at a time per process; a run of many configs is otherwise mostly compiling)."""
    import concurrent.futures
    import multiprocessing
    import time

    start = time.time()
    unique = list({key: task for key, task in reversed(tasks)}.items())
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        problems = [p for p in pool.map(_compile_one, unique) if p]
    print(
        f"precompiled {len(unique)} kernels in {time.time() - start:.1f} s with {workers} "
        f"processes" + (f"; problems: {problems}" if problems else ""),
        flush=True,
    )


def parse_shapes(text: str) -> list[tuple[int, int, int, str]]:
    """ "128x8192x5120nk,256x2048x8192kn" -> [(m, k, n, layout)]; ValueError naming the item."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        layout = item[-2:]
        dims = item[:-2].split("x")
        if layout not in ("kn", "nk") or len(dims) != 3 or not all(d.isdigit() for d in dims):
            raise ValueError(f"--shapes item {item!r}: expected MxKxN followed by kn or nk")
        out.append((int(dims[0]), int(dims[1]), int(dims[2]), layout))
    return out


def select_shapes(all_shapes: list, wanted: list[tuple[int, int, int, str]]) -> list:
    known = {(s.m, s.k, s.n, s.b_layout): s for s in all_shapes}
    return [known.get(key) or shapes.GemmShape(*key, labels=("--shapes",)) for key in wanted]


def fp8_operands(shape: shapes.GemmShape, device):
    """e4m3 A, B (B as [K, N] or a [N, K] weight viewed transposed), and scales per mode."""
    a = (torch.randn(shape.m, shape.k, device=device) * 2).to(torch.float8_e4m3fn)
    if shape.b_layout == "nk":
        b = (torch.randn(shape.n, shape.k, device=device) * 2).to(torch.float8_e4m3fn).t()
    else:
        b = (torch.randn(shape.k, shape.n, device=device) * 2).to(torch.float8_e4m3fn)
    scales = {
        "tensor": (torch.tensor(0.5, device=device), torch.tensor(0.25, device=device)),
        "row": (torch.rand(shape.m, 1, device=device) + 0.1, torch.rand(1, shape.n, device=device) + 0.1),
    }
    out = torch.empty(shape.m, shape.n, dtype=torch.bfloat16, device=device)
    return a, b, scales, out


def bench_fp8_shape(shape: shapes.GemmShape, configs: dict[str, GemmConfig], model_name: str, samples: int) -> dict:
    """Every FP8 variant (torch._scaled_mm and each config, per scale mode) on one shape."""
    device = torch.device("cuda")
    per_set = shape.m * shape.k + shape.k * shape.n + 2 * shape.m * shape.n
    n_sets = timing.input_sets_for(per_set, device)
    sets = [fp8_operands(shape, device) for _ in range(n_sets)]
    # _scaled_mm wants B column-major: a [N, K] weight viewed transposed is; a [K, N] B is copied
    # to that layout once here (cuBLAS's FP8 kernels have no row-major B), not per call.
    b_col = [b if b.stride(0) == 1 else b.t().contiguous().t() for _, b, _, _ in sets]
    fns, modes = {}, {}
    for mode in ("tensor", "row"):
        # No out=: _scaled_mm allocates its result (from the caching allocator; inside the
        # timing graphs, from the graph's pool), as its callers run it.
        fns[f"scaled_mm/{mode}"] = lambda i, mode=mode: torch._scaled_mm(
            sets[i][0], b_col[i], scale_a=sets[i][2][mode][0], scale_b=sets[i][2][mode][1], out_dtype=torch.bfloat16
        )
        modes[f"scaled_mm/{mode}"] = mode
        for name, cfg in configs.items():
            fns[f"{name}/{mode}"] = lambda i, cfg=cfg, mode=mode: kernels.gemm_fp8(
                sets[i][0], sets[i][1], sets[i][2][mode][0], sets[i][2][mode][1], out=sets[i][3], config=cfg
            )
            modes[f"{name}/{mode}"] = mode
    a0, b0, scales0, out0 = sets[0]
    base = a0.float() @ b0.float()
    errors, launch_errors = {}, {}
    for name, fn in fns.items():
        sa, sb = scales0[modes[name]]
        ref = base * sa.reshape(-1, 1) * sb.reshape(1, -1)
        out0.fill_(float("nan"))
        try:
            result = fn(0)
            torch.cuda.synchronize()
        except Exception as error:
            launch_errors[name] = f"{type(error).__name__}: {str(error)[:300]}"
            errors[name] = math.inf
            continue
        errors[name] = timing.relative_error(result, ref)
    del base
    bad = {n for n, e in errors.items() if not e < FP8_ERROR_LIMIT}
    timed = {n: f for n, f in fns.items() if n not in bad}
    times = timing.time_variants(timed, n_sets, samples=samples)
    row = {
        "m": shape.m,
        "k": shape.k,
        "n": shape.n,
        "b_layout": shape.b_layout,
        "dtype": "fp8_e4m3",
        "labels": list(shape.labels),
        "input_sets": n_sets,
        "model_choice": model_name,
        "variants": {},
    }
    flops = 2.0 * shape.m * shape.n * shape.k
    for name in fns:
        entry = {"rel_error": errors[name], "failed_check": name in bad, "scales": modes[name]}
        if name in launch_errors:
            entry["launch_error"] = launch_errors[name]
        if name in times:
            entry.update(ms=times[name]["ms"], spread=times[name]["spread"], tflops=flops / times[name]["ms"] / 1e9)
        row["variants"][name] = entry
    # cuBLAS bf16 on the same values (e4m3 -> bf16 is exact), timed right after: the FP8 / bf16
    # rate the simulator's gemm.fp8 calibration is fitted to.
    bf16 = [(a.to(torch.bfloat16), b.to(torch.bfloat16)) for a, b, _, _ in sets]
    sets.clear()
    bf16_out = torch.empty(shape.m, shape.n, dtype=torch.bfloat16, device=device)
    bf16_time = timing.time_variants(
        {"cublas_bf16": lambda i: torch.mm(bf16[i][0], bf16[i][1], out=bf16_out)}, n_sets, samples=samples
    )
    row["cublas_bf16_ms"] = bf16_time["cublas_bf16"]["ms"]
    bf16.clear()  # frees the copies (the closure above is not called again)
    for mode in ("tensor", "row"):
        ref_ms = row["variants"][f"scaled_mm/{mode}"].get("ms")
        model = row["variants"].get(f"{model_name}/{mode}", {})
        if ref_ms and "ms" in model and not model["failed_check"]:
            row[f"ratio_model_{mode}"] = model["ms"] / ref_ms
        ours = {
            n: v["ms"]
            for n, v in row["variants"].items()
            if v["scales"] == mode and not n.startswith("scaled_mm") and "ms" in v and not v["failed_check"]
        }
        if ref_ms and ours:
            best = min(ours, key=ours.get)
            row[f"best_{mode}"] = best
            row[f"ratio_best_{mode}"] = ours[best] / ref_ms
    return row


def print_candidates(row: dict, reference: str) -> None:
    """Every variant's time and ratio to the reference, fastest first (for tuning)."""
    ref_ms = row["variants"].get(reference, {}).get("ms")
    timed = sorted(((v["ms"], n) for n, v in row["variants"].items() if "ms" in v))
    for ms, name in timed:
        ratio = ms / ref_ms if ref_ms else math.nan
        err = row["variants"][name]["rel_error"]
        print(f"      {name:<44} {ms * 1000:8.2f} us  x{ratio:.3f}  err {err:.1e}")
    for name, v in row["variants"].items():
        if "ms" not in v:
            why = v.get("launch_error") or f"failed check (err {v['rel_error']:.2e})"
            print(f"      {name:<44} not timed: {why}")


def print_fp8_table(rows: list[dict]) -> None:
    print(
        f"{'M':>6} {'K':>6} {'N':>6} {'B':>2}  {'tensor: model':>13} {'best':>6}  "
        f"{'row: model':>10} {'best':>6}  (time / torch._scaled_mm)"
    )
    for r in rows:
        print(
            f"{r['m']:>6} {r['k']:>6} {r['n']:>6} {r['b_layout']:>2}  "
            f"{r.get('ratio_model_tensor', math.nan):>13.3f} {r.get('ratio_best_tensor', math.nan):>6.3f}  "
            f"{r.get('ratio_model_row', math.nan):>10.3f} {r.get('ratio_best_row', math.nan):>6.3f}"
        )
    for mode in ("tensor", "row"):
        ratios = [r[f"ratio_model_{mode}"] for r in rows if f"ratio_model_{mode}" in r]
        if ratios:
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(
                f"fp8 {mode} scales, model config: geomean {geo:.3f}; "
                f"{sum(1 for x in ratios if x <= 1.05)}/{len(ratios)} within 5%; worst {max(ratios):.3f}"
            )
        before = [r[f"ratio_compare_{mode}"] for r in rows if f"ratio_compare_{mode}" in r]
        if before:
            geo = math.exp(sum(math.log(x) for x in before) / len(before))
            print(
                f"fp8 {mode} scales, --compare config (same run): geomean {geo:.3f}; "
                f"{sum(1 for x in before if x <= 1.05)}/{len(before)} within 5%; worst {max(before):.3f}"
            )
        print_groups(rows, f"ratio_model_{mode}", f"fp8 {mode} scales,")
    failed = [
        (r["m"], r["k"], r["n"], n)
        for r in rows
        for n, v in r["variants"].items()
        if v["failed_check"] and "launch_error" not in v
    ]
    print(f"fp8 correctness failures: {failed if failed else 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="time every candidate config")
    parser.add_argument("--quick", action="store_true", help="baselines rows only")
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--limit", type=int, default=0, help="first N shapes only (0: all)")
    parser.add_argument(
        "--small-m", action="store_true", help=f"M <= {SMALL_M_MAX} rows, each with many candidate configs"
    )
    parser.add_argument("--fp8", action="store_true", help="FP8 rows vs torch._scaled_mm")
    parser.add_argument("--wide", action="store_true", help="with --small-m: the wide candidate set (wide_candidates)")
    parser.add_argument("--model-only", action="store_true", help="time only the model's config (and the reference)")
    parser.add_argument("--shapes", default="", help="only these: MxKxN + kn|nk, comma-separated")
    parser.add_argument(
        "--precompile",
        type=int,
        default=0,
        metavar="WORKERS",
        help="compile every config of the run in this many processes first",
    )
    parser.add_argument(
        "--both-layouts", action="store_true", help="run every selected shape with B as [K, N] and as [N, K]"
    )
    parser.add_argument("--min-m", type=int, default=0, help="only rows with M at least this")
    parser.add_argument(
        "--compare",
        default="",
        metavar="JSON",
        help="also time, on each shape, the config an earlier bench_gemm run's model chose for it "
        "(before/after of a model change in one run)",
    )
    parser.add_argument(
        "--issue",
        action="store_true",
        help="the whole issue-18 table in one run: every op-row GEMM in both B layouts, the model's "
        "config vs cuBLAS, then the same shapes in FP8 vs torch._scaled_mm (implies --model-only "
        "--both-layouts; use with --precompile)",
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device", file=sys.stderr)
        return 2
    if args.issue:
        args.model_only = args.both_layouts = True
        status = run(dataclasses.replace(_Args(**vars(args)), fp8=False))
        return status or run(dataclasses.replace(_Args(**vars(args)), fp8=True))
    return run(args)


@dataclasses.dataclass(frozen=True)
class _Args:
    """The parsed options, copyable with a field changed (--issue runs bf16, then FP8)."""

    sweep: bool
    quick: bool
    samples: int
    dtype: str
    out: str
    limit: int
    small_m: bool
    fp8: bool
    wide: bool
    model_only: bool
    shapes: str
    precompile: int
    both_layouts: bool
    min_m: int
    compare: str
    issue: bool


def run(args) -> int:
    """One bench_gemm run (bf16 or, with args.fp8, FP8) of the rows args select."""
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    kind = device_kind(props.name)
    gemm_shapes = shapes.local_gemm_shapes()
    if args.quick:
        gemm_shapes = [s for s in gemm_shapes if any("baseline" in l for l in s.labels)]
    if args.small_m:
        gemm_shapes = [s for s in gemm_shapes if s.m <= SMALL_M_MAX]
    if args.min_m:
        gemm_shapes = [s for s in gemm_shapes if s.m >= args.min_m]
    compare = earlier_choices(args.compare) if args.compare else {}
    if args.shapes:
        gemm_shapes = select_shapes(shapes.local_gemm_shapes(), parse_shapes(args.shapes))
    if args.both_layouts:
        # A GEMM that already appears in both layouts is run once per layout.
        both = [dataclasses.replace(s, b_layout=layout) for s in gemm_shapes for layout in ("kn", "nk")]
        gemm_shapes = list({(s.m, s.k, s.n, s.b_layout): s for s in reversed(both)}.values())[::-1]
    if args.limit:
        gemm_shapes = gemm_shapes[: args.limit]
    print(
        f"device {props.name} ({kind}), {props.multi_processor_count} SMs, "
        f"L2 {props.L2_cache_size >> 20} MiB; torch {torch.__version__}, triton "
        f"{triton.__version__}; kernels from {KERNELS_FROM}; {len(gemm_shapes)} shapes",
        flush=True,
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "benchmark": "bench_gemm",
        "device": props.name,
        "device_kind": kind,
        "num_sms": props.multi_processor_count,
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": args.dtype,
        "sweep": args.sweep,
        "small_m": args.small_m,
        "fp8": args.fp8,
        "samples": args.samples,
        "method": "CUDA graphs of calls, interleaved replays, median per call; "
        "random inputs rotated over sets > 2x L2; NaN-poisoned outputs; "
        "rel. error vs fp32 reference",
        "complete": False,
        "rows": [],
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "_sweep" if args.sweep else ""
    suffix += "_fp8" if args.fp8 else ("_smallm" if args.small_m else "")
    path = out_dir / f"bench_gemm_{kind}_{now:%Y-%m-%d_%H%M}{suffix}.json"
    rows = report["rows"]
    if args.fp8:
        plans = []
        for shape in gemm_shapes:
            chosen = kernels.gemm_fp8_module.select_fp8_config(
                shape.m, shape.n, shape.k, torch.device("cuda"), local=True
            )
            configs = {chosen.name: chosen}
            for cfg in () if args.model_only else FP8_EXTRA:
                configs.setdefault(cfg.name, cfg)
            earlier = compare.get((shape.m, shape.k, shape.n, shape.b_layout))
            if earlier is not None:
                configs.setdefault(earlier.name, earlier)
            plans.append((shape, chosen, configs))
        if args.precompile:
            precompile(
                [
                    compile_task("fp8", cfg, shape, mode, props.multi_processor_count)
                    for shape, _, configs in plans
                    for cfg in configs.values()
                    for mode in ("tensor", "row")
                ],
                args.precompile,
            )
        for shape, chosen, configs in plans:
            row = bench_fp8_shape(shape, configs, chosen.name, args.samples)
            earlier = compare.get((shape.m, shape.k, shape.n, shape.b_layout))
            for mode in ("tensor", "row") if earlier is not None else ():
                ref_ms = row["variants"][f"scaled_mm/{mode}"].get("ms")
                mine = row["variants"].get(f"{earlier.name}/{mode}", {})
                if ref_ms and "ms" in mine and not mine["failed_check"]:
                    row["compare_choice"] = earlier.name
                    row[f"ratio_compare_{mode}"] = mine["ms"] / ref_ms
            rows.append(row)
            print(
                f"  fp8 {shape.m}x{shape.k}x{shape.n} {shape.b_layout}: model/_scaled_mm tensor "
                f"{row.get('ratio_model_tensor', math.nan):.3f} row "
                f"{row.get('ratio_model_row', math.nan):.3f}; cuBLAS bf16 {row['cublas_bf16_ms'] * 1000:.1f} us",
                flush=True,
            )
            print_candidates(row, "scaled_mm/row")
            path.write_text(json.dumps(report, indent=1))
        report["complete"] = True
        path.write_text(json.dumps(report, indent=1))
        print(f"wrote {path}")
        print_fp8_table(rows)
        return 0
    plans = []
    for shape in gemm_shapes:
        chosen = kernels.select_config(shape.m, shape.n, shape.k, torch.device("cuda"), dtype, local=True)
        configs = {chosen.name: chosen}
        if args.sweep:
            for cfg in tuple(kernels.CANDIDATES) + SWEEP_EXTRA:
                configs.setdefault(cfg.name, cfg)
            if math.ceil(shape.m / 128) * math.ceil(shape.n / 256) < 2 * props.multi_processor_count:
                for cfg in SWEEP_SPLIT_K:
                    configs.setdefault(cfg.name, cfg)
        if args.small_m and args.wide:
            for cfg in wide_candidates(shape.m, shape.n, shape.k, props.multi_processor_count):
                configs.setdefault(cfg.name, cfg)
            for bm, bn, bk, st, w, e in WIDE_HOST_DESC:
                cfg = GemmConfig(bm, bn, bk, 8, st, w, True, e, 1.0)
                configs[HOST_DESC_PREFIX + cfg.name] = cfg
        elif args.small_m:
            for cfg in small_m_candidates(shape.m, shape.n, props.multi_processor_count, args.sweep):
                configs.setdefault(cfg.name, cfg)
        if args.small_m and not args.wide:
            fixup = kernels.choose_config(
                shape.m,
                shape.n,
                shape.k,
                props.multi_processor_count,
                2,
                kernels.gemm_module.device_limits(torch.device("cuda"))[1] - 1024,
                fixup=True,
            )
            configs.setdefault(fixup.name, fixup)
        if args.model_only:
            configs = {chosen.name: chosen}
        earlier = compare.get((shape.m, shape.k, shape.n, shape.b_layout))
        if earlier is not None:
            configs.setdefault(earlier.name, earlier)
        plans.append((shape, chosen, configs))
    if args.precompile:
        precompile(
            [
                compile_task(
                    "hostdesc" if name.startswith(HOST_DESC_PREFIX) else "bf16",
                    cfg,
                    shape,
                    "",
                    props.multi_processor_count,
                )
                for shape, _, configs in plans
                for name, cfg in configs.items()
            ],
            args.precompile,
        )
    for shape, chosen, configs in plans:
        row = bench_shape(shape, configs, chosen.name, dtype, args.samples)
        earlier = compare.get((shape.m, shape.k, shape.n, shape.b_layout))
        earlier_ms = row["variants"].get(earlier.name, {}).get("ms") if earlier else None
        cublas_ms = row["variants"]["cublas"].get("ms")
        if earlier_ms and cublas_ms and not row["variants"][earlier.name]["failed_check"]:
            row["compare_choice"] = earlier.name
            row["ratio_compare"] = earlier_ms / cublas_ms
        rows.append(row)
        print(
            f"  {shape.m}x{shape.k}x{shape.n} {shape.b_layout}: model/cuBLAS "
            f"{row.get('ratio_model', math.nan):.3f}, best/cuBLAS "
            f"{row.get('ratio_best', math.nan):.3f} ({row.get('best_variant')})",
            flush=True,
        )
        if args.small_m or args.sweep:
            print_candidates(row, "cublas")
        # Written after every shape: a run cut short by a time limit still leaves its rows.
        path.write_text(json.dumps(report, indent=1))
    report["complete"] = True
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
