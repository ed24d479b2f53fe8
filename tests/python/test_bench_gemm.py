"""bench_gemm.py's row selection on the CPU (no GPU, nothing timed): --shapes parsing, the
small-M candidate configs (only blocks that leave the chip under two waves get split-K, with
factors that bring the work to 0.75-3 waves), the --wide set, the precompile's one run per
compiled kernel, and the FP8 configs' shared-memory fit."""

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


def test_precompile_keys_follow_the_kernel_the_timed_run_launches():
    """One precompile run per compiled kernel: a non-persistent config is the persistent kernel
    (same key when the grids agree on divisibility by 16), a grid that Triton specialises
    differently is a key of its own."""
    cfg = bench_gemm.GemmConfig(64, 128, 64, 8, 4, 4, True, 1, 1.0)
    shape = bench_gemm.select_shapes(shapes.local_gemm_shapes(), [(256, 2048, 8192, "kn")])[0]
    assert bench_gemm.launch_grid(cfg, 256, 8192, 2048, 132) == 132  # 256 tiles, persistent
    non_persistent = bench_gemm.dataclasses.replace(cfg, persistent=False)
    assert bench_gemm.launch_grid(non_persistent, 256, 8192, 2048, 132) == 256
    key, task = bench_gemm.compile_task("bf16", non_persistent, shape, "", 132)
    assert key != bench_gemm.compile_task("bf16", cfg, shape, "", 132)[0]  # 256 % 16 == 0, 132 % 16 != 0
    assert task[-1] == 256 and key[1] == cfg  # run at the real grid, keyed as the persistent kernel
    split = bench_gemm.dataclasses.replace(cfg, split_k=2)
    assert bench_gemm.launch_grid(split, 128, 4096, 2048, 132) == 128  # 64 tiles x 2 slices


def test_wide_candidates_split_and_stream_k_only_where_tiles_leave_the_chip_idle():
    decode = bench_gemm.wide_candidates(128, 4096, 2048, 132)
    assert any(c.split_k == 2 and (c.block_m, c.block_n) == (64, 128) for c in decode)
    assert any(c.stream_k for c in decode)
    assert not any(not c.persistent for c in decode)  # every block fits in one wave
    big = bench_gemm.wide_candidates(2048, 3584, 2048, 132)
    assert not any(c.split_k > 1 for c in big)
    assert any(not c.persistent and (c.block_m, c.block_n) == (128, 256) for c in big)  # 224 tiles


def test_shape_groups_are_the_performance_tables_groups():
    groups = [bench_gemm.shape_group(s.labels) for s in shapes.local_gemm_shapes()]
    assert {g: groups.count(g) for g in set(groups)} == {
        "baselines": 12,
        "small-M rows of the baselines": 18,
        "model layers (M = 4096, 8192)": 32,
        "decode (M = 128-1024)": 24,
    }


def test_small_m_sweep_candidates_follow_the_wave_fill_rule():
    import sweep_small_m

    decode = sweep_small_m.candidates(128, 4096, 2048, 132, short=False)
    # 128 tiles of 128x32 fill one wave: the block is timed unsplit at M = 128 ...
    assert "128x32x128_s4_w4_g8_ws_e1" in decode
    assert "128x32x128_s4_w4_g8_ws_e1" not in sweep_small_m.candidates(256, 4096, 2048, 132, short=False)
    for name, (cfg, grid) in decode.items():
        tiles = -(-128 // cfg.block_m) * -(-4096 // cfg.block_n)
        if cfg.split_k > 1:  # ... and every split leaves >= 8 K-steps per slice and fills >= 0.7 waves
            assert -(-2048 // cfg.block_k) >= 8 * cfg.split_k, name
            assert sweep_small_m.wave_fill(tiles * cfg.split_k, 132) >= sweep_small_m.GOOD_FILL, name
    # 512 x 5120: 160 tiles of 128x128 (1.2 waves): also on a balanced grid of 80 programs.
    assert sweep_small_m.candidates(512, 5120, 8192, 132, short=False)["grid80/128x128x64_s4_w4_g8_ws_e1"][1] == 80
    # Rows at cuBLAS last time: only the two main blocks (and their splits).
    short = sweep_small_m.candidates(1024, 8192, 8192, 132, short=True)
    assert {(c.block_m, c.block_n) for c, _ in short.values()} == {(128, 256), (128, 128)}


def test_config_names_parse_back_to_their_configs():
    for cfg in (
        bench_gemm.GemmConfig(128, 64, 64, 8, 6, 4, True, 1, 0.69, split_k=2),
        bench_gemm.GemmConfig(64, 128, 64, 8, 4, 4, True, 1, 1.0, persistent=False),
        bench_gemm.GemmConfig(128, 128, 64, 8, 4, 4, True, 1, 1.0, split_k=2, split_tail=True),
        bench_gemm.GemmConfig(128, 256, 64, 8, 3, 8, False, 2, 1.0, flatten=False, split_k=3, split_fixup=True),
        bench_gemm.GemmConfig(64, 128, 64, 8, 6, 4, True, 1, 1.0, flatten=False, split_k=2, block_n2=32),
    ):
        assert bench_gemm.parse_config_name(cfg.name).name == cfg.name
    with pytest.raises(ValueError, match="unknown part"):
        bench_gemm.parse_config_name("128x128x64_s4_w4_g8_ws_e1_zz")


def test_compare_reads_an_earlier_runs_choices():
    path = Path(__file__).resolve().parents[2] / "bench/results/gemm-nvidia-h200-2026-11-25"
    earlier = bench_gemm.earlier_choices(str(path / "bench_gemm_nvidia-h200_2026-11-25_0907_smallm.json"))
    assert len(earlier) == 33
    assert earlier[(128, 7168, 4096, "nk")].name == "128x64x64_s6_w4_g8_ws_e1_k2"


def test_wide_sweep_offers_tiles_that_fill_the_last_wave():
    """bench/sweep_wide.py: 512 x 3072 in 64 x 192 tiles is 8 x 16 = 128 tiles (0.97 of 132);
    128 x 192 (64 tiles, 0.48) is offered only split 2 (128 items); every candidate fits in shared
    memory, and FP8 candidates double BLOCK_K with the bf16 block's stages."""
    import sweep_wide

    cands = sweep_wide.wide_candidates(512, 3072, 4096, 132)
    assert "64x128+64x64_s6_w4_g8_ws_e1_nf" in cands
    assert "128x128+64x64_s4_w8_g8_ws_e1_nf" not in cands
    assert "128x128+64x64_s4_w8_g8_ws_e1_nf_k2" in cands
    for cfg in cands.values():
        tiles = -(-512 // cfg.block_m) * -(-3072 // cfg.width)
        items = tiles * cfg.split_k
        assert items / (-(-items // 132) * 132) >= sweep_wide.WAVE_FILL
        assert cfg.shared_memory_bytes(2) <= sweep_wide.SMEM
    fp8 = sweep_wide.wide_candidates(512, 3072, 4096, 132, fp8=True)
    assert {c.block_k for c in fp8.values()} == {128}
