"""Candidate forms of the transformed GEMM's wait and notify, timed in one run (issue 16).

bench_wait_overhead.py times the transformer's output; this times several candidates
(bench/wait_variants.py: the output as emitted, the fused forms) against the untransformed
gemm_tma_kernel on the same shapes, all interleaved in one run (CUDA graphs, median), each with
the "lookup only" (empty wait lists) and "waits (AG, w4)" tables, every slot raised before the
launch. Then, per variant, a late-arrival check: A poisoned with NaN, each row shard copied in
by a second stream (copy engine) after a host delay and its slot raised with
cuStreamWriteValue32 while the kernel runs; the output must equal the untransformed kernel's bit
for bit (a TMA load issued before its tile's wait reads NaN).

    python bench/bench_wait_variants.py [--kernel-file GEN.py] [--shapes 8192x8192x8192,...]

GEN.py defaults to `syncopate._core.transform` of kernels/gemm.py's gemm_tma_kernel.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
import triton

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
import timing  # noqa: E402
import wait_variants  # noqa: E402
from bench_wait_overhead import SHAPES, WORLD, grouped_order, load_modules  # noqa: E402

# bench_wait_overhead's shapes, the ones furthest from the target first (a run cut short by its
# time limit keeps the rows it finished).
SHAPES = sorted(
    SHAPES, key=lambda s: [(32768, 4096, 4096), (8192, 8192, 8192), (1024, 8192, 8192)].count(s), reverse=True
)
DEFAULT_VARIANTS = ("emitted", "row at lookup", "row at store", "emitted, no wait")


def transformed_source(kernel_file: Path | None) -> str:
    if kernel_file is not None:
        return kernel_file.read_text(encoding="utf-8")
    from syncopate import _core

    path = REPO / "python" / "syncopate" / "kernels" / "gemm.py"
    return _core.transform(path.read_text(encoding="utf-8"), str(path), "gemm_tma_kernel").source


def load_variant(source: str, name: str, tmp: Path):
    text = wait_variants.make_variant(source, name)
    stem = "v_" + "".join(c if c.isalnum() else "_" for c in name)
    path = tmp / f"{stem}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"syncopate.kernels._{stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.gemm_tma_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel-file", type=Path)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(BENCH / "results"))
    parser.add_argument("--shapes", default="")
    parser.add_argument("--variants", default=";".join(DEFAULT_VARIANTS), help="names separated by ';'")
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--late-shape", default="4096x4096x4096")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s] or SHAPES
    names = [v for v in args.variants.split(";") if v]
    source = transformed_source(args.kernel_file)
    gemm_mod, _ = load_modules(REPO / "python" / "syncopate" / "kernels" / "gemm.py")
    from syncopate.launch import TileTables, new_error_record, check_error

    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"wait_variants_{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    kernels = {n: load_variant(source, n, tmp) for n in names}
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    gemm_mod.ensure_descriptor_allocator()
    kind = "nvidia-h200" if "H200" in props.name else ("nvidia-h100-x1" if "H100" in props.name else props.name)
    now = datetime.datetime.now(datetime.timezone.utc)
    out_path = Path(args.out) / f"bench_wait_variants_{kind}_{now:%Y-%m-%d_%H%M}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "bench_wait_variants",
        "device": props.name,
        "device_kind": kind,
        "date": now.isoformat(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "variants": {n: wait_variants.VARIANTS[n] for n in names},
        "rows": [],
        "late": [],
    }

    def setup(m, k, n):
        cfg = gemm_mod.select_config(m, n, k, dev, torch.bfloat16, allow_split_k=False)
        tiles_m, tiles_n = triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.block_n)
        grid = max(1, min(sms, tiles_m * tiles_n))
        shard = -(-m // WORLD)
        shard_of_tile = [min((tm * cfg.block_m) // shard, WORLD - 1) for tm in range(tiles_m)]
        base = grouped_order(tiles_m, tiles_n, cfg.group_m)
        rank_order = {s: i for i, s in enumerate([1, 0, 3, 2])}
        arrival = sorted(base, key=lambda t: rank_order[shard_of_tile[t // tiles_n]])
        lookup = TileTables.from_lists(
            base, tiles_n, [[] for _ in base], [[] for _ in base], [1] * WORLD, list(range(WORLD))
        )
        waits = TileTables.from_lists(
            arrival,
            tiles_n,
            [[shard_of_tile[t // tiles_n]] for t in range(len(base))],
            [[] for _ in base],
            [1] * WORLD,
            list(range(WORLD)),
            rank=1,
        )
        constexprs = dict(
            B_IS_NK=False,
            BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k,
            GROUP_M=cfg.group_m,
            EPILOGUE_SPLIT=cfg.epilogue_split,
            WARP_SPECIALIZE=cfg.warp_specialize,
            FLATTEN=cfg.flatten,
            C_STORE_POINTERS=False,
            num_stages=cfg.num_stages,
            num_warps=cfg.num_warps,
        )
        return cfg, grid, tiles_n, shard, {"lookup only": lookup, "waits (AG, w4)": waits}, constexprs

    def launcher(kernel, a, b, out, m, k, n, grid, tiles_n, tables, arrays, signals, epoch, error, constexprs, bound):
        def call(s):
            kernel[(grid,)](
                a[s],
                b[s],
                out,
                m,
                n,
                k,
                k,
                n,
                n,
                grid,
                **constexprs,
                sy_signals=signals,
                sy_tiles_n=tiles_n,
                sy_epoch=epoch,
                sy_wait_bound_ns=bound,
                sy_rank=tables.rank,
                sy_error=error,
                **arrays,
            )

        return call

    def late_arrivals():
        # Late arrivals: the output must equal the untransformed kernel's bit for bit.
        driver = importlib.import_module("cuda.bindings.driver")
        m, k, n = (int(x) for x in args.late_shape.split("x"))
        cfg, grid, tiles_n, shard, tables, constexprs = setup(m, k, n)
        a_src = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        expected = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        gemm_mod.gemm(a_src, b, out=expected, config=cfg, host_descriptors=False)
        rng = random.Random(5)
        for v in names:
            if "no wait" in v:  # diagnostics without the wait read late chunks early by design
                continue
            a = torch.empty_like(a_src)
            out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
            signals = torch.zeros(WORLD, dtype=torch.int32, device=dev)
            epoch = torch.zeros(1, dtype=torch.int32, device=dev)
            tab = tables["waits (AG, w4)"]
            arrays = tab.device_arrays(dev)
            result = {"variant": v, "epochs": []}
            for call in (1, 2, 3):
                error = new_error_record(dev)
                a.fill_(float("nan"))
                out.fill_(float("nan"))
                epoch.fill_(call)
                torch.cuda.synchronize()
                side = torch.cuda.Stream()
                fn = launcher(
                    kernels[v],
                    [a],
                    [b],
                    out,
                    m,
                    k,
                    n,
                    grid,
                    tiles_n,
                    tab,
                    arrays,
                    signals,
                    epoch,
                    error,
                    constexprs,
                    2_000_000_000,
                )
                fn(0)
                slots = list(range(WORLD))
                rng.shuffle(slots)
                for slot in slots:
                    time.sleep(rng.uniform(0.0005, 0.003))
                    lo, hi = slot * shard, min(m, (slot + 1) * shard)
                    with torch.cuda.stream(side):
                        a[lo:hi].copy_(a_src[lo:hi], non_blocking=True)
                        addr = signals.data_ptr() + slot * 4
                        driver.cuStreamWriteValue32(
                            driver.CUstream(side.cuda_stream),
                            driver.CUdeviceptr(addr),
                            call,
                            driver.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT,
                        )
                torch.cuda.synchronize()
                flag = int(error[0].item())
                same = bool(torch.equal(out, expected))
                nan = int(torch.isnan(out).sum().item())
                result["epochs"].append({"epoch": call, "error_flag": flag, "bitwise_equal": same, "nan": nan})
            report["late"].append(result)
            out_path.write_text(json.dumps(report, indent=1))
            print(f"late arrivals {m}x{k}x{n} {v}: {result['epochs']}", flush=True)

    try:
        late_arrivals()
    except Exception as exc:  # noqa: BLE001 - reported, then the timing still runs
        report["late_error"] = f"{type(exc).__name__}: {exc}"
        print(f"late arrivals failed: {report['late_error']}", flush=True)

    for m, k, n in shapes:
        cfg, grid, tiles_n, _, tables, constexprs = setup(m, k, n)
        n_sets = timing.input_sets_for((m * k + k * n) * 2 + m * n * 2, dev)
        a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        b = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        signals = torch.full((WORLD,), 1, dtype=torch.int32, device=dev)
        epoch_one = torch.ones(1, dtype=torch.int32, device=dev)
        arrays = {t: tables[t].device_arrays(dev) for t in tables}
        fns, outs, errors = {}, {}, {}
        outs["untransformed"] = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
        # Device descriptors, as the transformed kernel (bench_wait_overhead's baseline): the
        # default host-descriptor kernel is another kernel (no descriptor prologue).
        fns["untransformed"] = lambda s: gemm_mod.gemm(
            a[s], b[s], out=outs["untransformed"], config=cfg, host_descriptors=False
        )
        for v in names:
            for t in tables:
                key = f"{v} | {t}"
                outs[key] = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
                errors[key] = new_error_record(dev)
                fns[key] = launcher(
                    kernels[v],
                    a,
                    b,
                    outs[key],
                    m,
                    k,
                    n,
                    grid,
                    tiles_n,
                    tables[t],
                    arrays[t],
                    signals,
                    epoch_one,
                    errors[key],
                    constexprs,
                    10_000_000_000,
                )
        outs["cuBLAS"] = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
        fns["cuBLAS"] = lambda s: torch.mm(a[s], b[s], out=outs["cuBLAS"])
        ref = a[0].float() @ b[0].float()
        errs = {}
        t0 = time.monotonic()
        for name, fn in fns.items():
            fn(0)
            torch.cuda.synchronize()
            errs[name] = timing.relative_error(outs[name], ref)
            if not errs[name] < 1e-2:
                raise SystemExit(f"{name} {m}x{k}x{n}: relative error {errs[name]}")
        for key in errors:
            check_error(errors[key], tables[key.split(" | ")[1]], "gemm_tma_kernel")
        compile_s = time.monotonic() - t0
        t = timing.time_variants(fns, n_sets, samples=args.samples)
        base_ms = t["untransformed"]["ms"]
        row = {
            "m": m,
            "k": k,
            "n": n,
            "config": cfg.name if hasattr(cfg, "name") else str(cfg),
            "first_calls_s": round(compile_s, 2),
            "ms": {v: t[v]["ms"] for v in fns},
            "spread": {v: t[v]["spread"] for v in fns},
            "rel_error": errs,
            "ratio_vs_untransformed": {v: t[v]["ms"] / base_ms for v in fns},
        }
        report["rows"].append(row)
        out_path.write_text(json.dumps(report, indent=1))
        print(f"{m}x{k}x{n} ({row['config']}) untransformed {base_ms:.4f} ms", flush=True)
        for v in fns:
            print(f"    {v:<36} {t[v]['ms']:.4f} ms  {t[v]['ms'] / base_ms:.3f}x", flush=True)

    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
