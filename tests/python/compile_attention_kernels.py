"""Compiles the attention kernel (python/syncopate/kernels/attention.py) and its transformed form
(tests/golden/transform/attention.py: in-loop waits, arrival-order loop) for sm_90 with Triton and
its bundled ptxas, no GPU needed, for test_attention_compile.py:

    python tests/python/compile_attention_kernels.py   # prints one JSON line per variant

Each line: {"kernel": "original"|"transformed", "head_dim", "causal", "waits" (the constexpr
`sy_block_waits`), "maxnreg", "ok", "error", "async_copies", "loop_ops", "registers",
"spilled_bytes"}, for the variants of
VARIANTS, in the fused ops' configuration (128 x 64 blocks, 8 warps, 3 stages) with the
divisibility Triton's launcher gives arguments that are multiples of 16 (pointers, strides,
lengths). `async_copies` counts the pipelined loads in the TTGIR (the in-loop wait must leave the
K/V loop pipelined as the original's is), `loop_ops` the K/V loop's ops by name, `registers` and
`spilled_bytes` what ptxas gave the kernel per thread. Runs in a process whose triton.language no interpreter
run has patched (conftest.py's run_compile_script says why). TRITON_INTERPRET must be unset.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
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


def signature(kernel, head_dim, causal, waits=1):
    sig, constexprs = {}, {}
    meta = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": causal, "sy_block_waits": waits}
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


def loop_ops(ttgir: str) -> dict:
    """Op name -> count inside the K/V loop (the scf.for whose body holds the warp-group dots) of
    a TTGIR listing: two loops with the same counts compile to the same code but for names."""
    lines = ttgir.splitlines()
    for i, line in enumerate(lines):
        if " scf.for " not in line:
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for inner in lines[i + 1 :]:
            if len(inner) - len(inner.lstrip()) == indent and inner.lstrip().startswith("}"):
                break
            body.append(inner)
        if any("ttng.warp_group_dot " in b for b in body):
            ops = {}
            for b in body:
                m = re.match(r'\s*(?:%[^=]*= )?"?([a-z_]+\.[a-z_.]+)', b)
                if m:
                    ops[m.group(1)] = ops.get(m.group(1), 0) + 1
            return ops
    return {}


def registers(cubin: bytes):
    """(registers per thread, bytes of local memory: spills) of the compiled kernel (cuobjdump,
    bundled with Triton's ptxas), or (None, None) when this Triton has no cuobjdump."""
    tool = Path(ptxas_dir()) / "cuobjdump"
    if not tool.exists():
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True).stdout
    regs, local = re.search(r"REG:(\d+)", usage), re.search(r"LOCAL:(\d+)", usage)
    return (int(regs.group(1)) if regs else None), (int(local.group(1)) if local else None)


def ptxas_dir() -> str:
    import triton.backends.nvidia as nvidia

    return str(Path(nvidia.__file__).parent / "bin")


# (kernel, head dim, causal, sy_block_waits, maxnreg): three compiles keep the test near half a
# minute on two cores. Head dim 64 causal is where registers count: over 128 a thread, 8 warps get
# one CTA per SM instead of two (the waiting form has 132 there unless limited, and ran 1.28x the
# original; the fused ops launch it with maxnreg 128).
VARIANTS = (("original", 64, True, 0, 0), ("transformed", 64, True, 0, 0), ("transformed", 64, True, 1, 128))


def main() -> int:
    failed = 0
    kernels = {which: load(f"attention_{which}", path).attention_fwd_kernel for which, path in FILES.items()}
    for which, head_dim, causal, waits, maxnreg in VARIANTS:
        kernel = kernels[which]
        sig, constexprs = signature(kernel, head_dim, causal, waits)
        row = {"kernel": which, "head_dim": head_dim, "causal": causal, "waits": waits, "maxnreg": maxnreg}
        row.update(ok=True, error="")
        try:
            compiled = triton.compile(
                ASTSource(kernel, signature=sig, constexprs=constexprs, attrs=divisible(kernel, sig)),
                target=GPUTarget("cuda", 90, 64),
                options={"num_warps": 8, "num_stages": 3, **({"maxnreg": maxnreg} if maxnreg else {})},
            )
            ttgir = compiled.asm["ttgir"]
            row["async_copies"] = ttgir.count("ttg.async_copy_global_to_local")
            row["loop_ops"] = loop_ops(ttgir)
            row["registers"], row["spilled_bytes"] = registers(compiled.asm["cubin"])
        except Exception as e:  # reported, the test shows it
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000])
            failed += 1
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
