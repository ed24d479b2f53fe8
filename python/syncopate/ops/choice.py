"""How an op context runs: fused or sequential, and with which plan and tile order, chosen by
the simulator (`syncopate._core.tune` / `simulate` with a calibration) for the GEMM's real
block shape. Pure: no GPU, no torch.distributed; the contexts call `choose` once when built.

    c = choose("all-gather", m=8192, n=8192, k=8192, world=4, dtype="bf16",
               block_m=128, block_n=256)
    c.decision, c.backend, c.algorithm, c.split, c.tile_order, c.predicted_us, c.reason

Every argument other than the shape may be fixed (a string or int) or "auto"/None (the
simulator picks among all). `mode="auto"` runs fused only when the simulator predicts it at
least MIN_GAIN faster than the best sequential configuration *and* MIN_SAVING_US faster in
absolute terms (see there).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Optional

from syncopate.errors import UserError
from syncopate.ops.common import ALGORITHMS, BACKENDS, TILE_ORDERS

# Fused must beat sequential by this fraction (the simulator's own default for tune).
MIN_GAIN = 0.05
# ... and by this many microseconds. Where the predicted saving is only the launch and the
# cross-stream sync that fusion removes (4 + 4 us in calib/h200.json, both assumed rather than
# measured), it is within the model's error, and the simulator does not model the host's cost
# of issuing a fused call (tens of microseconds of Python); for tiny M that cost dominates.
MIN_SAVING_US = 16.0
# ... after adding the calibration's measured cost of a fused call that the simulator does not
# model (overheads.fused_call_us in calib/h200.json, with its provenance there: the host issue
# path, and the reduction tail of GEMM+RS/AR). `sy.tune` charges the same.
SPLITS = (1, 2, 4, 8)
CALIBRATION_ENV = "SYNCOPATE_CALIBRATION"


@dataclasses.dataclass(frozen=True)
class OpChoice:
    decision: str          # "fused" | "sequential"
    backend: str
    algorithm: str
    split: int
    tile_order: str
    predicted_us: dict     # fused, sequential, floor, gemm, comm (this configuration)
    reason: str


def calibration_name() -> str:
    """$SYNCOPATE_CALIBRATION (a shipped name or a .json path), else the shipped "h200"."""
    return os.environ.get(CALIBRATION_ENV, "h200")


def calibration(name: Optional[str] = None):
    """The simulator calibration the ops use (calibration_name() unless named)."""
    import syncopate as sy

    name = calibration_name() if name is None else name
    try:
        return sy.calibration(name)
    except UserError as exc:
        raise UserError(f"syncopate.ops: cannot load the simulator calibration {name!r} ({exc}); "
                        f"install the package (it ships calib/h200.json) or set {CALIBRATION_ENV} "
                        "to a calibration .json file") from None


@functools.lru_cache(maxsize=None)
def _cached_calibration(name: str):
    return calibration(name)


def _as_list(value, everything):
    return list(everything) if value in ("auto", None) else [value]


def _prediction(collective, m, n, k, world, dtype, block_m, block_n, backend, algorithm, split,
                order, calib):
    import syncopate as sy

    shape = [m, k] if collective == "all-gather" else [m, n]
    plan = sy.make_plan(collective, world_size=world, shape=shape, algorithm=algorithm, split=split,
                        dtype=dtype, dim=0, backend=backend)
    p = sy.simulate(plan, sy.GemmShape(m, n, k, block_m, block_n), calib, order=order)
    return dict(fused=p.fused_us, sequential=p.sequential_us, floor=p.floor_us, gemm=p.gemm_alone_us,
                comm=p.comm_alone_us)


@functools.lru_cache(maxsize=256)
def _choose_cached(collective, m, n, k, world, dtype, block_m, block_n, backend, algorithm, split,
                   tile_order, mode, calib_name):
    import syncopate as sy

    calib = _cached_calibration(calib_name)
    gemm = sy.GemmShape(m, n, k, block_m, block_n)
    result = sy.tune(collective, gemm, world, calib, dtype=dtype,
                     algorithms=_as_list(algorithm, ALGORITHMS), splits=_as_list(split, SPLITS),
                     backends=_as_list(backend, BACKENDS), orders=_as_list(tile_order, TILE_ORDERS),
                     min_gain=MIN_GAIN)
    fused, seq = result.best_fused, result.best_sequential
    overhead = calib.fused_call_overhead_us(collective)
    saving = seq.sequential_us - fused.fused_us - overhead
    if mode == "auto":
        pays = saving >= max(MIN_GAIN * seq.sequential_us, MIN_SAVING_US)
        decision = "fused" if pays else "sequential"
        reason = (f"simulated: best fused {fused.fused_us:.1f} us (+{overhead:.0f} us measured call "
                  f"overhead) vs best sequential {seq.sequential_us:.1f} us ({saving:+.1f} us); fused needs "
                  f">= {100 * MIN_GAIN:.0f}% and >= {MIN_SAVING_US:.0f} us")
    else:
        decision = mode
        reason = f"mode={mode!r} given"
    pick = fused if decision == "fused" else seq
    order = pick.order if decision == "fused" else (tile_order if tile_order != "auto" else "arrival")
    predicted = _prediction(collective, m, n, k, world, dtype, block_m, block_n, pick.backend,
                            pick.algorithm, pick.split, order, calib)
    return OpChoice(decision, pick.backend, pick.algorithm, int(pick.split), order, predicted, reason)


def choose(collective: str, *, m: int, n: int, k: int, world: int, dtype: str, block_m: int,
           block_n: int, backend: str = "auto", algorithm: str = "auto", split: Optional[int] = None,
           tile_order: str = "auto", mode: str = "auto") -> OpChoice:
    """The configuration an op context runs with (see the module docstring). m, n, k: the GEMM
    every rank runs (all-gather: M is the gathered rows). Deterministic for equal arguments."""
    calib_name = calibration_name()
    return _choose_cached(collective, int(m), int(n), int(k), int(world), dtype, int(block_m),
                          int(block_n), backend, algorithm, split, tile_order, mode, calib_name)
