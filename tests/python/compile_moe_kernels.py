"""Compiles the MoE grouped GEMM (kernels/moe_gemm.py) for sm_90 with Triton and its bundled
ptxas: no GPU needed.

    python tests/python/compile_moe_kernels.py [--all]   # prints OK/FAIL per variant, exit 1 on a FAIL

The variants the fused dispatch and the fused combine launch (ops/moe_fused.py grouped_config:
128-row and 64-row tiles), transformed, with TMA loads and with pointer loads; --all adds the
original kernels and bench/bench_moe.py's sweep configs. Then the capacity-slot path's row
kernels (kernels/moe_rows.py). The interpreter runs none of Triton's GPU passes, so this is
what catches a variant the pipeliner or the TMA lowering cannot compile before any GPU time is
spent. Run by test_moe_gemm_interpret.py in a subprocess (TRITON_INTERPRET must be unset).
"""

import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_moe_kernels.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from compile_fused_kernels import ADDED  # noqa: E402
from syncopate.kernels import moe_gemm  # noqa: E402
from syncopate.ops import moe_fused  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
POINTERS = {"a_ptr": "bf16", "w_ptr": "bf16", "c_ptr": "bf16", "counts_ptr": "i32"}


def compile_variant(kernel, config, use_tma):
    names = [p.name for p in kernel.params]
    values = dict(
        NUM_PROGS=124,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
        USE_TMA=use_tma,
    )
    signature, constexprs = {}, {}
    for i, name in enumerate(names):
        if name in POINTERS:
            signature[name] = "*" + POINTERS[name]
        elif name in ADDED:
            signature[name] = ADDED[name]
        elif name in values:
            signature[name] = "constexpr"
            constexprs[(i,)] = values[name]
        else:
            signature[name] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(names) if signature[name].startswith("*")}
    triton.compile(
        ASTSource(kernel, signature, constexprs, attrs),
        target=TARGET,
        options=dict(num_warps=config.num_warps, num_stages=config.num_stages),
    )


def variants(everything):
    configs = [moe_fused.grouped_config(128), moe_fused.grouped_config(64)]
    # One transformed kernel serves the dispatch (waits bound) and the combine (notifies bound).
    kernels = [("transformed", moe_fused.transformed_kernel())]
    if everything:
        configs += [
            moe_fused.GroupedConfig(128, 256, 64, 8, 3),
            moe_fused.GroupedConfig(128, 128, 64, 8, 3),
            moe_fused.GroupedConfig(128, 128, 64, 4, 4),
        ]
        kernels += [("original", moe_gemm.moe_grouped_gemm)]
    for label, kernel in kernels:
        for config in configs:
            for use_tma in (True, False):
                yield label, kernel, config, use_tma


def compile_row_kernels():
    """kernels/moe_rows.py (the capacity-slot path's packing and weighted combine), bf16 rows,
    int64 places, as ops/moe_slots.py launches them (BLOCK_H 1024, top-2 and top-8)."""
    from syncopate.kernels import moe_rows

    out = []
    pack = {"x_ptr": "*bf16", "dest_ptr": "*i64", "send_ptr": "*bf16", "recv_ptr": "*bf16"}
    comb = {"y_send_ptr": "*bf16", "y_recv_ptr": "*bf16", "dest_ptr": "*i64", "w_ptr": "*bf16", "out_ptr": "*bf16"}
    for label, kernel, pointers, consts in (
        ("pack_rows", moe_rows.pack_rows_kernel, pack, {"BLOCK_H": 1024}),
        ("combine_rows top2", moe_rows.combine_rows_kernel, comb, {"BLOCK_H": 1024, "TOP_K": 2}),
        ("combine_rows top8", moe_rows.combine_rows_kernel, comb, {"BLOCK_H": 1024, "TOP_K": 8}),
    ):
        names = [p.name for p in kernel.params]
        signature, constexprs = {}, {}
        for i, name in enumerate(names):
            if name in consts:
                signature[name] = "constexpr"
                constexprs[(i,)] = consts[name]
            else:
                signature[name] = pointers.get(name, "i32")
        out.append(
            (label, lambda k=kernel, s=signature, c=constexprs: triton.compile(ASTSource(k, s, c), target=TARGET))
        )
    return out


def main():
    failed = 0
    jobs = [
        (
            f"{label} {config.name} {'tma' if use_tma else 'pointer'}",
            lambda a=(kernel, config, use_tma): compile_variant(*a),
        )
        for label, kernel, config, use_tma in variants("--all" in sys.argv)
    ]
    for name, job in jobs + compile_row_kernels():
        try:
            job()
            print(f"OK {name}", flush=True)
        except Exception as exc:  # report every variant
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
