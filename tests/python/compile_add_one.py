"""Compiles a small kernel for sm_90 with Triton and its bundled ptxas (no GPU needed) and prints
where Triton put the result, for test_kernel_level.py's padded-kernel tests:

    python tests/python/compile_add_one.py    # prints {"hash": ..., "metadata_group": {file: path}}

The test rebuilds the CompiledKernel from those files (triton.compiler.CompiledKernel), so the
compile itself happens here, in a process whose triton.language no interpreter run has patched
(conftest.py's run_compile_script says why). TRITON_INTERPRET must be unset.
"""

import json
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_add_one.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def main() -> int:
    src = ASTSource(add_one, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    print(json.dumps({"hash": compiled.hash, "metadata_group": compiled.metadata_group}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
