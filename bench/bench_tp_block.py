#!/usr/bin/env python3
"""Step benchmark of a tensor-parallel LLaMA block: forward and forward + backward per variant.

    torchrun --nproc-per-node W bench/bench_tp_block.py [--size llama3-8b] [--seq 8192] [--compile]
    python3 bench/bench_tp_block.py --list          # the variants and sizes, no GPU

The block is examples/tp_llama_block.py's (RMSNorm, attention with QKV / O projections, SwiGLU
MLP; sequence parallelism: QKV and gate/up column-parallel, O and down row-parallel), at the
layer widths of LLaMA-3 8B or 70B. Variants, in one run on the same weights and inputs:

  torch_tp          NCCL collectives + cuBLAS GEMMs (Megatron-style; bench/tp_baselines.py)
  async_tp          PyTorch's async-TP ops (torch.ops.symm_mem fused all-gather+matmul and
                    matmul+reduce-scatter) in eager mode, forward and backward
  syncopate         syncopate.nn.ColumnParallelLinear / RowParallelLinear (the fused ops, each
                    context choosing fused or sequential by the simulator)
  with --compile:   torch_tp_compile, syncopate_compile (torch.compile(fullgraph=True), Inductor)
                    and async_tp_compile (torch_tp compiled with Inductor's micro-pipeline TP
                    pass, torch._inductor.config._micro_pipeline_tp, which fuses the functional
                    collectives with their GEMMs)

Method (bench/README.md): every variant is first checked (loss, output, input and weight
gradients against the float32 reference block with the whole weights, examples/tp_llama_block.py);
a variant that fails is reported and not timed. Then eager steps: warm-up, then samples each
after a GPU-side barrier (a one-element all-reduce), timed with CUDA events per rank; the median
per rank, then the max over ranks. "fwd" is a forward under torch.no_grad(); "fwd_bwd" a forward
and backward from zeroed gradients (no optimizer). Tokens per second: S x B / time (the tokens
the tensor-parallel group processes per step). With more ranks than GPUs (ranks sharing GPUs,
gloo) only the checks run. JSON and a log go to --out ($OUT if set, else bench/results/):
tp_block_<device kind>_<date>.json / .log.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # multicast stays off on the lent machines
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

import tp_llama_block as blk  # noqa: E402

VARIANTS = ("torch_tp", "async_tp", "syncopate")
COMPILED = ("torch_tp_compile", "async_tp_compile", "syncopate_compile")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(blk.SIZES), default="llama3-8b")
    p.add_argument("--seq", type=int, default=8192, help="sequence length S (tokens per step with --batch 1)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--compile", action="store_true", help="add the torch.compile variants")
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-check", action="store_true", help="time without the reference check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="print sizes and variants, then exit")
    p.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    args = p.parse_args(argv)
    names = tuple(v for v in args.variants.split(",") if v)
    unknown = [v for v in names if v not in VARIANTS + COMPILED]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS + COMPILED)}")
    if args.compile:
        names = names + tuple(f"{v}_compile" for v in names if f"{v}_compile" not in names and v in VARIANTS)
    args.variant_names = names
    return args


def init():
    """(rank, world, device, timed): torchrun's ranks (a world-1 group without torchrun); NCCL
    with one GPU per rank, else gloo and checks only."""
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=os.environ.get("MASTER_PORT", "29517"),
        )
    world = int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % gpus)
    torch.cuda.set_device(device)
    shared = world > gpus
    if shared:
        dist.init_process_group("gloo")
    else:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = True  # as bench_ops: collectives ahead of compute
        dist.init_process_group("nccl", pg_options=options, device_id=device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference stays float32
    return dist.get_rank(), world, device, not shared


def linears(name: str):
    """(column, row) classes of a variant, or a reason it cannot run."""
    import tp_baselines

    base = name.removesuffix("_compile")
    if base == "syncopate":
        import syncopate.nn as snn

        return snn.ColumnParallelLinear, snn.RowParallelLinear
    if base == "torch_tp":
        return tp_baselines.TorchColumn, tp_baselines.TorchRow
    # async-TP, eager or through Inductor's pass: both run on symmetric memory.
    why = tp_baselines.enable_symmetric_memory(dist.group.WORLD.group_name)
    if why is not None:
        return f"async-TP unavailable: {why}"
    if name == "async_tp_compile":
        return tp_baselines.TorchColumn, tp_baselines.TorchRow
    return tp_baselines.AsyncTPColumn, tp_baselines.AsyncTPRow


def make_runner(name, cfg, args, full, x_full, target, rank, world, device):
    made = linears(name)
    if isinstance(made, str):
        return made
    column, row = made
    block = blk.TPBlock(
        cfg, column=column, row=row, world=world, group=None, dtype=getattr(torch, args.dtype), device=device
    )
    blk.load_shards(block, full, rank, world)
    runner = blk.Runner(block, x_full, target, rank, world)
    if name.endswith("_compile"):
        import torch._inductor.config as inductor_config

        inductor_config._micro_pipeline_tp = name == "async_tp_compile"
        torch._dynamo.reset()
        runner.forward = torch.compile(block, fullgraph=True)
    return runner


def agreed(ok: bool) -> bool:
    """True when every rank says ok (a variant failing on one rank is skipped on all)."""
    flag = torch.tensor([0 if ok else 1], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() == 0


def max_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_ms(fn, samples: int, warmup: int) -> float:
    """Median ms of fn on this rank, each sample after a GPU-side barrier; max over ranks."""
    token = torch.zeros(1, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    values = []
    for _ in range(samples):
        dist.all_reduce(token)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        values.append(start.elapsed_time(end))
    return max_over_ranks(statistics.median(values))


def bench_variant(name, cfg, args, full, x_full, target, ref, rank, world, device, timed) -> dict:
    try:
        runner = make_runner(name, cfg, args, full, x_full, target, rank, world, device)
        failure = runner if isinstance(runner, str) else None
    except Exception as error:
        runner, failure = None, f"{type(error).__name__}: {str(error)[:400]}"
    if not agreed(failure is None):
        return {"skipped": failure or "failed on a peer"}
    result = {}
    try:
        loss, out = runner.step()
        if ref is not None:
            errors = blk.max_over_ranks(runner.compare(loss, out, ref), world, None, device)
            worst = max(errors.values())
            tol = blk.TOLERANCE[getattr(torch, args.dtype)]
            result["check"] = {"errors": errors, "worst": worst, "tolerance": tol, "passed": worst <= tol}
            failure = None if worst <= tol else f"relative error {worst:.3g} > {tol}"
    except Exception as error:
        failure = f"{type(error).__name__}: {str(error)[:400]}"
    if not agreed(failure is None):
        result["failed"] = failure or "failed on a peer"
        return result
    if not timed:
        result["timing"] = "not timed: ranks share GPUs (checks only)"
        return result
    tokens = args.seq * args.batch
    try:
        with torch.no_grad():
            fwd = time_ms(lambda: runner.forward(runner.x), args.samples, args.warmup)
        fwd_bwd = time_ms(runner.step, args.samples, args.warmup)
    except Exception as error:
        result["failed"] = f"while timing: {type(error).__name__}: {str(error)[:400]}"
        return result
    result.update(
        fwd_ms=fwd,
        fwd_bwd_ms=fwd_bwd,
        fwd_tokens_per_s=tokens / (fwd / 1e3),
        fwd_bwd_tokens_per_s=tokens / (fwd_bwd / 1e3),
    )
    if name.startswith("syncopate"):
        result["contexts"] = [
            dict(zip(("context", "m", "k", "n", "decision", "backend"), c)) for c in blk.context_decisions()
        ]
    return result


def line(name: str, r: dict) -> str:
    if "skipped" in r:
        return f"{name:18} skipped: {r['skipped']}"
    check = r.get("check")
    checked = f"worst rel. error {check['worst']:.1e}" if check else "not checked"
    if "failed" in r:
        return f"{name:18} FAILED: {r['failed']} ({checked})"
    if "fwd_ms" not in r:
        return f"{name:18} {checked}; {r.get('timing', '')}"
    return (
        f"{name:18} fwd {r['fwd_ms']:8.3f} ms ({r['fwd_tokens_per_s']:10.0f} tok/s)   fwd+bwd "
        f"{r['fwd_bwd_ms']:8.3f} ms ({r['fwd_bwd_tokens_per_s']:10.0f} tok/s)   {checked}"
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for size, cfg in blk.SIZES.items():
            print(f"{size:11} {cfg}")
        print("variants:", ", ".join(VARIANTS + COMPILED))
        return 0
    if not torch.cuda.is_available():
        print("bench_tp_block: no CUDA device (use --list here)", file=sys.stderr)
        return 2
    started = time.monotonic()
    rank, world, device, timed = init()
    cfg = blk.SIZES[args.size]
    blk.check_divisible(cfg, world, args.seq)
    dtype = getattr(torch, args.dtype)
    props = torch.cuda.get_device_properties(device)
    now = datetime.datetime.now(datetime.timezone.utc)
    kind = f"{props.name.lower().replace('nvidia ', 'nvidia-').replace(' ', '-')}-x{world}"
    out_dir = Path(args.out)
    stem = out_dir / f"tp_block_{kind}_{args.size}_{now:%Y-%m-%d_%H%M}"
    log_lines = []

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)
            log_lines.append(text)

    full = {n: t.to(dtype) for n, t in blk.full_weights(cfg, args.seed, device).items()}
    x_full, target = blk.inputs(cfg, args.seq, args.batch, args.seed, dtype, device)
    ref = None if args.no_check else blk.reference_step(cfg, full, x_full, target)
    if ref is not None:  # keep the reference's results, not its graph's memory
        torch.cuda.empty_cache()
    report = {
        "benchmark": "bench_tp_block",
        "device": props.name,
        "device_kind": kind,
        "world": world,
        "backend": dist.get_backend(),
        "date": now.isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "size": args.size,
        "config": dataclasses.asdict(cfg),
        "seq": args.seq,
        "batch": args.batch,
        "dtype": args.dtype,
        "tokens": args.seq * args.batch,
        "samples": args.samples,
        "warmup": args.warmup,
        "timed": timed,
        "env": {
            n: os.environ.get(n)
            for n in (
                "NCCL_NVLS_ENABLE",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NVSHMEM_DISABLE_NVLS",
                "SYNCOPATE_BACKEND",
                "SYNCOPATE_CALIBRATION",
                "CUDA_DEVICE_MAX_CONNECTIONS",
            )
        },
        "method": "check vs the float32 reference block first; eager steps, warm-up, then samples "
        "each after a one-element all-reduce, CUDA events per rank, median per rank, max "
        "over ranks; fwd under no_grad, fwd_bwd from zeroed gradients",
        "variants": {},
    }
    say(
        f"tp block {args.size} {cfg}: S={args.seq} B={args.batch} {args.dtype}, world {world} x {props.name} "
        f"({dist.get_backend()}{'' if timed else ', ranks share GPUs: checks only'}); torch {torch.__version__}"
    )
    for name in args.variant_names:
        result = bench_variant(name, cfg, args, full, x_full, target, ref, rank, world, device, timed)
        report["variants"][name] = result
        say(line(name, result))
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    report["seconds"] = time.monotonic() - started
    if rank == 0:
        import json

        out_dir.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
        say(f"wrote {stem.with_suffix('.json')} and .log ({report['seconds']:.0f} s)")
        stem.with_suffix(".log").write_text("\n".join(log_lines) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    failed = any("failed" in r for r in report["variants"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
