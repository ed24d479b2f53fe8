"""Kernel-level overlap (syncopate.kernel_level, issue #8) with and without each control, as
benchmark variants for bench_ops.py (same conventions as op_variants.py).

    variants(op, a, b, chunks, group) -> {name: (fn, get_out, poison) | skip reason}

op: "ag_gemm" (a = A shard [M/w, K], b = B [K, N]) or "gemm_rs" (a = A [M, K/w], b = B shard
[K/w, N]); gemm_ar has no kernel-level op (skip reasons). Variants, all chunked the same way:
- kl_plain      cuBLAS pieces, NCCL pieces on a normal-priority stream, no shaping;
- kl_priority   the NCCL stream at the device's greatest priority;
- kl_occupancy  cuBLAS leaves CARVEOUT_SMS SMs to NCCL (cuBLASLt SM count target);
- kl_both       priority and carveout;
- kl_triton / kl_triton_shaped: the Triton GEMM with a 64x128 block (2 blocks per SM
  unshaped), with priority, unpadded / padded to 1 block per SM (occupancy shaping proper).
Building the variants is collective over the group (process groups are created).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Callable

import torch

Variant = tuple[Callable[[], None], Callable[[], torch.Tensor], bool]

# SMs cuBLAS leaves free in kl_occupancy / kl_both: NCCL's SMs in calib/h200.json.
CARVEOUT_SMS = int(os.environ.get("SYNCOPATE_KL_CARVEOUT_SMS", "16"))
NAMES = ("kl_plain", "kl_priority", "kl_occupancy", "kl_both", "kl_triton", "kl_triton_shaped")


def _kernel_level():
    """(syncopate.kernel_level, None) or (None, why not)."""
    python_dir = str(Path(__file__).resolve().parents[1] / "python")
    if python_dir not in sys.path:
        sys.path.append(python_dir)
    try:
        return importlib.import_module("syncopate.kernel_level"), None
    except Exception as error:  # not installed / bindings missing
        return None, f"syncopate.kernel_level not importable: {type(error).__name__}: {error}"


def _small_block_config():
    """64x128 block, 4 warps, no warp specialisation: 2 blocks fit per SM unshaped."""
    import dataclasses

    from syncopate.kernels.configs import CANDIDATES

    return dataclasses.replace(
        next(c for c in CANDIDATES if (c.block_m, c.block_n) == (64, 128)), warp_specialize=False
    )


def variants(op: str, a: torch.Tensor, b: torch.Tensor, chunks: int, group=None) -> dict[str, Variant | str]:
    import torch.distributed as dist

    if op not in ("ag_gemm", "gemm_rs"):
        return {name: f"no kernel-level op for {op} (AG+GEMM and GEMM+RS only)" for name in NAMES}
    kl, reason = _kernel_level()
    if kl is None:
        return {name: reason for name in NAMES}
    world = dist.get_world_size(group)
    if op == "ag_gemm":
        m, k, n = a.shape[0] * world, a.shape[1], b.shape[1]
        cls = kl.KernelLevelAgGemm
        out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    else:
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        cls = kl.KernelLevelGemmRs
        out = torch.empty((m // world, n), dtype=a.dtype, device=a.device)
    settings = {
        "kl_plain": dict(priority=False),
        "kl_priority": dict(priority=True),
        "kl_occupancy": dict(priority=False, sm_carveout=CARVEOUT_SMS),
        "kl_both": dict(priority=True, sm_carveout=CARVEOUT_SMS),
        "kl_triton": dict(priority=True, gemm="triton", gemm_config=_small_block_config()),
        "kl_triton_shaped": dict(priority=True, gemm="triton", residency=1, gemm_config=_small_block_config()),
    }
    result: dict[str, Variant | str] = {}
    for name, extra in settings.items():
        try:
            ctx = cls(group, m=m, k=k, n=n, dtype=a.dtype, chunks=chunks, device=a.device, **extra)
        except Exception as error:  # a shape the op refuses: the same on every rank
            result[name] = f"{type(error).__name__}: {error}"
            continue
        result[name] = ((lambda ctx=ctx: ctx(a, b, out=out)), (lambda: out), True)
    return result
