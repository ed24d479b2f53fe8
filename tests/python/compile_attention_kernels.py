"""Compiles the attention kernel (python/syncopate/kernels/attention.py) and its transformed form
(tests/golden/transform/attention.py: in-loop waits, arrival-order loop) for sm_90 with Triton and
its bundled ptxas, no GPU needed, for test_attention_compile.py:

    python tests/python/compile_attention_kernels.py   # prints one JSON line per variant

Each line: {"kernel": "original"|"transformed", "head_dim", "causal", "ok", "error",
"async_copies"}, for the original at head dim 128 causal and the transformed at 64 (not causal)
and 128 (causal), in the fused ops' configuration (128 x 64 blocks, 8 warps, 3 stages) with the
divisibility Triton's launcher gives arguments that are multiples of 16 (pointers, strides,
lengths). `async_copies` counts the pipelined loads in the TTGIR: the in-loop wait must leave the
K/V loop pipelined as the original's is. Runs in a process whose triton.language no interpreter
run has patched (conftest.py's run_compile_script says why). TRITON_INTERPRET must be unset.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_attention_kernels.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "original": ROOT / "python" / "syncopate" / "kernels" / "attention.py",
    "transformed": ROOT / "tests" / "golden" / "transform" / "attention.py",
}
INT64_POINTERS = {"sy_error"}


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signature(kernel, head_dim, causal):
    sig, constexprs = {}, {}
    meta = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": causal}
    for name in kernel.arg_names:
        if name in meta:
            sig[name] = "constexpr"
            constexprs[name] = meta[name]
        elif name.endswith("_ptr") and not name.startswith("sy_"):
            sig[name] = "*fp16"
        elif name == "sm_scale":
            sig[name] = "fp32"
        elif name.startswith("sy_") and name not in ("sy_tiles_n", "sy_wait_bound_ns", "sy_rank", "sy_blocks"):
            sig[name] = "*i64" if name in INT64_POINTERS else "*i32"
        else:
            sig[name] = "i32"
    return sig, constexprs


def divisible(kernel, sig):
    """Triton's launcher marks an int or pointer argument that is a multiple of 16 (0 included)
    tt.divisibility 16: the pointers, strides and lengths of a real launch."""
    names = ("N_Q", "N_KV", "PIECE")
    return {
        (i,): [["tt.divisibility", 16]]
        for i, name in enumerate(kernel.arg_names)
        if sig[name].startswith("*") or name.startswith("stride_") or name in names
    }


def main() -> int:
    failed = 0
    kernels = {which: load(f"attention_{which}", path).attention_fwd_kernel for which, path in FILES.items()}
    # Three variants keep the test under half a minute on two cores: the original once, the
    # transformed at both head dims, causal and not.
    for which, head_dim, causal in (("original", 128, True), ("transformed", 64, False), ("transformed", 128, True)):
        kernel = kernels[which]
        sig, constexprs = signature(kernel, head_dim, causal)
        row = {"kernel": which, "head_dim": head_dim, "causal": causal, "ok": True, "error": "", "async_copies": 0}
        try:
            compiled = triton.compile(
                ASTSource(kernel, signature=sig, constexprs=constexprs, attrs=divisible(kernel, sig)),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": 8, "num_stages": 3},
            )
            row["async_copies"] = compiled.asm["ttgir"].count("ttg.async_copy_global_to_local")
        except Exception as e:  # reported, the test shows it
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000])
            failed += 1
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
