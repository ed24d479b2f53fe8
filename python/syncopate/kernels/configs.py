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
    # Flatten the tile loop into the K loop so the next tile's loads start during this tile's
    # epilogue (tl.range(..., flatten=True)).
    flatten: bool = True
    # Programs sharing one output tile, each over a slice of K, summed by a second kernel:
    # for shapes whose tile count cannot fill the chip (small M).
    split_k: int = 1
    # With split_k > 1: the last program to finish a tile's slices sums them in the same launch
    # (gemm_split_k_fixup_kernel) instead of a second reduction kernel.
    split_fixup: bool = False
    # One program per work item instead of one persistent program per multiprocessor: the
    # hardware schedules the programs, and two of them share a multiprocessor when their shared
    # memory allows (one's epilogue then overlaps the other's loads).
    persistent: bool = True
    # Stream-K (gemm_stream_k_kernel): full waves of whole tiles, then the K-steps of the
    # remaining tiles (one to two waves' worth) spread evenly over every program; a tile whose
    # K-steps two programs share is summed by the last to finish it, in the same launch.
    stream_k: bool = False
    # With split_k > 1: split only the tiles of the last, partial wave (gemm_split_tail_kernel):
    # the whole waves run as whole tiles stored straight to C, the remaining tiles' K is split
    # split_k ways so that they fill the last wave, and a second small kernel sums only those
    # tiles' partials. For tile counts just over a whole number of waves (1.1-1.5).
    split_tail: bool = False
    # A second accumulator beside the first, BLOCK_N2 columns wide (a power of two, 0: none): the
    # output tile is block_m x (block_n + block_n2), e.g. 128 + 64 = 192, a width no single
    # Triton block can have (gemm_wide.gemm_wide_host_kernel; the plain local GEMMs only).
    block_n2: int = 0

    @property
    def width(self) -> int:
        """Columns of C one tile covers."""
        return self.block_n + self.block_n2

    @property
    def name(self) -> str:
        ws = "ws" if self.warp_specialize else "nows"
        flat = "" if self.flatten else "_nf"
        split = (
            f"_{'t' if self.split_tail else 'k'}{self.split_k}{'f' if self.split_fixup else ''}"
            if self.split_k > 1
            else ""
        )
        grid = ("" if self.persistent else "_np") + ("_sk" if self.stream_k else "")
        wide = f"+{self.block_n2}" if self.block_n2 else ""
        return (
            f"{self.block_m}x{self.block_n}{wide}x{self.block_k}_s{self.num_stages}"
            f"_w{self.num_warps}_g{self.group_m}_{ws}_e{self.epilogue_split}{flat}{split}{grid}"
        )

    def shared_memory_bytes(self, element_size: int) -> int:
        """Shared memory the pipeline and the epilogue need, to reject configs that won't fit."""
        stage = (self.block_m + self.block_n + self.block_n2) * self.block_k * element_size
        epilogue = self.block_m * (self.block_n // self.epilogue_split + self.block_n2) * element_size
        return self.num_stages * stage + epilogue


# The candidate blocks. 128x256 with 8 warps (two consumer warpgroups) is the block that
# reached cuBLAS on H200 (docs/PERFORMANCE.md, "Results on nvidia-h200"); the smaller blocks are for shapes whose
# tile count would leave multiprocessors idle in the last wave. Each efficiency is the block's
# throughput per unit of tile area relative to 128x256, fitted to the sweep in
# bench/results/ (docs/PERFORMANCE.md): a property of the block on Hopper, not of one GPU.
# The two narrow blocks (64x64 with BLOCK_K 128, 128x64 with six stages) are for decode rows
# (M = 128): their tiles fill one wave where 128x128 needs split-K. Their efficiencies were
# fitted to the nvidia-h200 run of bench_gemm.py --small-m --wide (2026-11-25) on the
# compute-bound rows (1024 x 2048 x 8192, 2048 x 2048 x 3584: 0.55 and 0.69).
CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(128, 256, 64, 8, 3, 8, True, 2, 1.00),
    GemmConfig(128, 128, 64, 8, 4, 4, True, 1, 0.91),
    GemmConfig(64, 128, 64, 8, 4, 4, True, 1, 0.59),
    GemmConfig(128, 64, 64, 8, 6, 4, True, 1, 0.72),
    GemmConfig(64, 64, 128, 8, 4, 4, True, 1, 0.52),
)
# Blocks only the plain local GEMM (`gemm()`: gemm_tma_host_kernel and the split-K kernels)
# offers, never the fused ops: every block of CANDIDATES is also compiled into every transformed
# kernel (tests/python/compile_fused_kernels.py), these are not.
# Fitted to the nvidia-h200 sweep of 2026-11-25 (bench/sweep_small_m.py, 64 small-M GEMMs in both
# layouts, bench/results/gemm18-nvidia-h200-2026-11-25/) with bench/fit_config_model.py:
# - 128x128 with 6 stages instead of 4 (224 KiB of shared memory: 192 KiB of pipeline, 32 KiB
#   of epilogue): 4-10% faster than 4 stages on every M = 256-1024 row where 128x128 tiles fill
#   about one wave (256 x 4096 x 8192: 1.022 vs 1.116 of cuBLAS). At small M the tile's K loop
#   is the whole program (one tile per program), so the pipeline's depth sets how much of B is
#   in flight; efficiency 0.97 of 128x256.
# - 128x64 with BLOCK_K 128, 4 stages: the best block of the long-K decode row 128 x 14336 x 8192
#   (one wave of 128 tiles without split-K partials).
# Offered unsplit only: their split-K variants were not measured.
LOCAL_CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(128, 128, 64, 8, 6, 4, True, 1, 0.97),
    GemmConfig(128, 64, 128, 8, 4, 4, True, 1, 0.70),
)
SPLIT_K_FACTORS = (1, 2, 3, 4)
# Pipeline fill and epilogue of one tile, in K-steps (fitted).
TILE_FIXED_STEPS = 4.0
# Cost of the split-K partials (written, read back and summed by a second kernel), in
# units of one 128x256x64 K-step per MB of fp32 partials (fitted).
SPLIT_K_COST_PER_MB = 1.0
# The same for the one-launch fixup (the last program of a tile reads the other slices'
# partials): no second launch and no full-C pass. ESTIMATED (half the fitted two-launch
# cost), not fitted: only used when a caller asks for the fixup variants.
SPLIT_K_FIXUP_COST_PER_MB = 0.5
# Whether choose_config offers the fixup variants by default: off. Timed on nvidia-h200
# (2026-11-25, bench_gemm.py --small-m): 6-11% slower than the two-launch split at the same
# block and factor on every decode row (e.g. 128 x 7168 x 4096, 128x128 split 4: 29.9 vs 26.9
# us), so the model keeps the two-launch split; the fixup stays for a producer that needs its
# tiles final in one launch (docs/PERFORMANCE.md).
FIXUP_IN_MODEL = False
# The split-tail's second launch (the tail tiles' reduction), in K-steps.
SPLIT_TAIL_LAUNCH_STEPS = 3.0  # fitting it (fit_config_model.py) left it unchanged
# Whether candidate_configs(local=True) offers the split-tail variants of the main blocks, and
# below how many waves of tiles. Timed on nvidia-h200 (2026-11-25, sweep_small_m, tiles of 1.1-3.9
# waves): 1024 x 8192 x 5120 1.289 -> 1.129 of cuBLAS (128x256, 28 tail tiles in 4 slices),
# 512 x 8192 x 5120 1.336 -> 1.234 (128x128, 4 slices).
SPLIT_TAIL_IN_MODEL = True
SPLIT_TAIL_MAX_WAVES = 4
# Stream-K in one launch (gemm_one_launch.gemm_stream_k_flat_kernel): the K-steps of every tile
# spread evenly over every program, walked by one pipelined loop. Offered by
# candidate_configs(local=True) for STREAM_K_BLOCKS when STREAM_K_IN_MODEL, below
# STREAM_K_MAX_WAVES waves of tiles. STREAM_K_FIXED_STEPS: a program's fixed cost in K-steps
# (pipeline fill, its partials, the sum of the tiles it finishes). OFF: swept on
# nvidia-h100-x1 (2026-11-25 15:00, bench/sweep_decode.py, bench/results/gemm18-decode-nvidia-
# h100-x1-2026-11-25/) on the 20 decode GEMMs that miss cuBLAS: best block per row 1.18-2.35x
# cuBLAS, slower than the model's pick on every row (e.g. 512 x 4096 x 3072, 128x128 s5: 2.10 vs
# 1.19; 128 x 14336 x 8192 nk, 128x64x128: 1.18 vs 1.11).
STREAM_K_IN_MODEL = False
STREAM_K_MAX_WAVES = 2
STREAM_K_FIXED_STEPS = 6.0
STREAM_K_BLOCKS: tuple[GemmConfig, ...] = ()
# The split tail in one launch (gemm_one_launch.gemm_tail_fixup_kernel, split_tail + split_fixup)
# of ONE_LAUNCH_TAIL_BLOCKS, offered by candidate_configs(local=True) when ONE_LAUNCH_SPLIT_TAIL,
# where the whole waves are at least one and the last partial wave holds at most
# ONE_LAUNCH_TAIL_MAX_FILL of a wave (its few tiles split 3-4 ways). The same sweep: 128x128
# with 6 stages, the 28 tail tiles of 512 x 8192 x 5120 in 3-4 slices, 1.205-1.223 of cuBLAS vs
# 1.269-1.310 for the two-launch split tail of 128x128 s4 the model took (both layouts); where the
# tail is larger (1024 x 4096 x 3072: 60 tail tiles, 1.30 vs 1.20 for 128x256 unsplit;
# 1024 x 8192 x 5120: 56, 1.15-1.16, a tie with 128x256's two-launch tail) or there is no whole
# wave (the M = 128 rows: the best split-K in one launch 1.5-31% slower than the model's two-launch
# split or unsplit block, e.g. 128 x 7168 x 4096 nk 1.20 vs 1.16) it did not win. Its partials cost SPLIT_K_FIXUP_COST_PER_MB, no second launch.
ONE_LAUNCH_SPLIT_TAIL = True
ONE_LAUNCH_TAIL_BLOCKS: tuple[GemmConfig, ...] = (LOCAL_CANDIDATES[0],)
ONE_LAUNCH_TAIL_MAX_FILL = 0.25
# Whether the plain gemm_fp8 call (choose_fp8_config(local=True)) takes the local candidates, the
# one-launch splits and stream-K. OFF: in the same sweep, on the 12 small-M FP8 GEMMs above 1.05x
# torch._scaled_mm (per-tensor scales), a one-launch split beat the FP8 pick on one row only
# (128 x 7168 x 4096, 128x64 split 2: 1.31 vs 1.41) and lost on the others (128 x 4096 x 3072
# 1.40 vs 1.35, 128 x 8192 x 5120 1.44 vs 1.11), stream-K on every row (1.4-2.8x).
FP8_LOCAL_IN_MODEL = False
# Wide tiles (gemm_wide.py: BLOCK_M x (BLOCK_N + BLOCK_N2), two accumulators sharing A), offered
# by candidate_configs(local=True) with split factors 1-4 (two launches) when WIDE_IN_MODEL, and
# for the plain gemm_fp8 call (choose_fp8_config(local=True), unsplit or split, BLOCK_K doubled)
# when WIDE_FP8_IN_MODEL. Never to the fused ops (gemm_wide is not annotated).
# ON since the nvidia-h200 sweep of 2026-12-03 (bench/sweep_wide.py on the 22 GEMMs that missed
# 5%, bench/results/gemm18-wide-nvidia-h200-2026-12-03/, docs/PERFORMANCE.md "Small M and
# decode"): the 64-row tiles of widths 192 / 160 / 96 (4 warps, 6 stages) won by 4-25% where their
# tile count (times the split) fills about one wave of the multiprocessors and the power-of-two
# tiles do not, e.g. 512 x 3072 x 4096: 128 tiles of 64x192 (0.97 of a 132-SM wave), 1.064 of
# cuBLAS, vs 96 tiles of 128x128 (0.73), 1.199. The 128-row wide tiles never won; not offered.
# Efficiencies (relative to 128x256, as for CANDIDATES) fitted to that sweep with every other
# constant unchanged; each lies inside the interval where the model's pick on every swept row is
# the old pick or a measured faster wide tile (64x192: bf16 0.80-0.84, FP8 0.73-0.79; 64x160:
# bf16 0.76-0.88, FP8 0.66-0.78; 64x96: 0.53-0.57 in both, the bf16 and FP8 intervals meeting
# there). FP8 has its own efficiencies for the two wider tiles (WIDE_FP8_EFFICIENCY): the FP8
# K-step moves the same bytes as the bf16 one in about half the MMA time, so a narrow tile (fewer
# FLOPs per byte loaded than 128x256) gains less from FP8 than the big blocks do: measured at
# 1024 x 3072 x 4096, 64x192 is 8.5% faster than 128x256 in bf16 and a tie (row scales: 2.7%
# slower) in FP8. The standard blocks' FP8 efficiencies are their bf16 ones (not re-measured).
WIDE_IN_MODEL = True
WIDE_FP8_IN_MODEL = True
WIDE_CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(64, 128, 64, 8, 6, 4, True, 1, 0.82, flatten=False, block_n2=64),  # 64 x 192
    GemmConfig(64, 128, 64, 8, 6, 4, True, 1, 0.80, flatten=False, block_n2=32),  # 64 x 160
    GemmConfig(64, 64, 64, 8, 6, 4, True, 1, 0.55, flatten=False, block_n2=32),  # 64 x 96
)
# (block_m, block_n, block_n2) -> the wide tile's efficiency in gemm_fp8 (see above).
WIDE_FP8_EFFICIENCY: dict[tuple[int, int, int], float] = {(64, 128, 64): 0.76, (64, 128, 32): 0.72, (64, 64, 32): 0.55}
# A persistent program whose tile loop is not flattened into its K loop (flatten=False: the wide
# kernel) starts each tile after its first with an empty pipeline, where the flattened kernels
# load the next tile during this one's epilogue: this many K-steps per extra tile, beyond
# TILE_FIXED_STEPS. Nothing with one tile per program pays it. Fitted with the efficiencies above
# (interval 4-12 with them): it is what keeps the wide tiles off the multi-wave rows where they
# lost, e.g. 1024 x 5120 x 8192 FP8, 3.9 waves of 64x160: 9% slower than 2.4 waves of 128x128.
UNFLATTENED_TILE_STEPS = 8.0
# Below this many K-steps per slice, splitting K only adds overhead.
MIN_K_STEPS_PER_SPLIT = 8
_REFERENCE_AREA = 128 * 256


def _waves(items: int, num_programs: int) -> float:
    return float(math.ceil(items / num_programs))


def estimated_cost(cfg: GemmConfig, m: int, n: int, k: int, num_sms: int) -> float:
    """Relative time of C[m,n] = A[m,k] @ B[k,n] with cfg on a chip of num_sms multiprocessors.

    Each multiprocessor runs one persistent program; the time is the number of waves of work
    items (tiles times K slices) times the time of one item: its K-steps plus a fixed cost,
    scaled by block area over efficiency (a partial block costs a full one). Split-K adds
    the traffic of its fp32 partials; an unflattened tile loop (the wide tiles) a pipeline fill
    per wave after the first (UNFLATTENED_TILE_STEPS). Unit: one K-step of a 128x256x64 block.
    """
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.width)
    area = cfg.block_m * cfg.width / _REFERENCE_AREA
    if cfg.split_tail and cfg.split_k > 1:
        # Whole waves of whole tiles, then the tail tiles' K slices (gemm_split_tail_kernel);
        # partials and the reduction launch for the tail tiles only. Offered only under
        # SPLIT_TAIL_MAX_WAVES waves of tiles, where it was measured and where the last partial
        # wave is a large share of the time.
        if tiles >= SPLIT_TAIL_MAX_WAVES * num_sms:
            return math.inf
        if cfg.split_fixup and (tiles <= num_sms or tiles % num_sms > ONE_LAUNCH_TAIL_MAX_FILL * num_sms):
            return math.inf
        launch = 0.0 if cfg.split_fixup else SPLIT_TAIL_LAUNCH_STEPS
        per_mb = SPLIT_K_FIXUP_COST_PER_MB if cfg.split_fixup else SPLIT_K_COST_PER_MB
        tail = tiles % num_sms if tiles > num_sms else tiles
        whole_steps = math.ceil(k / cfg.block_k) * cfg.block_k / 64
        cost = (tiles - tail) // num_sms * (whole_steps + TILE_FIXED_STEPS) * area / cfg.efficiency
        if tail:
            slice_steps = math.ceil(math.ceil(k / cfg.block_k) / cfg.split_k) * cfg.block_k / 64
            cost += _waves(tail * cfg.split_k, num_sms) * (slice_steps + TILE_FIXED_STEPS) * area / cfg.efficiency
            cost += launch + per_mb * cfg.split_k * tail * cfg.block_m * cfg.block_n * 4 / 1e6
        return cost
    if cfg.stream_k:
        # Every tile's K-steps shared evenly by every program (gemm_one_launch), under two waves.
        if tiles >= STREAM_K_MAX_WAVES * num_sms:
            return math.inf
        steps = math.ceil(tiles * math.ceil(k / cfg.block_k) / num_sms) * cfg.block_k / 64
        return (steps + STREAM_K_FIXED_STEPS) * area / cfg.efficiency
    work = tiles * cfg.split_k
    k_steps = math.ceil(math.ceil(k / cfg.block_k) / cfg.split_k) * cfg.block_k / 64
    per_item = (k_steps + TILE_FIXED_STEPS) * area
    waves = _waves(work, num_sms)
    cost = waves * per_item / cfg.efficiency
    if not cfg.flatten and cfg.persistent:
        cost += (waves - 1) * UNFLATTENED_TILE_STEPS * area / cfg.efficiency
    if cfg.split_k > 1:
        per_mb = SPLIT_K_FIXUP_COST_PER_MB if cfg.split_fixup else SPLIT_K_COST_PER_MB
        cost += per_mb * cfg.split_k * m * n * 4 / 1e6
    return cost


def candidate_configs(k: int, fixup: bool = False, local: bool = False) -> list[GemmConfig]:
    """Every block of CANDIDATES (and with local, LOCAL_CANDIDATES) with every split factor that
    leaves enough K per slice (and, with fixup, each split also as the one-launch fixup variant)."""
    out = []
    for cfg in CANDIDATES + (LOCAL_CANDIDATES if local else ()):
        k_steps = math.ceil(k / cfg.block_k)
        for split in SPLIT_K_FACTORS if cfg in CANDIDATES else (1,):
            if split == 1 or k_steps >= split * MIN_K_STEPS_PER_SPLIT:
                out.append(dataclasses.replace(cfg, split_k=split))
                if split > 1 and fixup:
                    out.append(dataclasses.replace(cfg, split_k=split, split_fixup=True))
                if split > 1 and local and SPLIT_TAIL_IN_MODEL and cfg in CANDIDATES[:2]:
                    out.append(dataclasses.replace(cfg, split_k=split, split_tail=True))
    if local and ONE_LAUNCH_SPLIT_TAIL:
        for cfg in ONE_LAUNCH_TAIL_BLOCKS:
            for split in SPLIT_K_FACTORS[1:]:
                if math.ceil(k / cfg.block_k) >= split * MIN_K_STEPS_PER_SPLIT:
                    out.append(dataclasses.replace(cfg, split_k=split, split_tail=True, split_fixup=True))
    if local and STREAM_K_IN_MODEL:
        out.extend(dataclasses.replace(cfg, stream_k=True) for cfg in STREAM_K_BLOCKS)
    if local and WIDE_IN_MODEL:
        out.extend(wide_configs(k))
    return out


def wide_configs(k: int, fp8: bool = False) -> list[GemmConfig]:
    """WIDE_CANDIDATES with every split factor that leaves enough K per slice; fp8: with the FP8
    efficiencies (WIDE_FP8_EFFICIENCY)."""
    blocks = (
        tuple(
            dataclasses.replace(c, efficiency=WIDE_FP8_EFFICIENCY.get((c.block_m, c.block_n, c.block_n2), c.efficiency))
            for c in WIDE_CANDIDATES
        )
        if fp8
        else WIDE_CANDIDATES
    )
    return [
        dataclasses.replace(cfg, split_k=split)
        for cfg in blocks
        for split in SPLIT_K_FACTORS
        if split == 1 or math.ceil(k / cfg.block_k) >= split * MIN_K_STEPS_PER_SPLIT
    ]


def choose_config(
    m: int,
    n: int,
    k: int,
    num_sms: int,
    element_size: int,
    shared_memory_limit: int,
    allow_split_k: bool = True,
    candidates: tuple[GemmConfig, ...] | None = None,
    fixup: bool | None = None,
    local: bool = False,
    wide: bool = True,
) -> GemmConfig:
    """The candidate with the lowest estimated cost that fits in shared memory.

    allow_split_k=False for callers that need every tile final when its program finishes
    (a producer that signals tiles as they are stored). local=True for the plain local GEMM,
    which also offers LOCAL_CANDIDATES and (with WIDE_IN_MODEL) the wide tiles; wide=False
    drops the wide tiles (a call that cannot run gemm_wide: no TMA, or C stored by pointers).
    """
    if m <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"choose_config: shape must be positive, got M={m} N={n} K={k}")
    if num_sms <= 0:
        raise ValueError(f"choose_config: num_sms must be positive, got {num_sms}")
    fixup = FIXUP_IN_MODEL if fixup is None else fixup
    pool = list(candidates) if candidates is not None else candidate_configs(k, fixup=fixup, local=local)
    if not allow_split_k:
        pool = [c for c in pool if c.split_k == 1]
    if not wide:
        pool = [c for c in pool if not c.block_n2]
    fitting = [c for c in pool if c.shared_memory_bytes(element_size) <= shared_memory_limit]
    if not fitting:
        raise ValueError(
            f"choose_config: no GEMM config fits in {shared_memory_limit} bytes of shared memory "
            f"(smallest needs {min(c.shared_memory_bytes(element_size) for c in pool)})"
        )
    return min(fitting, key=lambda c: estimated_cost(c, m, n, k, num_sms))


def fp8_runnable(cfg: GemmConfig) -> bool:
    """Whether gemm_fp8 runs cfg: unsplit, split in one launch (split_fixup, stream-K), or a wide
    tile (split in two launches, the scales applied by the reduction)."""
    return cfg.stream_k or cfg.split_k == 1 or cfg.split_fixup or cfg.block_n2 > 0


def choose_fp8_config(
    m: int, n: int, k: int, num_sms: int, shared_memory_limit: int, local: bool = False
) -> GemmConfig:
    """The FP8 GEMM's block: the bf16 model's choice (2-byte stages are what an FP8 block with
    twice the BLOCK_K needs) with BLOCK_K doubled up to 128, so a K-step moves the same bytes.
    local=True (the plain gemm_fp8 call): with FP8_LOCAL_IN_MODEL the local candidates, the
    one-launch splits and stream-K included; else with WIDE_FP8_IN_MODEL the unsplit candidates
    and the wide tiles (split in two launches too, their FP8 efficiencies); else (and for the
    fused FP8 ops) unsplit candidates only."""
    if local and FP8_LOCAL_IN_MODEL:
        pool = tuple(c for c in candidate_configs(k, fixup=True, local=True) if fp8_runnable(c))
        cfg = choose_config(m, n, k, num_sms, 2, shared_memory_limit, candidates=pool)
    elif local and WIDE_FP8_IN_MODEL:
        pool = tuple(c for c in candidate_configs(k) if c.split_k == 1) + tuple(wide_configs(k, fp8=True))
        cfg = choose_config(m, n, k, num_sms, 2, shared_memory_limit, candidates=pool)
    else:
        cfg = choose_config(m, n, k, num_sms, 2, shared_memory_limit, allow_split_k=False)
    return dataclasses.replace(cfg, block_k=min(2 * cfg.block_k, 128))


# Used when the interpreter runs the kernel on the CPU: small blocks keep it fast, and the
# interpreter ignores stages, warps and warp specialisation.
INTERPRETER_CONFIG = GemmConfig(32, 32, 32, 4, 1, 4, False, 1, 1.0)
