"""Compiles the ops' fused kernels for sm_90 with Triton and its bundled ptxas: no GPU needed.

    python tests/python/compile_fused_kernels.py        # prints OK/FAIL per variant, exit 1 on a FAIL

Every variant a context can launch: gemm_tma_kernel (as the transformer rewrites it) for every
candidate GEMM config after ops.fused_gemm.fused_config, both B layouts, consumer and producer
(C_STORE_POINTERS); gemm_pointer_kernel for every config and layout. The Triton interpreter runs
none of Triton's GPU passes, so this is what catches a transformed kernel that a pass (warp
specialisation, pipelining) cannot compile, before any GPU time is spent. Run by
test_ops_fused.py in a subprocess (this needs TRITON_INTERPRET unset when triton is imported).
"""

import dataclasses
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_fused_kernels.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from syncopate.kernels.configs import CANDIDATES  # noqa: E402
from syncopate.ops.fused_gemm import (
    FP8_KERNEL,
    FP8_MODULE,
    POINTER_KERNEL,
    TMA_KERNEL,
    fused_config,  # noqa: E402
    transformed_kernel,
)

TARGET = GPUTarget("cuda", 90, 32)
# Types of the parameters the transformer adds (docs/ANNOTATIONS.md); the bound is int64 ns.
ADDED = {
    "sy_signals": "*i32",
    "sy_tile_order": "*i32",
    "sy_tiles_n": "i32",
    "sy_wait_offsets": "*i32",
    "sy_wait_slots": "*i32",
    "sy_notify_offsets": "*i32",
    "sy_notify_slots": "*i32",
    "sy_slot_writers": "*i32",
    "sy_epoch": "*i32",
    "sy_wait_bound_ns": "i64",
    "sy_rank": "i32",
    "sy_error": "*i64",
}


def compile_for_sm90(kernel, pointers, values, config, dtype="bf16"):
    """Compiles a transformed kernel: `pointers` are its data pointers (of `dtype`, or a dict of
    pointer name -> element type), `values` its constexprs, the transformer's parameters typed as
    ADDED, every other parameter i32."""
    names = [p.name for p in kernel.params]
    signature, constexprs = {}, {}
    for i, name in enumerate(names):
        if isinstance(pointers, dict) and name in pointers:
            signature[name] = "*" + pointers[name]
        elif name in pointers:
            signature[name] = "*" + dtype
        elif name in ADDED:
            signature[name] = ADDED[name]
        elif name in values:
            signature[name] = "constexpr"
            constexprs[(i,)] = values[name]
        else:  # M, N, K, strides, num_programs, shard offsets, ...
            signature[name] = "i32"
    # As launches specialise them: every pointer 16-byte aligned (the contexts require it).
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(names) if signature[name].startswith("*")}
    triton.compile(
        ASTSource(kernel, signature, constexprs, attrs),
        target=TARGET,
        options=dict(num_warps=config.num_warps, num_stages=config.num_stages),
    )


def compile_variant(kernel_name, config, b_is_nk, producer, dtype="bf16"):
    values = dict(
        B_IS_NK=b_is_nk,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
        EPILOGUE_SPLIT=config.epilogue_split,
        WARP_SPECIALIZE=config.warp_specialize,
        FLATTEN=config.flatten,
        C_STORE_POINTERS=producer,
    )
    compile_for_sm90(transformed_kernel(kernel_name), ("a_ptr", "b_ptr", "c_ptr"), values, config, dtype)


def compile_fp8_variant(config, b_is_nk, producer):
    """The transformed FP8 kernel (kernels/gemm_fp8.py): e4m3 A and B, fp32 scales, bf16 C."""
    values = dict(
        B_IS_NK=b_is_nk,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
        EPILOGUE_SPLIT=config.epilogue_split,
        WARP_SPECIALIZE=config.warp_specialize,
        FLATTEN=config.flatten,
        C_STORE_POINTERS=producer,
    )
    pointers = {"a_ptr": "fp8e4nv", "b_ptr": "fp8e4nv", "c_ptr": "bf16", "scale_a_ptr": "fp32", "scale_b_ptr": "fp32"}
    compile_for_sm90(transformed_kernel(FP8_KERNEL, FP8_MODULE), pointers, values, config)


def variants():
    for config in (fused_config(c) for c in CANDIDATES):
        for b_is_nk in (False, True):
            for producer in (False, True):
                yield TMA_KERNEL, config, b_is_nk, producer
            yield POINTER_KERNEL, config, b_is_nk, False
    # FP8 (BLOCK_K doubled, as select_fp8_config makes it): the big block and the 4-warp one.
    for config in (
        fused_config(dataclasses.replace(c, block_k=2 * c.block_k))
        for c in CANDIDATES
        if (c.block_m, c.block_n) in ((128, 256), (64, 128))
    ):
        for b_is_nk in (False, True):
            for producer in (False, True):
                yield FP8_KERNEL, config, b_is_nk, producer


def compile_each(jobs) -> int:
    """Runs every (description, compile thunk) job, printing OK/FAIL per job (a failure does not
    stop the others); 1 if any failed."""
    failed = 0
    for what, compile_it in jobs:
        try:
            compile_it()
            print(f"OK {what}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report every variant
            failed += 1
            print(f"FAIL {what}: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}", flush=True)
    return 1 if failed else 0


def main() -> int:
    return compile_each(
        (
            f"{kernel_name} {config.name} b={'nk' if b_is_nk else 'kn'} producer={producer}",
            lambda k=kernel_name, c=config, b=b_is_nk, p=producer: compile_fp8_variant(c, b, p)
            if k == FP8_KERNEL
            else compile_variant(k, c, b, p),
        )
        for kernel_name, config, b_is_nk, producer in variants()
    )


if __name__ == "__main__":
    sys.exit(main())
