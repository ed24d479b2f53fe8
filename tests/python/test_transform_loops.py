"""The transformed persistent GEMMs keep their loop structure under Triton's GPU passes.

compile_loop_structure.py compiles the shipped kernels (their tile loop is
`tl.range(..., flatten=True, warp_specialize=WARP_SPECIALIZE)`) for sm_90 and sm_100 with Triton's
passes and bundled ptxas, untransformed and transformed, in a subprocess with TRITON_INTERPRET
unset (a real compile must not share a process with the interpreter's patches of
triton.language). Fused tile and K loops put every dot in exactly one scf.for; unfused, the dot
sits in the K loop inside the tile loop (two).

What must hold (docs/ANNOTATIONS.md, "Loop structure"): the transformed GEMM, whose wait is at
its tile lookup and loop-free, fuses like the original and is pipelined (three buffers for
num_stages=3), and in the fused loop the wait comes before the first TMA load; with warp
specialisation it compiles on sm_90 (8 and 4 warps) and on sm_100, where the partition that
issues the TMA loads runs the wait before them; the notify reads the row loaded beside the wait
for the tile it waited on. gemm_reduce waits after its K loop
(`syl.wait_tile`, a loop), so its transformed loops stay apart. A kernel whose Triton build
cannot target a variant is reported by the script as not compiled with the failing pass, and
the test names it.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("syncopate._core")

SCRIPT = Path(__file__).resolve().parent / "compile_loop_structure.py"


@pytest.fixture(scope="module")
def rows():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    out = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(out) == 12, done.stdout
    return {(r["kernel"], r["form"], r["sm"], r["warp_specialize"], r["num_warps"]): r for r in out}


def compiled(row):
    """The row, skipping the test when this Triton build cannot target the row's GPU at all
    (its ptxas or backend refuses the architecture); any other failure is a failure."""
    error = row.get("error", "")
    if not row["compiled"] and re.search(r"(?i)(unsupported|not supported|unknown).*(sm_|arch|target)", error):
        pytest.skip(f"this Triton build cannot target sm_{row['sm']}: {error}")
    assert row["compiled"], row
    return row


def test_sm90_the_transformed_gemm_fuses_and_pipelines_like_the_original(rows):
    for form in ("original", "transformed"):
        row = compiled(rows[("gemm_tma_kernel", form, 90, False, 8)])
        assert row["dot_loop_depths"] == [1], f"tile and K loops not fused: {row}"
        assert 3 in row["buffer_depths"], f"not pipelined with num_stages=3: {row}"
    row = rows[("gemm_tma_kernel", "transformed", 90, False, 8)]
    assert row["wait_before_loads_in_dot_loop"] is True, row


def test_sm90_the_transformed_fp8_gemm_fuses_and_pipelines_like_the_original(rows):
    """The FP8 kernel's K loop is gemm.py's tma_k_loop, imported: after the transformer (which
    follows the imported helpers) its tile and K loops still fuse, pipeline, and wait first."""
    for form in ("original", "transformed"):
        row = compiled(rows[("gemm_fp8_tma_kernel", form, 90, False, 8)])
        assert row["dot_loop_depths"] == [1], f"tile and K loops not fused: {row}"
        assert 3 in row["buffer_depths"], f"not pipelined with num_stages=3: {row}"
    assert rows[("gemm_fp8_tma_kernel", "transformed", 90, False, 8)]["wait_before_loads_in_dot_loop"] is True


def test_sm90_warp_specialisation_compiles_with_eight_and_four_warps(rows):
    for warps in (8, 4):
        row = compiled(rows[("gemm_tma_kernel", "transformed", 90, True, warps)])
        assert row["dot_loop_depths"] == [1] and row["wait_before_loads_in_dot_loop"] is True, row


def test_a_wait_after_the_k_loop_stays_there_and_keeps_the_loops_apart(rows):
    original = compiled(rows[("gemm_reduce_kernel", "original", 90, False, 8)])
    assert original["dot_loop_depths"] == [1], original
    row = compiled(rows[("gemm_reduce_kernel", "transformed", 90, True, 8)])
    assert row["dot_loop_depths"] == [2], row


def test_sm100_the_transformed_gemm_compiles_and_its_load_partition_waits(rows):
    row = compiled(rows[("gemm_tma_kernel", "transformed", 100, False, 8)])
    # sm_100's pipeliner peels a dot out of the loop; none sits in two loops (fused).
    assert max(row["dot_loop_depths"]) == 1 and row["wait_before_loads_in_dot_loop"] is True, row
    original = compiled(rows[("gemm_tma_kernel", "original", 100, True, 8)])
    assert original["warp_specialized"], original
    row = compiled(rows[("gemm_tma_kernel", "transformed", 100, True, 8)])
    assert row["warp_specialized"], row
    assert row["wait_before_loads_in_load_partition"] is True, row


def test_the_ops_fused_config_leaves_warp_specialisation_where_it_is_safe():
    """As the ops apply it (ops/fused_gemm.py fused_config): on sm_90 warp specialisation stays
    for 8-warp configs and goes for 4-warp ones; on sm_100 and later it goes for every config
    (a producer's notify ends with a CTA-wide barrier, which a warp-specialised epilogue
    partition would never pass)."""
    from syncopate.kernels.configs import CANDIDATES
    from syncopate.ops.fused_gemm import fused_config

    specialised = [c for c in CANDIDATES if c.warp_specialize]
    assert specialised, "no candidate config asks for warp specialisation: nothing to check"
    for config in specialised:
        assert fused_config(config, (9, 0)).warp_specialize == (config.num_warps >= 8), config
        assert fused_config(config).warp_specialize == (config.num_warps >= 8), config
        assert not fused_config(config, (10, 0)).warp_specialize, config
        assert not fused_config(config, (12, 0)).warp_specialize, config


def test_the_notify_reads_the_row_loaded_for_the_tile_it_waited_on(rows):
    """In the compiled fused loop, the row each notify reads was loaded beside the tile's wait from
    the tile that wait waited on, not carried from an earlier iteration: Triton's loop fusion hands
    the epilogue a tile-loop variable as the same tile's prologue left it, so a row carried one
    tile ahead was the next tile's there (src/transform/placement.cpp). compile_loop_structure.py's
    notify_rows follows the notify's operand back to its load; the GPU test of the same rule is
    tests/gpu/test_transform_gpu.py (each tile of the fused GEMM raises exactly its own slots)."""
    for key in [
        ("gemm_tma_kernel", "transformed", 90, False, 8),
        ("gemm_tma_kernel", "transformed", 90, True, 8),
        ("gemm_tma_kernel", "transformed", 90, True, 4),
        ("gemm_fp8_tma_kernel", "transformed", 90, False, 8),
    ]:
        row = compiled(rows[key])
        assert row["notify_rows"] and set(row["notify_rows"]) == {"waited tile"}, row
    for ws in (False, True):  # sm_100's pipeliner peels the last iteration: its notify is not followed
        row = compiled(rows[("gemm_tma_kernel", "transformed", 100, ws, 8)])
        assert "waited tile" in row["notify_rows"] and "other tile" not in row["notify_rows"], row
    # The form that lost GEMM+RS notifies on the GPU (the row loaded one tile ahead and carried to
    # the notify) is told apart.
    row = compiled(rows[("gemm_tma_kernel", "notify-row-carried", 90, False, 8)])
    assert "other tile" in row["notify_rows"], row
