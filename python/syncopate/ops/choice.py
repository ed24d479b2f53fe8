"""How an op context runs: fused or sequential, and with which plan and tile order, chosen by
the simulator (`syncopate._core.tune` / `simulate` with a calibration) for the GEMM's real
block shape. Pure: no GPU, no torch.distributed; the contexts call `choose` once when built.

    c = choose("all-gather", m=8192, n=8192, k=8192, world=4, dtype="bf16",
               block_m=128, block_n=256)
    c.decision, c.backend, c.algorithm, c.split, c.tile_order, c.predicted_us, c.reason

Every argument other than the shape may be fixed (a string or int) or "auto"/None (the
simulator picks among all). For reduce-scatter and all-reduce, `reduce` adds the staged plan
(reduction in the GEMM's epilogue, ops/staged_gemm.py) to the fused candidates: "chunks"
(today's reduce-add plans only), "epilogue" (staged plans only: algorithm direct) or "auto"
(both; the faster predicted wins). The caller decides whether the shape allows the staged
kernel at all.
`mode="auto"` runs fused only when the simulator predicts it at least MIN_GAIN faster than the
best sequential configuration *and* MIN_SAVING_US faster in absolute terms (see there).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Optional

from syncopate.errors import UserError
from syncopate.ops.common import ALGORITHMS, BACKENDS, TILE_ORDERS

# Fused must beat sequential by this fraction: the simulator's own default for tune
# (kDefaultMinGain in include/syncopate/sim/autotune.hpp, which says why 2%).
MIN_GAIN = 0.02
# ... and by this many microseconds. Where the predicted saving is only the launch and the
# cross-stream sync that fusion removes (4 + 4 us in calib/h200.json, both assumed rather than
# measured), it is within the model's error.
MIN_SAVING_US = 16.0
# The simulator's fused time includes the host path of a fused call, the reduce-add step and
# the copy-out (calib/h200.json: host, reduce_add, gpu.local_copy_gbps). Older calibration
# files instead carry a measured lump per collective (overheads.fused_call_us, deprecated),
# which is added here as before (0 for files with `host`); `sy.tune` charges the same.
SPLITS = (1, 2, 4, 8)
# The collectives with a staged candidate (the simulator times the staged plans of both).
STAGED_COLLECTIVES = ("reduce-scatter", "all-reduce")
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
    reduce: str = "chunks"  # reduce-scatter / all-reduce: "epilogue" when the staged plan runs fused


@dataclasses.dataclass(frozen=True)
class _StagedCandidate:
    """The best staged plan, with the attributes of a tune candidate the choice reads."""

    fused_us: float
    backend: str
    split: int
    order: str
    algorithm: str = "direct"


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
    """"auto" / None: every choice; a tuple: those (an op narrowing "auto"); else just `value`."""
    if isinstance(value, tuple):
        return list(value)
    return list(everything) if value in ("auto", None) else [value]


def _plan(collective, m, n, k, world, dtype, backend, algorithm, split, staged):
    import syncopate as sy

    if staged:
        from syncopate.ops.staged_gemm import staged_plan

        return staged_plan(world=world, m=m, n=n, split=split, dtype=dtype, backend=backend,
                           collective=collective)
    shape = [m, k] if collective == "all-gather" else [m, n]
    return sy.make_plan(collective, world_size=world, shape=shape, algorithm=algorithm, split=split,
                        dtype=dtype, dim=0, backend=backend)


def _best_staged(collective, m, n, k, world, dtype, block_m, block_n, backends, splits, orders, calib):
    """(the staged GEMM+RS / GEMM+AR candidate the simulator predicts fastest, or None; the
    simulator's refusals). A refusal is a configuration the simulator finds deadlocked: e.g. NCCL with a
    row-major order, where a rank's own tiles come first and wait for a recv grouped with the
    send of tiles that come after them; such a configuration is never chosen."""
    import syncopate as sy

    best, refusals = None, []
    for backend in backends:
        for split in splits:
            try:
                plan = _plan(collective, m, n, k, world, dtype, backend, "direct", split, True)
            except UserError:  # a split that would make an empty sub-chunk
                continue
            for order in orders:
                try:
                    us = sy.simulate(plan, sy.GemmShape(m, n, k, block_m, block_n), calib, order=order).fused_us
                except UserError as exc:
                    refusals.append(f"{backend} split {split} {order}: {exc}")
                    continue
                if best is None or us < best.fused_us:
                    best = _StagedCandidate(us, backend, int(split), order)
    return best, refusals


def _prediction(collective, m, n, k, world, dtype, block_m, block_n, backend, algorithm, split,
                order, calib, staged=False):
    import syncopate as sy

    plan = _plan(collective, m, n, k, world, dtype, backend, algorithm, split, staged)
    p = sy.simulate(plan, sy.GemmShape(m, n, k, block_m, block_n), calib, order=order)
    return dict(fused=p.fused_us, sequential=p.sequential_us, floor=p.floor_us, gemm=p.gemm_alone_us,
                comm=p.comm_alone_us)


@functools.lru_cache(maxsize=256)
def _choose_cached(collective, m, n, k, world, dtype, block_m, block_n, backend, algorithm, split,
                   tile_order, mode, calib_name, reduce="chunks"):
    import syncopate as sy

    calib = _cached_calibration(calib_name)
    gemm = sy.GemmShape(m, n, k, block_m, block_n)
    result = sy.tune(collective, gemm, world, calib, dtype=dtype,
                     algorithms=_as_list(algorithm, ALGORITHMS), splits=_as_list(split, SPLITS),
                     backends=_as_list(backend, BACKENDS), orders=_as_list(tile_order, TILE_ORDERS),
                     min_gain=MIN_GAIN)
    fused, seq = result.best_fused, result.best_sequential
    staged_note = ""
    if collective in STAGED_COLLECTIVES and reduce in ("auto", "epilogue"):
        staged, refusals = _best_staged(collective, m, n, k, world, dtype, block_m, block_n,
                                        _as_list(backend, BACKENDS), _as_list(split, SPLITS),
                                        _as_list(tile_order, TILE_ORDERS), calib)
        if staged is None and reduce == "epilogue":
            why = f"; the simulator refused {'; '.join(refusals[:3])}" if refusals else ""
            raise UserError(f"syncopate.ops: reduce='epilogue': no-candidate: no staged plan of {m} rows over "
                            f"{world} ranks with split in {_as_list(split, SPLITS)} runs{why}")
        if staged is not None:
            staged_note = (f"; reduction in the epilogue {staged.fused_us:.1f} us vs reduce-add chunks "
                           f"{fused.fused_us:.1f} us" if reduce == "auto" else "; reduce='epilogue' given")
            if reduce == "epilogue" or staged.fused_us < fused.fused_us:
                fused = staged
    is_staged = isinstance(fused, _StagedCandidate)
    overhead = calib.fused_call_overhead_us(collective)
    saving = seq.sequential_us - fused.fused_us - overhead
    if mode == "auto":
        pays = saving >= max(MIN_GAIN * seq.sequential_us, MIN_SAVING_US)
        decision = "fused" if pays else "sequential"
        lump = f" (+{overhead:.0f} us measured call overhead)" if overhead > 0 else " (host path included)"
        reason = (f"simulated: best fused {fused.fused_us:.1f} us{lump} vs best sequential "
                  f"{seq.sequential_us:.1f} us ({saving:+.1f} us); fused needs "
                  f">= {100 * MIN_GAIN:.0f}% and >= {MIN_SAVING_US:.0f} us{staged_note}")
    else:
        decision = mode
        reason = f"mode={mode!r} given"
    pick = fused if decision == "fused" else seq
    order = pick.order if decision == "fused" else (tile_order if tile_order != "auto" else "arrival")
    runs_staged = decision == "fused" and is_staged
    if decision == "fused" and mode != "auto":
        reason += staged_note
    predicted = _prediction(collective, m, n, k, world, dtype, block_m, block_n, pick.backend,
                            pick.algorithm, pick.split, order, calib, staged=runs_staged)
    return OpChoice(decision, pick.backend, pick.algorithm, int(pick.split), order, predicted, reason,
                    "epilogue" if runs_staged else "chunks")


def choose(collective: str, *, m: int, n: int, k: int, world: int, dtype: str, block_m: int,
           block_n: int, backend: str = "auto", algorithm: str = "auto", split: Optional[int] = None,
           tile_order: str = "auto", mode: str = "auto", reduce: str = "chunks") -> OpChoice:
    """The configuration an op context runs with (see the module docstring). m, n, k: the GEMM
    every rank runs (all-gather: M is the gathered rows). Deterministic for equal arguments."""
    calib_name = calibration_name()
    return _choose_cached(collective, int(m), int(n), int(k), int(world), dtype, int(block_m),
                          int(block_n), backend, algorithm, split, tile_order, mode, calib_name, reduce)
