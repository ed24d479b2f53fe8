"""Sweep of the wide-tile GEMM (kernels/gemm_wide.py: tiles BLOCK_M x (BLOCK_N + BLOCK_N2), widths
96, 160 and 192 that no single Triton block has) on the local GEMMs that miss cuBLAS /
torch._scaled_mm (per-tensor scales) on nvidia-h100-x1 (issue 18).

    python bench/sweep_wide.py --budget 136 --workers 15 --out $OUT/gemm18
    python bench/sweep_wide.py --dry-run       # the plan (rows, variants, kernels), no GPU

Rows ([N, K] B only: the two layouts ran within a few % of each other on every row of that run;
the rule is verified in both afterwards): the bf16 GEMMs above 1.05x cuBLAS and the FP8 GEMMs above 1.05x torch._scaled_mm
(per-tensor) in main's bench_gemm --issue run on nvidia-h100-x1
(bench/results/gemm18-nvidia-h100-x1-2026-11-25/). Candidates per row, beside the model's pick:
every wide tile (BLOCK_M 64 or 128) and split factor (1-4 or 6; split: fp32 partials summed, and for FP8 scaled, by a second launch)
whose work items fill at least WAVE_FILL of their last wave of the GPU's multiprocessors, the
stages as many as shared memory holds (at most 6), best MAX_PER_ROW by wave fill. Every variant
checked against fp32 with NaN-poisoned outputs, all timed in one run (sweep_decode's machinery:
parallel compile first, CUDA graphs, interleaved, median). One JSON after every row.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep_decode  # noqa: E402

GemmConfig = sweep_decode.GemmConfig

# (M, K, N): bf16 rows above 1.05x cuBLAS on nvidia-h100-x1 (2026-11-25 14:06), worst first.
BF16_ROWS = (
    (512, 8192, 5120),
    (1024, 4096, 3072),
    (512, 4096, 3072),
    (128, 8192, 5120),
    (128, 4096, 3072),
    (1024, 8192, 5120),
    (128, 7168, 4096),
    (128, 14336, 8192),
    (4096, 8192, 2560),
    (128, 2048, 4096),
)
# (M, K, N, layout): FP8 rows above 1.05x torch._scaled_mm (per-tensor), same run, worst first.
FP8_ROWS = (
    (128, 7168, 4096, "nk"),
    (128, 4096, 3072, "nk"),
    (512, 8192, 5120, "nk"),
    (512, 4096, 3072, "nk"),
    (128, 2048, 4096, "nk"),
    (128, 8192, 5120, "nk"),
    (1024, 4096, 3072, "nk"),
    (256, 8192, 8192, "nk"),
    (256, 2048, 8192, "nk"),
    (256, 4096, 8192, "nk"),
    (1024, 8192, 5120, "nk"),
    (512, 7168, 4096, "nk"),
)
# (BLOCK_N, BLOCK_N2): tile widths 96, 160, 192.
WIDTHS = ((64, 32), (128, 32), (128, 64))
WAVE_FILL = 0.85
SPLITS = (1, 2, 3, 4, 6)
MAX_PER_ROW = 7
SMEM = 232448 - 2048


def wide_config(bm: int, bn: int, bn2: int, fp8: bool, split: int) -> GemmConfig | None:
    """The config of one wide tile: 8 warps where the accumulators need them, the most stages
    (<= 6) that fit; None when not even 2 stages fit or the accumulator is too large. FP8: the
    bf16 block's stages with BLOCK_K doubled (the same bytes per stage; the bf16 C staging of the
    epilogue is what shared_memory_bytes(2) counts), as configs.choose_fp8_config does."""
    warps = 8 if bm * (bn + bn2) >= 128 * 160 else 4
    if bm * (bn + bn2) / (warps * 32) > 192:
        return None
    for stages in range(6, 1, -1):
        cfg = GemmConfig(bm, bn, 64, 8, stages, warps, True, 1, 1.0, flatten=False, split_k=split, block_n2=bn2)
        if cfg.shared_memory_bytes(2) <= SMEM:
            return dataclasses.replace(cfg, block_k=128) if fp8 else cfg
    return None


def wide_candidates(m: int, n: int, k: int, num_sms: int, fp8: bool = False) -> dict[str, GemmConfig]:
    """name -> config: the wide tiles of one row (module docstring), best wave fill first."""
    bk = 128 if fp8 else 64
    scored = []
    for bm in (64, 128):
        for bn, bn2 in WIDTHS:
            tiles = math.ceil(m / bm) * math.ceil(n / (bn + bn2))
            for split in SPLITS:
                items = tiles * split
                fill = items / (math.ceil(items / num_sms) * num_sms)
                if fill < WAVE_FILL or (split > 1 and math.ceil(k / bk) < split * 8):
                    continue
                if split > 1 and tiles >= num_sms:
                    continue
                cfg = wide_config(bm, bn, bn2, fp8, split)
                if cfg is not None:
                    scored.append((-fill, split, -bm, cfg))
    scored.sort(key=lambda t: t[:3])
    return {cfg.name: cfg for *_, cfg in scored[:MAX_PER_ROW]}


def main() -> int:
    sweep_decode.DECODE_ROWS = BF16_ROWS
    sweep_decode.DECODE_LAYOUTS = ("nk",)
    sweep_decode.FP8_ROWS = FP8_ROWS
    sweep_decode.candidates = wide_candidates
    return sweep_decode.main()


if __name__ == "__main__":
    sys.exit(main())
