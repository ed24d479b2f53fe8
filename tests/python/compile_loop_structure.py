"""Compiles the shipped persistent GEMMs, untransformed and as the transformer rewrites them, with
Triton's GPU passes (its bundled ptxas; no GPU needed) and compares their loop structure.

    python tests/python/compile_loop_structure.py [kernel:form:sm:ws:warps ...]   # TRITON_INTERPRET unset

For each variant it prints one JSON object per line: the kernel, target, warp specialisation,
whether it compiled (or the pass that failed), and for every dot-like op of the final TTGIR how
many scf.for loops enclose it. With `tl.range(..., flatten=True)` Triton fuses the tile loop and
the K loop into one loop, so every dot sits in exactly one loop; the transformed kernel must keep
that. Run by test_transform_loops.py in a subprocess: real compiles need TRITON_INTERPRET unset
when triton is first imported, and must not share a process with the interpreter's patches.
"""

import json
import os
import re
import sys
import tempfile
import types
import importlib
import importlib.util
from pathlib import Path

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_loop_structure.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from syncopate import _core  # noqa: E402

# By module path: the package syncopate.kernels re-exports functions named like its modules.
gemm_module = importlib.import_module("syncopate.kernels.gemm")
gemm_reduce_module = importlib.import_module("syncopate.kernels.gemm_reduce")

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
DOT = re.compile(r"\b(tt\.dot|ttng\.warp_group_dot|ttng\.tc_gen5_mma)\b")


def dot_loop_depths(ttgir: str) -> list:
    """For each dot-like op of a TTGIR module: the number of scf.for ops enclosing it."""
    stack, depths = [], []
    for line in ttgir.splitlines():
        s = line.strip()
        if s.startswith("}"):
            if not s.endswith("{"):  # '} else {', '} do {': the same op's next region
                stack.pop()
            continue
        if DOT.search(s):
            depths.append(stack.count("scf.for"))
        if s.endswith("{"):
            m = re.search(r"\b(scf\.for|scf\.while|scf\.if)\b", s)
            stack.append(m.group(1) if m else "other")
    return depths


def transformed(module, kernel_name: str, plain_loops: bool = False):
    """The kernel as the transformer rewrites it, loaded from a file next to its module's package
    (so relative imports resolve). plain_loops: its `syl` calls syncopate.language's wait_tile and
    notify_tile (a loop each; the transformer's output imports the same module)."""
    path = module.__file__
    source = Path(path).read_text(encoding="utf-8")
    text = _core.transform(source, path, kernel_name).source
    out = Path(tempfile.mkdtemp(prefix="syncopate-loops-")) / f"{kernel_name}_transformed.py"
    out.write_text(text, encoding="utf-8")
    name = f"syncopate.kernels._loops_{kernel_name}{'_plain' if plain_loops else ''}"
    spec = importlib.util.spec_from_file_location(name, out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    if plain_loops:
        import syncopate.language as language

        plain = types.ModuleType("syncopate_plain_loops")
        plain.__dict__.update({k: v for k, v in vars(language).items() if not k.startswith("__")})
        plain.wait_tile, plain.notify_tile = language.wait_tile, language.notify_tile
        mod.syl = plain
    return getattr(mod, kernel_name)


def compile_kernel(kernel, pointers, values, capability: int, num_warps: int, num_stages: int) -> str:
    names = [p.name for p in kernel.params]
    signature, constexprs = {}, {}
    for i, name in enumerate(names):
        if name in pointers:
            signature[name] = "*fp16"
        elif name in ADDED:
            signature[name] = ADDED[name]
        elif name in values:
            signature[name] = "constexpr"
            constexprs[(i,)] = values[name]
        else:
            signature[name] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if signature[n].startswith("*")}
    compiled = triton.compile(
        ASTSource(kernel, signature, constexprs, attrs),
        target=GPUTarget("cuda", capability, 32),
        options=dict(num_warps=num_warps, num_stages=num_stages),
    )
    return compiled.asm["ttgir"]


GEMM_VALUES = dict(
    B_IS_NK=False,
    BLOCK_M=128,
    BLOCK_N=256,
    BLOCK_K=64,
    GROUP_M=8,
    EPILOGUE_SPLIT=2,
    FLATTEN=True,
    C_STORE_POINTERS=False,
)
REDUCE_VALUES = dict(NUM_SLOTS=4, B_IS_NK=False, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, FLATTEN=True)
KERNELS = {
    "gemm_tma_kernel": (gemm_module, ("a_ptr", "b_ptr", "c_ptr"), GEMM_VALUES),
    "gemm_reduce_kernel": (gemm_reduce_module, ("a_ptr", "b_ptr", "c_ptr", "p_ptr", "out_ptr"), REDUCE_VALUES),
}
# (kernel, form, sm, warp_specialize, num_warps): what CI compiles (a few minutes of CPU at most).
VARIANTS = [
    ("gemm_tma_kernel", "original", 90, False, 8),
    ("gemm_tma_kernel", "transformed", 90, False, 8),
    # The same rewrite calling syncopate.language's wait/notify directly (their loops in the
    # tile loop's body): the baseline the sites' shapes exist for.
    ("gemm_tma_kernel", "transformed-language", 90, False, 8),
    ("gemm_tma_kernel", "transformed", 90, True, 8),
    ("gemm_tma_kernel", "transformed", 90, True, 4),
    ("gemm_reduce_kernel", "original", 90, False, 8),
    ("gemm_reduce_kernel", "transformed", 90, True, 8),
    ("gemm_tma_kernel", "transformed", 100, False, 8),
    ("gemm_tma_kernel", "original", 100, True, 8),
    ("gemm_tma_kernel", "transformed", 100, True, 8),
]


def captured_stderr(fn):
    """Runs fn() with file descriptor 2 sent to a temporary file (MLIR writes its diagnostics and
    reproducers there, not into the exception): (result or exception, the text written)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            result = exc
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def failure(exc: Exception, diagnostics: str) -> str:
    """The pass (or tool) that failed, from MLIR's note or the exception."""
    m = re.search(r"Pipeline failed while executing \[(.*?)\]", diagnostics)
    if m:
        passes = re.findall(r"`(\w+)`", m.group(1))
        return passes[-1] if passes else m.group(1)
    text = str(exc)
    if "Register allocation failed" in text or "Register allocation failed" in diagnostics:
        return "ptxas: register allocation failed"
    return f"{type(exc).__name__}: {text.strip().splitlines()[-1] if text.strip() else ''}"


def main(argv) -> int:
    wanted = VARIANTS
    if argv:  # kernel:form:sm:ws:warps, e.g. gemm_tma_kernel:transformed:100:1:8
        wanted = [(k, f, int(sm), ws == "1", int(w)) for k, f, sm, ws, w in (a.split(":") for a in argv)]
    for name, form, capability, ws, warps in wanted:
        module, pointers, values = KERNELS[name]
        values = dict(values, WARP_SPECIALIZE=ws)
        if name == "gemm_tma_kernel" and warps == 4:
            values.update(BLOCK_N=128, EPILOGUE_SPLIT=1)
        row = dict(kernel=name, form=form, sm=capability, warp_specialize=ws, num_warps=warps)
        kernel = (
            getattr(module, name)
            if form == "original"
            else transformed(module, name, plain_loops=form == "transformed-language")
        )
        result, diagnostics = captured_stderr(lambda: compile_kernel(kernel, pointers, values, capability, warps, 3))
        if isinstance(result, Exception):
            row.update(compiled=False, error=failure(result, diagnostics))
        else:
            row.update(
                compiled=True,
                dot_loop_depths=dot_loop_depths(result),
                warp_specialized="ttg.warp_specialize(" in result,
            )
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
