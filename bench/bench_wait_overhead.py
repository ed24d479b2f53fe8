"""What the fused kernel's extra work costs when no communication is in the way (one GPU).

The transformed local GEMM (kernels/gemm.py:gemm_tma_kernel after `syncopate transform`) reads
its tile order from memory and, per tile, waits on signal slots and may notify. Here every
slot is raised before the launch, so nothing ever waits: the difference to the untransformed
kernel is the price of the transformation itself (table loads, acquire loads of the slots,
the tile-order lookup), i.e. what a fused op pays even when every chunk has already landed.
  untransformed   gemm_tma_kernel (descriptors made in the kernel, as the fused ones), the model's config
  lookup only     transformed kernel, grouped tile order, empty wait lists
  waits (AG, w4)  transformed kernel, rank-1 arrival-like order (its shard first), each tile
                  waiting on the slot of its row shard, as AG+GEMM at world 4 would
  cuBLAS          torch.mm, for reference
All in one run (CUDA graphs, interleaved, median), random inputs, poisoned outputs, errors vs
an fp32 reference. Usage: python bench/bench_wait_overhead.py --kernel-file GEN.py
(GEN.py = `syncopate transform python/syncopate/kernels/gemm.py --kernel gemm_tma_kernel`).
--fp8: the same rows for the FP8 kernel (GEN.py = `syncopate transform
python/syncopate/kernels/gemm_fp8.py --kernel gemm_fp8_tma_kernel`), e4m3 operands with row-wise
scales, bf16 C, B stored [N, K] (the K-major layout FP8 MMAs read), `torch._scaled_mm` as the
library reference.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import timing  # noqa: E402

SHAPES = [
    (8192, 8192, 8192),
    (16384, 8192, 4096),
    (4096, 8192, 28672),
    (32768, 4096, 4096),
    (2048, 8192, 3584),
    (1024, 8192, 8192),
]
WORLD = 4


def load_modules(kernel_file: Path):
    """syncopate.kernels.gemm and the transformed module, without the compiled bindings."""
    try:
        import syncopate  # noqa: F401
    except ImportError:
        package = types.ModuleType("syncopate")
        package.__path__ = [str(REPO / "python" / "syncopate")]
        sys.modules["syncopate"] = package
    import importlib

    gemm_mod = importlib.import_module("syncopate.kernels.gemm")  # the module, not the re-exported function
    spec = importlib.util.spec_from_file_location("syncopate.kernels._gemm_overlapped", kernel_file)
    fused = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fused
    spec.loader.exec_module(fused)
    return gemm_mod, fused


def grouped_order(tiles_m: int, tiles_n: int, group_m: int) -> list[int]:
    order = []
    for first in range(0, tiles_m, group_m):
        rows = range(first, min(first + group_m, tiles_m))
        for tn in range(tiles_n):
            order += [tm * tiles_n + tn for tm in rows]
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel-file", type=Path, required=True)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results"))
    parser.add_argument("--fp8", action="store_true", help="the FP8 kernel (kernel file: its transform)")
    parser.add_argument("--samples", type=int, default=25, help="timed replays per variant (the median is kept)")
    args = parser.parse_args()
    gemm_mod, fused = load_modules(args.kernel_file)
    from syncopate.launch import TileTables, new_error_record, check_error

    fp8 = None
    if args.fp8:
        import importlib

        fp8 = importlib.import_module("syncopate.kernels.gemm_fp8")
    kernel = fused.gemm_fp8_tma_kernel if fp8 else fused.gemm_tma_kernel
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    gemm_mod.ensure_descriptor_allocator()
    rows = []
    for m, k, n in SHAPES:
        cfg = (
            fp8.select_fp8_config(m, n, k, dev)
            if fp8
            else gemm_mod.select_config(m, n, k, dev, torch.bfloat16, allow_split_k=False)
        )
        tiles_m, tiles_n = triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.block_n)
        grid = max(1, min(sms, tiles_m * tiles_n))
        elem = 1 if fp8 else 2
        n_sets = timing.input_sets_for((m * k + k * n) * elem + m * n * 2, dev)
        if fp8:
            a = [(torch.randn(m, k, device=dev) * 2).to(torch.float8_e4m3fn) for _ in range(n_sets)]
            # B as a Linear weight [N, K] viewed [K, N]: the K-major layout Hopper's FP8 MMA reads
            # (and _scaled_mm's). A [K, N] B would time Triton's in-kernel transpose (5-13x).
            b = [(torch.randn(n, k, device=dev) * 2).to(torch.float8_e4m3fn).t() for _ in range(n_sets)]
            sa = torch.rand(m, 1, device=dev) + 0.25
            sb = torch.rand(1, n, device=dev) + 0.25
        else:
            a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
            b = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
        outs = {
            v: torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)
            for v in ("untransformed", "lookup only", "waits (AG, w4)", "cuBLAS")
        }
        shard = -(-m // WORLD)  # rows per shard (even split is enough for this measurement)
        shard_of_tile = [min((tm * cfg.block_m) // shard, WORLD - 1) for tm in range(tiles_m)]
        base = grouped_order(tiles_m, tiles_n, cfg.group_m)
        # rank 1: its own shard's tiles first, then shards 0, 3, 2 (ring arrival order)
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
        signals = torch.full((WORLD,), 1, dtype=torch.int32, device=dev)  # epoch 1: all landed
        epoch_one = torch.ones(1, dtype=torch.int32, device=dev)  # the device epoch word at call 1
        errors = {name: new_error_record(dev) for name in ("lookup only", "waits (AG, w4)")}
        arrays = {"lookup only": lookup.device_arrays(dev), "waits (AG, w4)": waits.device_arrays(dev)}
        tables = {"lookup only": lookup, "waits (AG, w4)": waits}
        constexprs = dict(
            B_IS_NK=bool(fp8),
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

        # FP8: the scale pointers follow C, their strides (1: per row / column) stride_cm.
        operands = (sa, sb) if fp8 else ()
        strides = (1, 1) if fp8 else ()

        def fused_call(name):
            def call(s):
                out = outs[name]
                kernel[(grid,)](
                    a[s],
                    b[s].t() if fp8 else b[s],
                    out,
                    *operands,
                    m,
                    n,
                    k,
                    k,
                    k if fp8 else n,
                    n,
                    *strides,
                    grid,
                    **constexprs,
                    sy_signals=signals,
                    sy_tiles_n=tiles_n,
                    sy_epoch=epoch_one,
                    sy_wait_bound_ns=10_000_000_000,
                    sy_rank=tables[name].rank,
                    sy_error=errors[name],
                    **arrays[name],
                )

            return call

        if fp8:
            fns = {
                "untransformed": lambda s: fp8.gemm_fp8(a[s], b[s], sa, sb, out=outs["untransformed"], config=cfg),
                "lookup only": fused_call("lookup only"),
                "waits (AG, w4)": fused_call("waits (AG, w4)"),
                "cuBLAS": lambda s: torch._scaled_mm(a[s], b[s], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
            }
            ref = (a[0].float() @ b[0].float()) * sa * sb
        else:
            fns = {
                "untransformed": lambda s: gemm_mod.gemm(
                    a[s], b[s], out=outs["untransformed"], config=cfg, host_descriptors=False
                ),
                "lookup only": fused_call("lookup only"),
                "waits (AG, w4)": fused_call("waits (AG, w4)"),
                "cuBLAS": lambda s: torch.mm(a[s], b[s], out=outs["cuBLAS"]),
            }
            ref = a[0].float() @ b[0].float()
        errs = {}
        for name, fn in fns.items():
            result = fn(0)
            torch.cuda.synchronize()
            errs[name] = timing.relative_error(result if name == "cuBLAS" and fp8 else outs[name], ref)
            if not errs[name] < 1e-2:
                raise SystemExit(f"{name} {m}x{k}x{n}: relative error {errs[name]}")
        for name in errors:
            check_error(errors[name], tables[name], "gemm_fp8_tma_kernel" if fp8 else "gemm_tma_kernel")
        t = timing.time_variants(fns, n_sets, samples=args.samples)
        base_ms = t["untransformed"]["ms"]
        row = {
            "m": m,
            "k": k,
            "n": n,
            "config": f"{cfg.block_m}x{cfg.block_n}",
            "ms": {v: t[v]["ms"] for v in fns},
            "spread": {v: t[v]["spread"] for v in fns},
            "rel_error": errs,
            "ratio_vs_untransformed": {v: t[v]["ms"] / base_ms for v in fns},
        }
        rows.append(row)
        print(
            f"{m:>6}x{k:>5}x{n:>6} " + "  ".join(f"{v} {t[v]['ms']:.4f} ms ({t[v]['ms'] / base_ms:.3f}x)" for v in fns),
            flush=True,
        )
    kind = "nvidia-h200" if "H200" in props.name else ("nvidia-h100-x1" if "H100" in props.name else props.name)
    now = datetime.datetime.now(datetime.timezone.utc)
    path = Path(args.out) / f"bench_wait_overhead_{kind}_{now:%Y-%m-%d_%H%M}{'_fp8' if fp8 else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "benchmark": "bench_wait_overhead",
                "device": props.name,
                "device_kind": kind,
                "date": now.isoformat(),
                "torch": torch.__version__,
                "triton": triton.__version__,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
