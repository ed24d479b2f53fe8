"""bench_gemm.py's row selection on the CPU (no GPU, nothing timed): --shapes parsing, the
small-M candidate configs (only blocks that leave the chip under two waves get split-K, with
factors that bring the work to 0.75-3 waves), and the FP8 configs' shared-memory fit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_gemm  # noqa: E402
import shapes  # noqa: E402


def test_shapes_are_parsed_and_unknown_ones_kept():
    wanted = bench_gemm.parse_shapes("128x8192x5120nk, 7x16x32kn")
    assert wanted == [(128, 8192, 5120, "nk"), (7, 16, 32, "kn")]
    picked = bench_gemm.select_shapes(shapes.local_gemm_shapes(), wanted)
    assert picked[0].labels[0].startswith("ag_gemm w2 llama3-70b")  # an op row's GEMM, its labels kept
    assert picked[1].labels == ("--shapes",)
    for bad in ("128x8192nk", "128x8192x5120", "axbxckn", "1x2x3tn"):
        with pytest.raises(ValueError, match="expected MxKxN followed by kn or nk"):
            bench_gemm.parse_shapes(bad)


def test_small_m_candidates_split_only_blocks_that_leave_the_chip_idle():
    big = bench_gemm.small_m_candidates(2048, 8192, 132)  # 8 x 32 = 256 tiles of 128x256
    assert not any(c.split_k > 1 for c in big)
    decode = bench_gemm.small_m_candidates(128, 5120, 132)  # 20 tiles of 128x256
    splits = {(c.block_m, c.block_n, c.split_k) for c in decode if c.split_k > 1}
    assert (128, 256, 8) in splits and (128, 256, 2) not in splits  # 40 items: under 0.75 waves
    assert all(c.split_fixup for c in decode if c.split_k > 1)  # two-launch split only with --sweep
    assert any(
        not c.split_fixup for c in bench_gemm.small_m_candidates(256, 8192, 132, full_sweep=True) if c.split_k > 1
    )


def test_fp8_configs_fit_in_hopper_shared_memory():
    for cfg in bench_gemm.FP8_EXTRA:
        # 1-byte stages, a bf16 epilogue: the bf16 accounting at half the K is the same bytes.
        stage = (cfg.block_m + cfg.block_n) * cfg.block_k
        epilogue = cfg.block_m * (cfg.block_n // cfg.epilogue_split) * 2
        assert cfg.num_stages * stage + epilogue <= 232448 - 1024, cfg.name
