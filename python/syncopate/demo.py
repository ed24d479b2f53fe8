"""The GPU half of `syncopate demo`: a fused AG+GEMM across the visible GPUs, next to sequential.

    python -m syncopate.demo [--m 8192 --k 8192 --n 8192] [--dtype bf16] [--world W]
    python -m syncopate.demo --dry-run      # what it would run, and the simulator's prediction

Starts one process per GPU itself (torch.multiprocessing spawn, a file store in a temporary
directory: no torchrun needed). Every rank holds A's shard [M/W, K] and B [K, N] and computes
C = all_gather(A) @ B twice: with Syncopate's fused op (`AgGemm`: the gather overlapped with the
GEMM inside one kernel) and sequentially (NCCL all-gather, then torch.mm). Both outputs are
checked against an fp32 reference (outputs poisoned with NaN first; relative error
||C - ref|| / ||ref||), then both are timed with CUDA events (warm-up, then the median per rank;
the table shows the slowest rank, since a call ends when every rank is done). The simulator's
prediction for the same shape follows.

Exit status: 0 when both results are within tolerance on every rank (times are reported, never
judged), 1 when a result is wrong or a rank failed, 2 for bad arguments. No GPU: one line, exit 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time
import sys
import tempfile
from pathlib import Path
from typing import Optional

from syncopate.settings import env

# NVLink multicast stays off in every process this starts (it can put a host's shared GPUs out
# of service); set before torch or NCCL initialise.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

DTYPES = ("bf16", "fp16")
# fp32 reference vs bf16/fp16 operands with fp32 accumulation: the bounds tests/gpu uses.
TOLERANCE = {"bf16": 2.5e-2, "fp16": 4e-3}
PLAN_DTYPE = {"bf16": "bf16", "fp16": "f16"}
SEED = 20261122


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m syncopate.demo",
        description="Fused AG+GEMM across the visible GPUs next to sequential "
        "NCCL all-gather + torch.mm: correctness, time, prediction.",
    )
    p.add_argument("--m", type=int, default=8192, help="rows of the gathered A (a multiple of the world size)")
    p.add_argument("--k", type=int, default=8192, help="inner dimension")
    p.add_argument("--n", type=int, default=8192, help="columns of B")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--world", type=int, default=0, help="ranks, one GPU each (default: every visible GPU)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    p.add_argument("--iters", type=int, default=20, help="timed calls per variant")
    p.add_argument("--backend", default=None, help="chunk backend of the fused op (default: the op's own default)")
    p.add_argument("--calib", default=None, help="simulator calibration JSON (default: the shipped h200)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds before every rank is stopped and the demo fails (default 300)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the configuration and the simulator's prediction; use no GPU"
    )
    args = p.parse_args(argv)
    for name in ("m", "k", "n", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.timeout <= 0:
        p.error(f"--timeout must be positive, got {args.timeout}")
    if args.warmup < 0:
        p.error(f"--warmup must be at least 0, got {args.warmup}")
    if args.world < 0:
        p.error(f"--world must be positive (0: every visible GPU), got {args.world}")
    return args


def check_world(args: argparse.Namespace, gpus: int) -> Optional[str]:
    """The reason the shape or world size cannot run on `gpus` GPUs, or None."""
    world = args.world or gpus
    if args.world > gpus:
        return f"--world {args.world}: only {gpus} GPU(s) visible (one rank per GPU)"
    if args.m % world != 0:
        return f"--m {args.m}: A's rows must split evenly over {world} rank(s) (m % world == 0)"
    return None


# --- the simulator's prediction (CPU only) ---------------------------------------------------


def find_calibration(explicit: Optional[str]) -> Optional[Path]:
    """The calibration file: --calib, $SYNCOPATE_CALIBRATION (the variable the ops read,
    ops/choice.py; when it names a file), the package's
    calib/h200.json, or calib/h200.json in the working directory or above it (a source checkout)."""
    if explicit:
        return Path(explicit)
    candidates = [Path(env.calibration)] if env.calibration else []
    candidates.append(Path(__file__).resolve().parent / "calib" / "h200.json")
    here = Path.cwd().resolve()
    candidates += [d / "calib" / "h200.json" for d in (here, *here.parents)]
    return next((c for c in candidates if c.is_file()), None)


def predict(
    m: int,
    k: int,
    n: int,
    world: int,
    dtype: str,
    calib_path: Optional[Path],
    *,
    algorithm: str = "direct",
    split: int = 1,
    backend: str = "copy-engine",
    block_m: int = 128,
    block_n: int = 128,
) -> dict:
    """Simulated times (us) of this AG+GEMM: {device, sequential, fused, floor, gemm, comm}, or
    {error: why not}."""
    if calib_path is None:
        return {"error": "no calibration found (pass --calib FILE)"}
    import syncopate as sy

    try:
        calib = sy.load_calibration(str(calib_path))
        plan = sy.make_plan(
            "all-gather",
            world_size=world,
            shape=[m, k],
            algorithm=algorithm,
            split=split,
            dtype=PLAN_DTYPE[dtype],
            dim=0,
            backend=backend,
            tensor="a",
        )
        pred = sy.simulate(plan, sy.GemmShape(m, n, k, block_m, block_n), calib)
    except sy.Error as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "device": calib.device,
        "calibration": str(calib_path),
        "sequential": pred.sequential_us,
        "fused": pred.fused_us,
        "floor": pred.floor_us,
        "gemm": pred.gemm_alone_us,
        "comm": pred.comm_alone_us,
    }


# --- one rank ---------------------------------------------------------------------------------


def _time_us(fn, warmup: int, iters: int) -> list:
    """Per-call times (us) of fn() on the current stream, measured with CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1000.0 for start, end in events]


def block_shape(gemm_config) -> list:
    """[block_m, block_n] of the op's GEMM config (a GemmConfig or its name "128x256x64_..."),
    128x128 (the pointer GEMM's tile) when the op does not say."""
    if gemm_config is None:
        return [128, 128]
    if hasattr(gemm_config, "block_m"):
        return [int(gemm_config.block_m), int(gemm_config.block_n)]
    match = re.match(r"(\d+)x(\d+)x", str(gemm_config))
    return [int(match.group(1)), int(match.group(2))] if match else [128, 128]


def _rel_error(out, ref) -> float:
    import torch

    if not torch.isfinite(out).all():
        return float("inf")
    return (torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref)).item()


def run_rank(rank: int, world: int, args: argparse.Namespace, store_dir: str) -> None:
    """One process per GPU: builds the op, checks both variants, times them; rank 0 writes
    result.json into store_dir."""
    import torch
    import torch.distributed as dist

    from syncopate.ops.ag_gemm import AgGemm

    torch.cuda.set_device(rank)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is plain fp32
    device = torch.device("cuda", rank)
    dist.init_process_group(
        "nccl", init_method=f"file://{store_dir}/store", rank=rank, world_size=world, device_id=device
    )
    try:
        group = dist.group.WORLD
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
        m, k, n = args.m, args.k, args.n
        rows = m // world

        def shard(r):  # shard r of A, the same on every rank (seeded per shard)
            gen = torch.Generator(device=device).manual_seed(SEED + r)
            return torch.randn(rows, k, generator=gen, device=device).to(dtype)

        a_shard = shard(rank)
        gen = torch.Generator(device=device).manual_seed(SEED - 1)
        b = (torch.randn(k, n, generator=gen, device=device) / k**0.5).to(dtype)
        # The reference never uses communication: every rank regenerates every shard.
        a_full_ref = torch.cat([shard(r) for r in range(world)]).float()
        ref = a_full_ref @ b.float()
        del a_full_ref

        kwargs = {} if args.backend is None else {"backend": args.backend}
        op = AgGemm(group, m=m, k=k, n=n, dtype=dtype, device=device, **kwargs)
        c_fused = torch.full((m, n), float("nan"), dtype=dtype, device=device)
        op(a_shard, b, out=c_fused)  # checks (synchronises) by default: a timed-out wait raises here
        err_fused = _rel_error(c_fused, ref)

        a_gathered = torch.empty((m, k), dtype=dtype, device=device)
        c_seq = torch.full((m, n), float("nan"), dtype=dtype, device=device)

        def sequential():
            dist.all_gather_into_tensor(a_gathered, a_shard, group=group)
            torch.mm(a_gathered, b, out=c_seq)

        sequential()
        torch.cuda.synchronize()
        err_seq = _rel_error(c_seq, ref)
        del ref

        dist.barrier(device_ids=[rank])
        t_seq = _time_us(sequential, args.warmup, args.iters)
        dist.barrier(device_ids=[rank])
        t_fused = _time_us(lambda: op(a_shard, b, out=c_fused, check=False), args.warmup, args.iters)
        op.check()  # any wait that timed out while timing raises now

        mine = {
            "rank": rank,
            "err_fused": err_fused,
            "err_seq": err_seq,
            "us_fused": statistics.median(t_fused),
            "us_seq": statistics.median(t_seq),
        }
        everyone = [None] * world
        dist.all_gather_object(everyone, mine, group=group)
        if rank == 0:
            info = {
                "device": torch.cuda.get_device_name(device),
                "world": world,
                "kernel_origin": getattr(op, "kernel_origin", "?"),
            }
            for attr in ("decision", "backend", "algorithm", "split", "predicted_us"):
                if hasattr(op, attr):
                    info[attr] = getattr(op, attr)
            info.setdefault("backend", args.backend or "copy-engine")
            info["block"] = block_shape(getattr(op, "gemm_config", None))
            (Path(store_dir) / "result.json").write_text(json.dumps({"ranks": everyone, "op": info}, default=str))
        dist.barrier(device_ids=[rank])
    finally:
        dist.destroy_process_group()


# --- the report -------------------------------------------------------------------------------


def _worst(errors: list) -> float:
    """The largest error, a NaN counting as the largest."""
    return max(errors, key=lambda e: math.inf if math.isnan(e) else e)


def report(result: dict, args: argparse.Namespace, prediction: dict) -> int:
    """Prints the table; returns the exit status (0: every result within tolerance)."""
    ranks, op = result["ranks"], result["op"]
    tol = TOLERANCE[args.dtype]
    world = op["world"]
    us_seq = max(r["us_seq"] for r in ranks)
    us_fused = max(r["us_fused"] for r in ranks)
    err_seq = _worst([r["err_seq"] for r in ranks])
    err_fused = _worst([r["err_fused"] for r in ranks])
    how = ", ".join(f"{key} {op[key]}" for key in ("decision", "backend", "algorithm", "split") if key in op)
    print(f"    fused op: {how or 'defaults'}; GEMM kernel from: {op['kernel_origin']}")
    print(f"    {'variant':<36}{'median':>12}{'speed-up':>11}{'rel. error':>13}")
    print(f"    {'sequential (NCCL all-gather, mm)':<36}{us_seq:>9.1f} us{1.0:>10.2f}x{err_seq:>13.2e}")
    label = "syncopate fused AG+GEMM" if op.get("decision", "fused") == "fused" else "syncopate (chose sequential)"
    print(f"    {label:<36}{us_fused:>9.1f} us{us_seq / us_fused:>10.2f}x{err_fused:>13.2e}")
    print(
        f"    (median of {args.iters} calls after {args.warmup} warm-up, slowest of {world} rank(s); "
        f"error vs an fp32 reference, worst rank, tolerance {tol:.1e})"
    )
    print_prediction(prediction, indent="    ")
    bad = [
        f"rank {r['rank']} {v}"
        for r in ranks
        for v, e in (("fused", r["err_fused"]), ("sequential", r["err_seq"]))
        if not e <= tol
    ]  # `not <=`: a NaN error fails too
    ok = not bad
    print(f"    correctness: {'PASS' if ok else 'FAIL (' + ', '.join(bad) + ')'}")
    return 0 if ok else 1


def print_prediction(prediction: dict, indent: str) -> None:
    if "error" in prediction:
        print(f"{indent}simulator: no prediction: {prediction['error']}")
        return
    print(
        f"{indent}simulator ({prediction['device']}): sequential {prediction['sequential']:.1f} us, "
        f"fused {prediction['fused']:.1f} us ({prediction['sequential'] / prediction['fused']:.2f}x), "
        f"floor {prediction['floor']:.1f} us (GEMM {prediction['gemm']:.1f}, all-gather {prediction['comm']:.1f})"
    )


def spawn_ranks(world: int, args: argparse.Namespace, store_dir: str) -> bool:
    """Runs run_rank on `world` processes; False (after saying why) when one failed or the whole
    run took longer than --timeout (then every rank is terminated: nothing here may hang)."""
    import torch.multiprocessing as mp

    context = mp.spawn(run_rank, args=(world, args, store_dir), nprocs=world, join=False)
    deadline = time.monotonic() + args.timeout
    try:
        while not context.join(timeout=2):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.terminate()
                print(
                    f"    FAIL: the ranks did not finish within --timeout {args.timeout} s; stopped them",
                    file=sys.stderr,
                )
                return False
    except Exception as exc:  # noqa: BLE001 - a rank raised: its traceback is in the message
        print(f"    FAIL: a rank stopped: {exc}", file=sys.stderr)
        return False
    return True


def main(argv=None) -> int:
    args = parse_args(argv)
    for key, value in MULTICAST_OFF.items():
        os.environ[key] = value
    try:
        import torch
    except ImportError as exc:
        print(
            f"syncopate demo (GPU): torch is not importable ({exc}); install torch 2.11 and triton 3.6 "
            "next to syncopate (scripts/setup.sh makes such a .venv)",
            file=sys.stderr,
        )
        return 1
    calib = find_calibration(args.calib)
    gpus = torch.cuda.device_count() if not args.dry_run else max(args.world, 1)
    title = f"AG+GEMM, A {args.m}x{args.k} sharded along M, B {args.k}x{args.n}, {args.dtype}"
    if gpus == 0:
        print(f"GPU: no CUDA GPU visible: the GPU half of the demo ({title}, fused vs sequential) is skipped.")
        return 0
    why = check_world(args, gpus)
    if why is not None:
        print(f"syncopate demo (GPU): {why}", file=sys.stderr)
        return 2
    world = args.world or gpus
    if args.dry_run:
        print(f"dry run: {title}, {world} rank(s); {args.warmup} warm-up + {args.iters} timed calls per variant")
        print_prediction(predict(args.m, args.k, args.n, world, args.dtype, calib), indent="    ")
        return 0

    print(f"GPU: {title} over {world} x {torch.cuda.get_device_name(0)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="syncopate-demo-") as store_dir:
        if not spawn_ranks(world, args, store_dir):
            return 1
        result = json.loads((Path(store_dir) / "result.json").read_text())
    op = result["op"]
    block_m, block_n = op.get("block", [128, 128])
    prediction = predict(
        args.m,
        args.k,
        args.n,
        world,
        args.dtype,
        calib,
        algorithm=op.get("algorithm", "direct"),
        split=int(op.get("split", 1)),
        backend=str(op.get("backend", "copy-engine")),
        block_m=int(block_m),
        block_n=int(block_n),
    )
    if isinstance(op.get("predicted_us"), dict):  # the op's own choice, made with the same simulator
        prediction.update(
            {
                key: op["predicted_us"][key]
                for key in ("sequential", "fused", "floor", "gemm", "comm")
                if key in op["predicted_us"]
            }
        )
    status = report(result, args, prediction)
    if args.json:
        Path(args.json).write_text(
            json.dumps({**result, "prediction": prediction, "status": status}, indent=2, default=str)
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
