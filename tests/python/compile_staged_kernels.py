"""Compiles the staged GEMM+RS kernel (kernels/gemm_reduce.py as the transformer rewrites it) for
sm_90 with Triton and its bundled ptxas: no GPU needed.

    python tests/python/compile_staged_kernels.py     # prints OK/FAIL per variant, exit 1 on a FAIL

The variants GemmRs(reduce="epilogue") launches that differ in what the GPU passes see: each
candidate GEMM config after ops.fused_gemm.fused_config with 2 staging slots (world 2), and the
default (warp-specialised) config with an nk B and with 4 slots (the unrolled slot loop). Triton's interpreter runs none of the GPU passes
(warp specialisation, pipelining of the flattened persistent loop with a wait after the K loop),
so this is what catches a kernel those passes cannot compile. Run by test_ops_staged.py in a
subprocess (TRITON_INTERPRET must be unset when triton is imported).
"""

import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_staged_kernels.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

from compile_fused_kernels import compile_each, compile_for_sm90  # noqa: E402
from syncopate.kernels.configs import CANDIDATES  # noqa: E402
from syncopate.ops.fused_gemm import fused_config, transformed_kernel  # noqa: E402
from syncopate.ops.staged_gemm import STAGED_KERNEL, STAGED_MODULE  # noqa: E402

POINTERS = ("a_ptr", "b_ptr", "c_ptr", "p_ptr", "out_ptr")


def compile_variant(config, b_is_nk, slots, dtype="bf16"):
    values = dict(
        NUM_SLOTS=slots,
        B_IS_NK=b_is_nk,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
        WARP_SPECIALIZE=config.warp_specialize,
        FLATTEN=config.flatten,
    )
    kernel = transformed_kernel(STAGED_KERNEL, STAGED_MODULE)
    unknown = set(values) - {p.name for p in kernel.params}
    if unknown:
        raise RuntimeError(f"{STAGED_KERNEL} has no parameters {sorted(unknown)}")
    compile_for_sm90(kernel, POINTERS, values, config, dtype)


def variants():
    # Every config with a row-major B; the default config also with an nk B and with more slots.
    # (All 3 configs x both layouts x slots 2, 4, 8 compiled on 2026-11-22; this keeps CI short.)
    configs = [fused_config(c) for c in CANDIDATES]
    for config in configs:
        yield config, False, 2
    yield configs[0], True, 2
    yield configs[0], False, 4


def main() -> int:
    return compile_each(
        (
            f"{STAGED_KERNEL} {config.name} b={'nk' if b_is_nk else 'kn'} slots={slots}",
            lambda c=config, b=b_is_nk, s=slots: compile_variant(c, b, s),
        )
        for config, b_is_nk, slots in variants()
    )


if __name__ == "__main__":
    sys.exit(main())
