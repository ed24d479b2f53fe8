"""Ablation of the fused ops: tile order x split factor, and what waiting costs (issue #7).

    bench/run_bench.sh --ablation                 # or, with the compiled package on PYTHONPATH:
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --standalone --nproc-per-node 2 bench/bench_ablation.py

For AG+GEMM and GEMM+RS at two shapes with M >= 4096 (default 8192x8192x8192 and
32768x4096x4096), copy-engine backend, mode "fused", all timed in one run per shape:
  gemm, collective, sequential   cuBLAS alone, NCCL alone, NCCL + cuBLAS (op_variants.py)
  local_gemm                     Syncopate's TMA GEMM untransformed, the fused kernel's config,
                                 full grid (what the fused kernel would cost with no comm at all)
  <order>/s<split>               the fused op, tile order in {arrival, row-major, grouped},
                                 split in {1, 2, 4}
  no_waits/<order>               the fused kernel of <order>/s1, launched alone at epoch 0 on
                                 zeroed scratch signals: every wait passes at its first load, no
                                 chunk moves. fused / no_waits = the cost of waiting for chunks
                                 (and of sharing the GPU with the copies); no_waits / local_gemm
                                 = the cost of the inserted code and the smaller grid.
Checks, timing and agreement between ranks as in bench_ops.py (dist_timing.py). Rank 0 prints
a line per variant, rewrites the JSON after every shape, and ends with a table under --out
($OUT if set, else bench/results/).
"""

from __future__ import annotations

import os

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value
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

ORDERS = ("arrival", "row-major", "grouped")
SPLITS = (1, 2, 4, 8)  # 8: what the simulator picks for GEMM+RS at 8192^3
OPS = ("ag_gemm", "gemm_rs")
DEFAULT_SHAPES = "8192x8192x8192,32768x4096x4096"
BACKEND = "copy-engine"


def fused_names(orders=ORDERS, splits=SPLITS) -> dict[str, dict]:
    """{"arrival/s1": constructor kwargs, ...}."""
    return {f"{o}/s{s}": dict(backend=BACKEND, mode="fused", tile_order=o, split=s) for o in orders for s in splits}


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    out = []
    for item in (s for s in text.split(",") if s):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--shapes {item!r}: expected MxKxN with positive integers")
        out.append(tuple(int(p) for p in parts))
    return out


def no_waits_variant(ctx, a_in, b, out_shape):
    """The context's fused kernel alone at epoch 0 on zeroed scratch signals (every wait holds
    at once; its notifies land in the scratch), or a skip reason. Uses the context's launcher
    (ops/fused_gemm.py FusedGemm.launch(a, b, c, signals, epoch)), as its warm-up does."""
    gemm = getattr(ctx, "gemm", None)
    if gemm is None or not callable(getattr(gemm, "launch", None)):
        return f"context has no fused launcher (decision {getattr(ctx, 'decision', None)})"
    scratch = torch.zeros_like(ctx.signals)
    out = torch.empty(out_shape, dtype=a_in.dtype, device=a_in.device)
    return (lambda: gemm.launch(a_in, b, out, scratch, 0)), (lambda: out), True


def local_gemm_variant(ctx, a_in, b, out_shape, producer: bool):
    """syncopate.kernels.gemm with the fused kernel's config, untransformed, full grid."""
    try:
        from syncopate.kernels.gemm import gemm, select_config
    except Exception as error:
        return f"syncopate.kernels not importable: {type(error).__name__}: {error}"
    m, k = a_in.shape
    config = getattr(ctx, "config", None) or select_config(
        m, b.shape[1], k, a_in.device, a_in.dtype, allow_split_k=False
    )
    out = torch.empty(out_shape, dtype=a_in.dtype, device=a_in.device)
    return (lambda: gemm(a_in, b, out=out, config=config, c_store_pointers=producer), lambda: out, True)


def bench_shape(op, m, k, n, args, classes, missing, rank, world, say) -> dict:
    device = torch.device(dist_timing.DEVICE)
    group = dist.group.WORLD
    problem = shapes.Problem(op, world, m, k, n, "kn", "ablation")
    a, b, refs = dist_timing.make_inputs(problem, op, rank, world, torch.bfloat16, device)
    variants = dict(op_variants.BUILDERS[op](a, b, args.chunks))
    settings = fused_names()
    built = syncopate_variants.build(op, a, b, m, "kn", group, tuple(settings), classes, missing, extra_kwargs=settings)
    variants.update(built.variants)
    # The local GEMM's operands: the gathered A for AG (refs["collective"] is it), else a.
    a_in = refs["collective"] if op == "ag_gemm" else a
    producer = op != "ag_gemm"
    contexts = dict(zip([n for n in settings if not isinstance(built.variants[n], str)], built.contexts))
    first = next(iter(contexts.values()), None)
    variants["local_gemm"] = (
        local_gemm_variant(first, a_in, b, (m, n), producer) if first is not None else "no fused context was built"
    )
    for order in ORDERS:
        ctx = contexts.get(f"{order}/s1")
        variants[f"no_waits/{order}"] = (
            no_waits_variant(ctx, a_in, b, (m, n)) if ctx is not None else f"{order}/s1 was not built"
        )
    names = ["gemm", "collective", "sequential", "local_gemm", *settings, *(f"no_waits/{o}" for o in ORDERS)]
    result = {
        "op": op,
        "world": world,
        "m": m,
        "k": k,
        "n": n,
        "backend": BACKEND,
        "variants": {},
        "syncopate": built.info,
    }
    for name in names:
        ref = refs["gemm"] if name == "local_gemm" or name.startswith("no_waits/") else refs.get(name, refs["op"])
        result["variants"][name] = dist_timing.measure(
            name, variants[name], ref, op, args.samples, args.warmup, built.after.get(name)
        )
        say(f"  {op} {m}x{k}x{n} {name:18} {describe(result['variants'][name])}")
    result.update(derived(result))
    torch.cuda.synchronize()
    dist.barrier()  # no peer still touches a heap about to be freed
    built.close()
    del a, b, refs, variants, built, contexts, first
    gc.collect()
    torch.cuda.empty_cache()
    return result


def describe(v: dict) -> str:
    if "ms" in v:
        return f"{v['ms']:.4f} ms (err {v['rel_error']:.1e})"
    if "skipped" in v:
        return f"skipped: {v['skipped']}"
    return f"FAILED: {v.get('failed')}"


def derived(result: dict) -> dict:
    """Floor, each fused setting's ratio to the floor and to no_waits of its order, and the
    best setting."""
    v = {n: x["ms"] for n, x in result["variants"].items() if "ms" in x}
    out: dict = {}
    if "gemm" in v and "collective" in v:
        out["floor_ms"] = max(v["gemm"], v["collective"])
    fused = {n: v[n] for n in fused_names() if n in v}
    out["ratio_to_floor"] = {n: t / out["floor_ms"] for n, t in fused.items()} if "floor_ms" in out else {}
    out["wait_cost"] = {
        n: t / v[f"no_waits/{n.split('/')[0]}"] for n, t in fused.items() if f"no_waits/{n.split('/')[0]}" in v
    }
    if "local_gemm" in v:
        out["no_waits_over_local_gemm"] = {
            o: v[f"no_waits/{o}"] / v["local_gemm"] for o in ORDERS if f"no_waits/{o}" in v
        }
    if fused:
        best = min(fused, key=fused.get)
        out["best"] = {"setting": best, "ms": fused[best]}
    return out


def print_table(results: list[dict]) -> None:
    for r in results:
        v = {n: x["ms"] for n, x in r["variants"].items() if "ms" in x}
        print(
            f"\n{r['op']} {r['m']}x{r['k']}x{r['n']} world {r['world']} {r['backend']}: "
            f"gemm {v.get('gemm', math.nan):.3f} collective {v.get('collective', math.nan):.3f} "
            f"sequential {v.get('sequential', math.nan):.3f} local_gemm "
            f"{v.get('local_gemm', math.nan):.3f} ms"
        )
        print(
            f"  {'order':10} "
            + " ".join(f"{'s' + str(s) + ' ms':>9} {'/floor':>7}" for s in SPLITS)
            + f" {'no_waits':>9} {'s1/no_waits':>11}"
        )
        for o in ORDERS:
            cells = []
            for s in SPLITS:
                t = v.get(f"{o}/s{s}")
                ratio = r.get("ratio_to_floor", {}).get(f"{o}/s{s}")
                cells.append(
                    f"{t:>9.4f} {ratio:>7.3f}" if t is not None and ratio is not None else f"{'-':>9} {'-':>7}"
                )
            nw = v.get(f"no_waits/{o}")
            wc = r.get("wait_cost", {}).get(f"{o}/s1")
            print(
                f"  {o:10} "
                + " ".join(cells)
                + (f" {nw:>9.4f}" if nw else f" {'-':>9}")
                + (f" {wc:>11.3f}" if wc else f" {'-':>11}")
            )
        if "best" in r:
            print(f"  best: {r['best']['setting']} {r['best']['ms']:.4f} ms")
    failures = [
        (r["op"], f"{r['m']}x{r['k']}x{r['n']}", n, x["failed"])
        for r in results
        for n, x in r["variants"].items()
        if "failed" in x
    ]
    print(f"correctness failures: {len(failures) if failures else 'none'}")
    for failure in failures:
        print("  FAILED", *failure)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxKxN of the whole op, comma-separated")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=4, help="pieces per shard, two_stream")
    parser.add_argument("--nccl-timeout-s", type=float, default=240)
    parser.add_argument("--world", type=int, default=None, help="for --dry-run (default 2)")
    parser.add_argument("--dry-run", action="store_true", help="list what would run; no GPU")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    if [o for o in ops if o not in OPS]:
        parser.error(f"--ops: choose from {', '.join(OPS)}")
    try:
        shape_list = parse_shapes(args.shapes)
    except ValueError as error:
        parser.error(str(error))
    if args.samples < 1 or args.warmup < 0:
        parser.error("--samples must be >= 1, --warmup >= 0")
    if args.dry_run:
        world = args.world or int(os.environ.get("WORLD_SIZE", "2"))
        names = ["gemm", "collective", "sequential", "local_gemm", *fused_names(), *(f"no_waits/{o}" for o in ORDERS)]
        for op in ops:
            for m, k, n in shape_list:
                bad = m % world or k % world
                print(
                    f"{op} {m}x{k}x{n} world {world}: "
                    + ("M and K must divide by the world size" if bad else ", ".join(names))
                )
        print(
            f"{len(ops) * len(shape_list)} shapes x {len(names)} variants "
            f"({len(fused_names())} fused contexts each), {args.samples} samples"
        )
        return 0
    if not torch.cuda.is_available():
        print("bench_ablation: no CUDA device (use --dry-run here)", file=sys.stderr)
        return 2
    started = time.monotonic()
    rank, world, local_rank = dist_timing.init(args.nccl_timeout_s)
    classes, missing = syncopate_variants.load_classes()
    props = torch.cuda.get_device_properties(local_rank)
    now = datetime.datetime.now(datetime.timezone.utc)
    kind = dist_timing.device_kind(props, world)
    out_dir = Path(args.out)
    path = out_dir / f"bench_ablation_{kind}_{now:%Y-%m-%d_%H%M}.json"

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    say(f"world {world} x {props.name}; torch {torch.__version__}; syncopate: {missing or 'imported'}")
    report = {
        "benchmark": "bench_ablation",
        "device": props.name,
        "device_kind": kind,
        "world": world,
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "backend": BACKEND,
        "samples": args.samples,
        "syncopate_ops": missing or "imported",
        "complete": False,
        "results": [],
    }
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
    for op in ops:
        for m, k, n in shape_list:
            if m % world or k % world:
                say(f"skip {op} {m}x{k}x{n}: M and K must divide by {world}")
                continue
            report["results"].append(bench_shape(op, m, k, n, args, classes, missing, rank, world, say))
            if rank == 0:
                dist_timing.write_json(path, report)
    if rank == 0:
        report["complete"] = True
        report["seconds"] = time.monotonic() - started
        dist_timing.write_json(path, report)
        print(f"wrote {path}")
        print_table(report["results"])
        print(f"total {report['seconds']:.0f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
