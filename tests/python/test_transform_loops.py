"""The transformed persistent GEMMs keep their loop structure under Triton's GPU passes.

compile_loop_structure.py compiles the shipped kernels (their tile loop is
`tl.range(..., flatten=True, warp_specialize=WARP_SPECIALIZE)`) for sm_90 and sm_100 with Triton's
passes and bundled ptxas, untransformed and transformed, in a subprocess with TRITON_INTERPRET
unset (a real compile must not share a process with the interpreter's patches of
triton.language). Fused tile and K loops put every dot in exactly one scf.for; unfused, the dot
sits in the K loop inside the tile loop (two).

Warp specialisation on sm_100 does not compile for a transformed consumer with Triton 3.6, and
no placement of today's wait fixes it correctly (docs/ANNOTATIONS.md, "Loop structure"): the test
pins that state so that a Triton that lifts it is noticed.
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


def test_sm90_flattened_loops_fuse_in_the_transformed_kernel_as_in_the_original(rows):
    for kernel in ("gemm_tma_kernel", "gemm_reduce_kernel"):
        original = rows[(kernel, "original", 90, False, 8)]
        assert original["compiled"] and original["dot_loop_depths"] == [1], original
    # The GEMM's wait sits before its K loop, gemm_reduce's after it (in the epilogue).
    for key in [("gemm_tma_kernel", "transformed", 90, False, 8), ("gemm_reduce_kernel", "transformed", 90, True, 8)]:
        row = rows[key]
        assert row["compiled"], row
        assert row["dot_loop_depths"] == [1], f"the transformed tile and K loops did not fuse: {row}"


def test_the_plain_wait_and_notify_loops_would_break_the_fusion(rows):
    # What the check measures, shown failing: language.py's wait_tile/notify_tile loops in the
    # tile loop's body next to the K loop keep the K loop nested (Triton fuses one inner loop).
    row = rows[("gemm_tma_kernel", "transformed-language", 90, False, 8)]
    assert row["compiled"] and row["dot_loop_depths"] == [2], row


def test_sm90_warp_specialisation_compiles_with_eight_and_four_warps(rows):
    for warps in (8, 4):
        row = rows[("gemm_tma_kernel", "transformed", 90, True, warps)]
        assert row["compiled"] and row["dot_loop_depths"] == [1], row


def test_sm100_transformed_kernel_fuses_without_warp_specialisation(rows):
    row = rows[("gemm_tma_kernel", "transformed", 100, False, 8)]
    assert row["compiled"] and max(row["dot_loop_depths"]) == 1, row


def test_sm100_warp_specialisation_of_a_transformed_consumer_is_refused_by_triton_3_6(rows):
    original = rows[("gemm_tma_kernel", "original", 100, True, 8)]
    assert original["compiled"] and original["warp_specialized"], original
    transformed = rows[("gemm_tma_kernel", "transformed", 100, True, 8)]
    # Triton 3.6's partitioner cannot place a bounded spin loop (or the branch around it) inside
    # the warp-specialised loop; a loop-free (inline-asm) wait compiles but lands in the default
    # partition only, so the TMA loads would not wait. When this starts compiling, check where
    # the wait lands before using it (docs/ANNOTATIONS.md, "Loop structure").
    assert not transformed["compiled"], transformed
    assert transformed["error"] in ("TritonGPUPartitionScheduling", "NVWSInsertAref"), transformed
