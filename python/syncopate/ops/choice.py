"""How an op context runs: fused or sequential, and with which plan, tile order and reduction.
The decision is the simulator's (`syncopate._core.tune`, include/syncopate/sim/autotune.hpp),
the same one `syncopate tune` shows; this module only builds the request for the GEMM's real
block shape and reads the answer. Pure: no GPU, no torch.distributed; the contexts call
`choose` once when built.

    c = choose("all-gather", m=8192, n=8192, k=8192, world=4, dtype="bf16",
               block_m=128, block_n=256)
    c.decision, c.backend, c.algorithm, c.split, c.tile_order, c.predicted_us, c.reason

Every argument other than the shape may be fixed (a string or int) or "auto"/None (the
simulator picks among all). For reduce-scatter and all-reduce, `reduce` adds the staged plan
(reduction in the GEMM's epilogue, ops/staged_gemm.py) to the fused candidates: "chunks"
(reduce-add plans only), "epilogue" (staged plans only: algorithm direct) or "auto" (both). The
caller decides whether the shape allows the staged kernel at all. The op contexts run fused or
sequential only, so kernel-level overlap is left out of their decision (`kernel_level=False`;
`syncopate tune --no-kernel-level` shows the same).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from syncopate.errors import UserError
from syncopate.settings import env

CALIBRATION_ENV = "SYNCOPATE_CALIBRATION"


@dataclasses.dataclass(frozen=True)
class OpChoice:
    decision: str  # "fused" | "sequential"
    backend: str
    algorithm: str
    split: int
    tile_order: str
    predicted_us: dict  # fused, sequential, floor, gemm, comm (this configuration)
    reason: str
    reduce: str = "chunks"  # reduce-scatter / all-reduce: "epilogue" when the staged plan runs fused


def calibration_name() -> str:
    """$SYNCOPATE_CALIBRATION (a shipped name or a .json path), else the shipped "h200"."""
    return env.calibration or "h200"


def calibration(name: Optional[str] = None):
    """The simulator calibration the ops use (calibration_name() unless named)."""
    import syncopate as sy

    name = calibration_name() if name is None else name
    try:
        return sy.calibration(name)
    except UserError as exc:
        raise UserError(
            f"syncopate.ops: cannot load the simulator calibration {name!r} ({exc}); "
            f"install the package (it ships calib/h200.json) or set {CALIBRATION_ENV} "
            "to a calibration .json file"
        ) from None


@functools.lru_cache(maxsize=None)
def cached_calibration(name: str):
    return calibration(name)


def _as_list(value):
    """ "auto" / None: None (tune's own lists, which `syncopate tune` uses too); a tuple: those
    (an op narrowing "auto"); else just `value`."""
    if isinstance(value, tuple):
        return list(value)
    return None if value in ("auto", None) else [value]


@functools.lru_cache(maxsize=256)
def _choose_cached(
    collective,
    m,
    n,
    k,
    world,
    dtype,
    block_m,
    block_n,
    backend,
    algorithm,
    split,
    tile_order,
    mode,
    calib_name,
    reduce="chunks",
    gemm_dtype=None,
):
    import syncopate as sy

    gemm = sy.GemmShape(m, n, k, block_m, block_n)
    gemm.dtype = gemm_dtype or dtype
    result = sy.tune(
        collective,
        gemm,
        world,
        cached_calibration(calib_name),
        dtype=dtype,
        algorithms=_as_list(algorithm),
        splits=_as_list(split),
        backends=_as_list(backend),
        orders=_as_list(tile_order),
        reduce=reduce,
        kernel_level=False,
        mode=mode,
    )
    c = result.chosen
    predicted = dict(
        fused=c.fused_us, sequential=c.sequential_us, floor=c.floor_us, gemm=c.gemm_alone_us, comm=c.comm_alone_us
    )
    return OpChoice(result.decision, c.backend, c.algorithm, int(c.split), c.order, predicted, result.reason, c.reduce)


def choose(
    collective: str,
    *,
    m: int,
    n: int,
    k: int,
    world: int,
    dtype: str,
    block_m: int,
    block_n: int,
    backend: str = "auto",
    algorithm: str = "auto",
    split: Optional[int] = None,
    tile_order: str = "auto",
    mode: str = "auto",
    reduce: str = "chunks",
    gemm_dtype: Optional[str] = None,
) -> OpChoice:
    """The configuration an op context runs with (see the module docstring). m, n, k: the GEMM
    every rank runs (all-gather: M is the gathered rows). dtype: the plan's (the bytes chunks
    move); gemm_dtype: the GEMM operands' where they differ (FP8 GEMM+RS reduces a bf16 C).
    Deterministic for equal arguments."""
    calib_name = calibration_name()
    return _choose_cached(
        collective,
        int(m),
        int(n),
        int(k),
        int(world),
        dtype,
        int(block_m),
        int(block_n),
        backend,
        algorithm,
        split,
        tile_order,
        mode,
        calib_name,
        reduce,
        gemm_dtype,
    )
