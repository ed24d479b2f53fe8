"""Block configurations for the local GEMM, and the small cost model that picks one per shape.

Why a model and not autotuning: a fused op calls the GEMM at many shapes and cannot afford a
minutes-long tuning sweep per shape, and a table tuned on one GPU is the thing users complain
about in peer projects. The model below knows only what every Hopper-class GPU shares (the
relative efficiency of a block shape, measured once per block shape, see docs/PERFORMANCE.md)
and reads the multiprocessor count off the device, so wave quantisation is computed for the
GPU the code actually runs on.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    """One compile-time configuration of the persistent GEMM kernel."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_stages: int
    num_warps: int
    warp_specialize: bool
    # Store the C tile in this many column slices: halves the epilogue's shared memory for the
    # 128x256 block, which is what lets three 48 KiB pipeline stages fit beside it.
    epilogue_split: int
    # Relative throughput of one block of this shape, once the chip is full (1.0 = the best
    # block). Used only to compare candidates; measured in bench/bench_gemm.py --sweep.
    efficiency: float

    @property
    def name(self) -> str:
        ws = "ws" if self.warp_specialize else "nows"
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_s{self.num_stages}"
                f"_w{self.num_warps}_g{self.group_m}_{ws}_e{self.epilogue_split}")

    def shared_memory_bytes(self, element_size: int) -> int:
        """Shared memory the pipeline and the epilogue need, to reject configs that won't fit."""
        stage = (self.block_m + self.block_n) * self.block_k * element_size
        epilogue = self.block_m * (self.block_n // self.epilogue_split) * element_size
        return self.num_stages * stage + epilogue


# The candidates, best block first. 128x256 with 8 warps (two consumer warpgroups) is the
# block that reached cuBLAS on H200 (design/baselines-h200.md); smaller blocks exist for shapes
# whose tile count would leave multiprocessors idle in the last wave.
CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(128, 256, 64, 8, 3, 8, True, 2, 1.00),
    GemmConfig(128, 128, 64, 8, 4, 8, True, 1, 0.80),
    GemmConfig(128, 128, 64, 8, 4, 4, True, 1, 0.75),
    GemmConfig(64, 128, 64, 8, 4, 4, True, 1, 0.55),
)


def _waves(tiles: int, num_programs: int) -> float:
    return float(math.ceil(tiles / num_programs))


def estimated_cost(cfg: GemmConfig, m: int, n: int, k: int, num_sms: int) -> float:
    """Relative time of C[m,n] = A[m,k] @ B[k,n] with cfg on a chip of num_sms multiprocessors.

    Each multiprocessor runs one persistent program; the time is the number of waves of tiles
    times the time of one tile, which is its block area (padded work included, since a partial
    block costs a full one) over the block's efficiency. K only scales every candidate alike,
    so it matters only through the per-tile fixed cost (prologue + epilogue), modelled as a
    few K-steps' worth of work.
    """
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    k_steps = math.ceil(k / cfg.block_k)
    fixed_steps = 4.0  # pipeline fill and the C store, in units of one K-step
    per_tile = cfg.block_m * cfg.block_n * (k_steps + fixed_steps) / cfg.efficiency
    return _waves(tiles, num_sms) * per_tile


def choose_config(m: int, n: int, k: int, num_sms: int, element_size: int,
                  shared_memory_limit: int,
                  candidates: tuple[GemmConfig, ...] = CANDIDATES) -> GemmConfig:
    """The candidate with the lowest estimated cost that fits in shared memory."""
    if m <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"choose_config: shape must be positive, got M={m} N={n} K={k}")
    if num_sms <= 0:
        raise ValueError(f"choose_config: num_sms must be positive, got {num_sms}")
    fitting = [c for c in candidates if c.shared_memory_bytes(element_size) <= shared_memory_limit]
    if not fitting:
        raise ValueError(
            f"choose_config: no GEMM config fits in {shared_memory_limit} bytes of shared memory "
            f"(smallest needs {min(c.shared_memory_bytes(element_size) for c in candidates)})")
    return min(fitting, key=lambda c: estimated_cost(c, m, n, k, num_sms))


# Used when the interpreter runs the kernel on the CPU: small blocks keep it fast, and the
# interpreter ignores stages, warps and warp specialisation.
INTERPRETER_CONFIG = GemmConfig(32, 32, 32, 4, 1, 4, False, 1, 1.0)
