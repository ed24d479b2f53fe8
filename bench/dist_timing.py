"""Checking and timing one variant of a tensor-parallel op on every rank (torchrun, NCCL).

Shared by bench_ops.py and bench_ablation.py. A variant is (fn, get_out, poison) as in
op_variants.py, optionally with an `after` hook (e.g. a Syncopate context's check(), which
synchronizes and raises a timed-out wait that the timed calls, made with check=False, only
recorded). Every decision to time or skip is agreed by all ranks: a collective run on some
ranks only would hang.
"""

from __future__ import annotations

import math
import statistics
import zlib
from typing import Callable, Optional

import torch
import torch.distributed as dist

import shapes
import timing

ERROR_LIMIT = {"ag_gemm": 1e-2, "gemm_rs": 2e-2, "gemm_ar": 2e-2}  # bf16 sums round per hop
# Where the agreement tensors live: "cuda" under NCCL; the CPU smoke test sets "cpu" (gloo).
DEVICE = "cuda"


def make_inputs(problem: shapes.Problem, op: str, rank: int, world: int, dtype, device):
    """This rank's operands (fresh random data) and fp32 references for its outputs:
    {"op": the op's result, "gemm": this rank's GEMM alone, "collective": the collective alone
    (run on the GEMM's output, or on A for the all-gather)}."""
    seed = zlib.crc32(f"{op} {problem.label} {problem.m} {problem.k} {problem.n}".encode())
    own = torch.Generator(device=device).manual_seed(seed + 7919 * (rank + 1))
    shared = torch.Generator(device=device).manual_seed(seed)  # same stream on every rank

    def rand(gen, *size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(dtype)

    def weight(gen, k, n):  # [K, N]; a transposed [N, K] nn.Linear weight for "nk" rows
        return rand(gen, n, k).t() if problem.b_layout == "nk" else rand(gen, k, n)

    if op == "ag_gemm":
        a = rand(own, problem.m // world, problem.k)
        b = weight(shared, problem.k, problem.n)  # replicated: identical on every rank
        gathered = torch.empty((problem.m, problem.k), dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, a)
        ref = gathered.float() @ b.float()
        return a, b, {"op": ref, "gemm": ref, "collective": gathered}
    k_local = problem.k // world
    a = rand(own, problem.m, k_local)
    b = weight(own, k_local, problem.n)
    local = a.float() @ b.float()
    if op == "gemm_rs":
        ref = torch.empty((problem.m // world, problem.n), dtype=torch.float32, device=device)
        dist.reduce_scatter_tensor(ref, local)
    else:
        ref = local.clone()
        dist.all_reduce(ref)
    return a, b, {"op": ref, "gemm": local, "collective": ref}


def check(variant, ref: torch.Tensor, op: str) -> tuple[float, Optional[str]]:
    """Run once with the output poisoned (where it is not also an input); returns
    (relative error, failure or None)."""
    fn, get_out, poison = variant
    try:
        if poison:
            get_out().fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        out = get_out()
    except Exception as error:  # a variant that cannot run here is reported, not fatal
        return math.inf, f"{type(error).__name__}: {str(error)[:300]}"
    if out.shape != ref.shape:
        return math.inf, f"output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    err = timing.relative_error(out, ref)
    return err, None if err < ERROR_LIMIT[op] else f"relative error {err:.3g}"


def run_hook(hook: Optional[Callable[[], None]]) -> Optional[str]:
    """Runs an `after` hook; its exception as a failure string, or None."""
    if hook is None:
        return None
    try:
        hook()
        return None
    except Exception as error:
        return f"{type(error).__name__}: {str(error)[:300]}"


def time_variant(fn, samples: int, warmup: int, after=None) -> tuple[float, Optional[str]]:
    """This rank's median ms and a failure (from `after`) or None; every sample starts after a
    GPU-side barrier (a one-element all-reduce), and is timed with CUDA events."""
    token = torch.zeros(1, device=DEVICE)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    failure = run_hook(after)  # a timed-out wait in warm-up: do not time 20 more of them
    if any_rank(failure is not None):
        return math.nan, failure or "failed on a peer"
    values = []
    for _ in range(samples):
        dist.all_reduce(token)
        values.append(timing.time_once_ms(fn))
    torch.cuda.synchronize()
    return statistics.median(values), run_hook(after)


def max_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=DEVICE)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def any_rank(flag: bool) -> bool:
    t = torch.tensor([1 if flag else 0], device=DEVICE)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def measure(name: str, variant, ref: torch.Tensor, op: str, samples: int, warmup: int, after=None) -> dict:
    """{"ms", "rel_error"} or {"skipped"} or {"failed", ...}: the same answer on every rank."""
    if isinstance(variant, str):
        return {"skipped": variant}
    err, failure = check(variant, ref, op)
    failure = failure or run_hook(after)
    err = max_over_ranks(err)
    if any_rank(failure is not None):
        return {"rel_error": err, "failed": failure or "failed on a peer"}
    ms, failure = time_variant(variant[0], samples, warmup, after)
    ms = max_over_ranks(ms)
    if any_rank(failure is not None):
        return {"rel_error": err, "ms_invalid": ms, "failed": f"while timing: {failure or 'failed on a peer'}"}
    return {"ms": ms, "rel_error": err}


def init(nccl_timeout_s: float) -> tuple[int, int, int]:
    """NCCL process group over torchrun's ranks (collectives on NCCL's high-priority stream,
    a watchdog time-out so a stuck collective ends the run); (rank, world, local rank)."""
    import datetime
    import os

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    options = dist.ProcessGroupNCCL.Options()
    options.is_high_priority_stream = True  # collectives ahead of compute when they overlap
    dist.init_process_group(
        "nccl",
        pg_options=options,
        device_id=torch.device("cuda", local_rank),
        timeout=datetime.timedelta(seconds=nccl_timeout_s),
    )
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references must be fp32
    return dist.get_rank(), dist.get_world_size(), local_rank


def device_kind(props, world: int) -> str:
    """ "nvidia-h200-x2" from the device name and the world size."""
    return f"{props.name.lower().replace('nvidia ', 'nvidia-').replace(' ', '-')}-x{world}"


def write_json(path, report: dict) -> None:
    """Atomically: a reader (or a time-out) never sees half a file."""
    import json

    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(path)
