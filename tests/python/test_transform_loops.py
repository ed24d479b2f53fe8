"""The transformed persistent GEMMs keep their loop structure under Triton's GPU passes.

compile_loop_structure.py compiles the shipped kernels (their tile loop is
`tl.range(..., flatten=True, warp_specialize=WARP_SPECIALIZE)`) for sm_90 and sm_100 with Triton's
passes and bundled ptxas, untransformed and transformed, in a subprocess with TRITON_INTERPRET
unset (a real compile must not share a process with the interpreter's patches of
triton.language). Fused tile and K loops put every dot in exactly one scf.for; unfused, the dot
sits in the K loop inside the tile loop (two).

What holds today (pinned, so that a change is noticed): the originals fuse; the transformed
kernels keep the tile loop and the K loop apart, because the per-tile wait and notify loops sit
in the tile loop's body. A branch-guarded wait and a loop-free notify did make them fuse, but
that fused transformed GEMM measured 3.4x slower than the untransformed one on nvidia-h100-x1
(2026-11-24), against 1.01-1.04x with the loops apart (docs/ANNOTATIONS.md, "Loop structure").
Warp specialisation of a transformed kernel compiles on sm_90 with 8 warps, not with 4 (the ops
turn it off there, ops/fused_gemm.py fused_config), and not on sm_100 with Triton 3.6.
"""

import json
import os
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
    assert len(out) == 10, done.stdout
    return {(r["kernel"], r["form"], r["sm"], r["warp_specialize"], r["num_warps"]): r for r in out}


def test_sm90_originals_fuse_and_the_transformed_kernels_keep_their_loops_apart(rows):
    for kernel in ("gemm_tma_kernel", "gemm_reduce_kernel"):
        original = rows[(kernel, "original", 90, False, 8)]
        assert original["compiled"] and original["dot_loop_depths"] == [1], original
    # The GEMM's wait sits before its K loop, gemm_reduce's after it (in the epilogue).
    for key in [("gemm_tma_kernel", "transformed", 90, False, 8), ("gemm_reduce_kernel", "transformed", 90, True, 8)]:
        row = rows[key]
        assert row["compiled"], row
        assert row["dot_loop_depths"] == [2], f"the transformed loops changed structure: {row}"
    # The transformer's `syl` is syncopate.language's wait/notify loops: the same structure.
    row = rows[("gemm_tma_kernel", "transformed-language", 90, False, 8)]
    assert row["compiled"] and row["dot_loop_depths"] == [2], row


def test_sm90_warp_specialisation_compiles_with_eight_warps_not_four(rows):
    row = rows[("gemm_tma_kernel", "transformed", 90, True, 8)]
    assert row["compiled"] and row["dot_loop_depths"] == [2], row
    row = rows[("gemm_tma_kernel", "transformed", 90, True, 4)]
    assert not row["compiled"] and row["error"] == "NVGPUWarpSpecialization", row


def test_sm100_transformed_kernel_compiles_without_warp_specialisation(rows):
    row = rows[("gemm_tma_kernel", "transformed", 100, False, 8)]
    assert row["compiled"] and max(row["dot_loop_depths"]) == 2, row


def test_sm100_warp_specialisation_of_a_transformed_consumer_is_refused_by_triton_3_6(rows):
    original = rows[("gemm_tma_kernel", "original", 100, True, 8)]
    assert original["compiled"] and original["warp_specialized"], original
    transformed = rows[("gemm_tma_kernel", "transformed", 100, True, 8)]
    # Triton 3.6's partitioner cannot place a bounded spin loop inside the warp-specialised loop;
    # a loop-free (inline-asm) wait compiles but lands in the default partition only, so the TMA
    # loads would not wait. When this starts compiling, check where the wait lands before using
    # it (docs/ANNOTATIONS.md, "Loop structure").
    assert not transformed["compiled"], transformed
    assert transformed["error"] in ("TritonGPUPartitionScheduling", "NVWSInsertAref"), transformed


def test_the_ops_fused_config_leaves_warp_specialisation_where_it_compiles():
    """What the two tests above found, as the ops apply it (ops/fused_gemm.py fused_config): on
    sm_90 warp specialisation stays for 8-warp configs and goes for 4-warp ones; on sm_100 and
    later it goes for every config."""
    from syncopate.kernels.configs import CANDIDATES
    from syncopate.ops.fused_gemm import fused_config

    specialised = [c for c in CANDIDATES if c.warp_specialize]
    assert specialised, "no candidate config asks for warp specialisation: nothing to check"
    for config in specialised:
        assert fused_config(config, (9, 0)).warp_specialize == (config.num_warps >= 8), config
        assert fused_config(config).warp_specialize == (config.num_warps >= 8), config
        assert not fused_config(config, (10, 0)).warp_specialize, config
        assert not fused_config(config, (12, 0)).warp_specialize, config
