"""Syncopate's own variants of one op row: a context per backend in fused mode, and "auto".

    syncopate_ce    mode="fused", backend="copy-engine"
    syncopate_sm    mode="fused", backend="sm-copy"
    syncopate_nccl  mode="fused", backend="nccl"
    syncopate_auto  everything "auto": the simulator's choice (may be sequential)
    syncopate_epilogue_ce / _sm / _nccl
                    GEMM+RS and GEMM+AR: mode="fused", reduce="epilogue" (the staged partials
                    added in the GEMM's epilogue, ops/staged_gemm.py; GEMM+AR then gathers the
                    reduced boxes), per backend; a row whose shard is not a multiple of the
                    GEMM's BLOCK_M skips it with the context's reason

For GEMM+RS and GEMM+AR every variant but syncopate_auto passes reduce="chunks" unless it names
one (so syncopate_ce / _sm / _nccl and the ablation stay today's fused RS/AR with reduce-add
chunks, timed next to the epilogue rows); syncopate_auto may pick either.

Contexts (syncopate.ops.ag_gemm.AgGemm, gemm_rs.GemmRs, gemm_ar.GemmAr) are built once per row,
before anything is timed; each warms its kernels up and ends on a barrier, so no rank spins on
a peer that is still loading modules. Timed calls pass check=False (no synchronize per call);
the `after` hook, ctx.check(), synchronizes and raises the first timed-out wait, so a missed
chunk fails the variant instead of passing unseen. Outputs go to a buffer made here (a call
with out=None would allocate).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.distributed as dist

SETTINGS = {
    "syncopate_ce": dict(backend="copy-engine", mode="fused"),
    "syncopate_sm": dict(backend="sm-copy", mode="fused"),
    "syncopate_nccl": dict(backend="nccl", mode="fused"),
    "syncopate_auto": dict(backend="auto", algorithm="auto", mode="auto"),
    "syncopate_epilogue_ce": dict(backend="copy-engine", mode="fused", reduce="epilogue"),
    "syncopate_epilogue_sm": dict(backend="sm-copy", mode="fused", reduce="epilogue"),
    "syncopate_epilogue_nccl": dict(backend="nccl", mode="fused", reduce="epilogue"),
}
FUSED = ("syncopate_ce", "syncopate_sm", "syncopate_nccl")
EPILOGUE = ("syncopate_epilogue_ce", "syncopate_epilogue_sm", "syncopate_epilogue_nccl")
# The ops with the `reduce` keyword (GemmRs, GemmAr).
REDUCE_OPS = ("gemm_rs", "gemm_ar")
CLASSES = {
    "ag_gemm": ("syncopate.ops.ag_gemm", "AgGemm"),
    "gemm_rs": ("syncopate.ops.gemm_rs", "GemmRs"),
    "gemm_ar": ("syncopate.ops.gemm_ar", "GemmAr"),
}
# What the report keeps of each context (the names helper A's contexts expose).
ATTRIBUTES = (
    "decision",
    "backend",
    "algorithm",
    "split",
    "tile_order",
    "gemm_config",
    "kernel_origin",
    "kernel_name",
    "reduce",
    "predicted_us",
)


def load_classes() -> tuple[dict, Optional[str]]:
    """({op: context class}, None) or ({}, why not): the ops need the compiled runtime."""
    classes = {}
    for op, (module, name) in CLASSES.items():
        try:
            classes[op] = getattr(importlib.import_module(module), name)
        except Exception as error:  # ImportError, OSError from a missing extension, ...
            return {}, f"{module}.{name} not importable: {type(error).__name__}: {error}"
    return classes, None


def describe(ctx) -> dict:
    """The context's choices and the simulator's prediction, as JSON-able values."""
    info = {}
    for name in ATTRIBUTES:
        value = getattr(ctx, name, None)
        if isinstance(value, dict):
            value = {str(k): float(v) for k, v in value.items()}
        elif value is not None and not isinstance(value, (int, float, str, bool)):
            value = str(value)
        info[name] = value
    return info


@dataclass
class Built:
    """One row's Syncopate variants: {name: Variant or skip reason}, plus per name the after
    hook and the context's description."""

    variants: dict = field(default_factory=dict)
    after: dict[str, Callable[[], None]] = field(default_factory=dict)
    info: dict[str, dict] = field(default_factory=dict)
    contexts: list = field(default_factory=list)

    def close(self) -> None:
        """Drops the contexts (their heaps go with them); close() where a context has one."""
        for ctx in self.contexts:
            close = getattr(ctx, "close", None)
            if callable(close):
                close()
        self.contexts.clear()
        self.variants.clear()
        self.after.clear()


def build(
    op: str,
    a: torch.Tensor,
    b: torch.Tensor,
    m: int,
    b_layout: str,
    group,
    names: tuple[str, ...],
    classes: dict,
    missing: Optional[str],
    extra_kwargs: Optional[dict] = None,
) -> Built:
    """Contexts for `names` (a subset of SETTINGS, or ablation names with their own kwargs in
    extra_kwargs[name]). a, b are this rank's operands as the op takes them; m is the whole M.

    A constructor error (raised on every rank alike: same shapes, same code) makes that name a
    skip reason; the contexts' constructors are collective, so ranks stay in step."""
    built = Built()
    for name in names:
        if missing is not None:
            built.variants[name] = missing
            continue
        kwargs = dict((extra_kwargs or {}).get(name, SETTINGS.get(name, {})))
        if op not in REDUCE_OPS and "reduce" in kwargs:
            built.variants[name] = f"the reduction epilogue is GEMM+RS/AR only, not {op}"
            continue
        if op in REDUCE_OPS and name != "syncopate_auto":
            # Fixed variants (and the ablation's) keep meaning today's reduce-add chunks.
            kwargs.setdefault("reduce", "chunks")
        k = a.shape[1]  # AG: full K (a_shard [m/w, K]); RS/AR: K/w (a [m, K/w])
        n = b.shape[1]
        try:
            ctx = classes[op](group, m=m, k=k, n=n, dtype=a.dtype, device=a.device, b_layout=b_layout, **kwargs)
        except Exception as error:
            built.variants[name] = f"context failed: {type(error).__name__}: {str(error)[:300]}"
            continue
        out_rows = m // dist.get_world_size(group) if op == "gemm_rs" else m
        out = torch.empty((out_rows, n), dtype=a.dtype, device=a.device)
        built.contexts.append(ctx)
        built.info[name] = describe(ctx)
        built.after[name] = ctx.check
        built.variants[name] = _variant(ctx, a, b, out)
    return built


def _variant(ctx, a, b, out):
    state = {"checked": False}

    def call():
        # The first (checked) run synchronizes and raises at once; timed runs only record.
        ctx(a, b, out=out, check=not state["checked"])
        state["checked"] = True

    return call, lambda: out, True
