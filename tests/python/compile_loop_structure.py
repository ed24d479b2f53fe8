"""Compiles the shipped persistent GEMMs, untransformed and as the transformer rewrites them, with
Triton's GPU passes (its bundled ptxas; no GPU needed) and compares their loop structure.

    python tests/python/compile_loop_structure.py [kernel:form:sm:ws:warps ...]   # TRITON_INTERPRET unset

For each variant it prints one JSON object per line: the kernel, target, warp specialisation,
whether it compiled (or the pass that failed), and, from the final TTGIR: for every dot-like op
how many scf.for loops enclose it; the pipeliner's buffer depths (the leading dimension of the
multi-buffered shared-memory allocations); whether, in the loop around the dot, the tile's wait
(syl.wait_for_tile's PTX block) comes before the first TMA load; whether warp-specialised
partitions were made, and whether the partition that issues the TMA loads waits first. With
`tl.range(..., flatten=True)` Triton fuses the tile loop and the K loop into one loop, so every
dot sits in exactly one loop; the transformed kernel must keep that. Run by
test_transform_loops.py in a subprocess: real compiles need TRITON_INTERPRET unset when triton is
first imported, and must not share a process with the interpreter's patches.
"""

import json
import os
import re
import sys
import tempfile
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
gemm_fp8_module = importlib.import_module("syncopate.kernels.gemm_fp8")

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


def transformed(module, kernel_name: str, form: str = "transformed"):
    """The kernel as the transformer rewrites it, loaded from a file next to its module's package
    (so relative imports resolve). form "notify-row-carried": with the notify row carried one tile
    ahead instead (bench/wait_variants.py; wrong on a GPU), to show notify_rows tells them apart."""
    path = module.__file__
    source = Path(path).read_text(encoding="utf-8")
    text = _core.transform(source, path, kernel_name).source
    if form == "notify-row-carried":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
        import wait_variants

        text = wait_variants.make_variant(text, "notify row carried")
    out = Path(tempfile.mkdtemp(prefix="syncopate-loops-")) / f"{kernel_name}_{form}.py"
    out.write_text(text, encoding="utf-8")
    name = f"syncopate.kernels._loops_{kernel_name}_{form.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, kernel_name)


WAIT_ASM = "SY_WAIT_SLOT"  # a label of syl.wait_for_tile's PTX block
TMA_LOAD = "ttng.async_tma_copy_global_to_local"


def region_end(lines: list, start: int) -> int:
    """One past the line closing the region opened on lines[start] (braces counted)."""
    depth = 0
    for i in range(start, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        if depth <= 0 and i > start:
            return i + 1
    return len(lines)


def buffer_depths(ttgir: str) -> list:
    """Leading dimensions of the 3-D shared-memory allocations (the pipeliner's stages)."""
    return sorted({int(d) for d in re.findall(r"ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x\d+x\d+x", ttgir)})


def wait_before_first_load(lines: list) -> bool | None:
    """Whether the first tile wait comes before the first TMA load among `lines` (None: either
    is missing)."""
    wait = next((i for i, ln in enumerate(lines) if WAIT_ASM in ln), None)
    load = next((i for i, ln in enumerate(lines) if TMA_LOAD in ln), None)
    return None if wait is None or load is None else wait < load


def wait_order(ttgir: str) -> dict:
    """In the scf.for around the first dot in a loop: does the wait precede the first TMA load? And in
    a warp-specialised kernel, in the partition that issues the TMA loads?"""
    lines = ttgir.splitlines()
    out = {}
    for dot in (i for i, ln in enumerate(lines) if DOT.search(ln)):  # the first dot inside a loop
        loop = max((i for i in range(dot) if "scf.for" in lines[i] and region_end(lines, i) > dot), default=None)
        if loop is not None:
            out["wait_before_loads_in_dot_loop"] = wait_before_first_load(lines[loop : region_end(lines, loop)])
            break
    for i, ln in enumerate(lines):
        if re.match(r"\s*partition\d+\(", ln):
            body = lines[i : region_end(lines, i)]
            if any(TMA_LOAD in b for b in body):
                out["wait_before_loads_in_load_partition"] = wait_before_first_load(body)
    return out


NOTIFY_ASM = "SY_NOTIFY_SLOT"  # a label of syl.notify_tile(_row)'s PTX block
SSA_DEF = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)? = ")
SSA = r"%[\w.$#-]+"


def region_scopes(lines: list) -> list:
    """For each line, the lines opening the regions that enclose it (innermost last)."""
    stack, out = [], []
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("}"):
            if stack:
                stack.pop()
            if s.endswith("{"):  # '} else {': the same op's next region
                stack.append(i)
        out.append(tuple(stack))
        if not s.startswith("}") and s.endswith("{"):
            stack.append(i)
    return out


def ssa_operands(text: str) -> list:
    """The SSA values of `%a, %b#1, ... : types`."""
    return [t.strip() for t in text.split(" : ")[0].split(",") if t.strip().startswith("%")]


def notify_rows(ttgir: str) -> list:
    """For each notify PTX block: where the row it reads ([begin, end) of the notify table) was
    loaded. Its `begin` is followed back through loop-carried values and `scf.if` results to the
    load; "waited tile" when that load reads the notify table at the tile the wait beside it (in
    the same region) waited on. Else "other tile" (e.g. the next tile's: a row carried from the
    previous iteration, which Triton's loop fusion hands the epilogue as the same tile's
    prologue left it), "not beside the wait" (loaded at the store) or why it was not found. A
    structural check of the compiled kernel: the GPU test (tests/gpu/test_transform_gpu.py,
    each tile raising its own slots) is the proof."""
    lines = ttgir.splitlines()
    scope = region_scopes(lines)

    def carried(line: str) -> list:  # (block argument, initial value) of an scf.for
        return re.findall(rf"({SSA}) = ({SSA})", line.split("iter_args(", 1)[1]) if "iter_args(" in line else []

    def visible_def(name: str, use: int):
        base = name.split("#")[0]
        for d in range(use - 1, -1, -1):
            m = SSA_DEF.match(lines[d])
            if m and m.group(1) == base and scope[use][: len(scope[d])] == scope[d]:
                return d
            if d in scope[use] and any(arg == base for arg, _ in carried(lines[d])):
                return d
        return None

    def region_yield(opener: int):
        want = len(lines[opener]) - len(lines[opener].lstrip()) + 2
        for i in range(opener + 1, len(lines)):
            indent = len(lines[i]) - len(lines[i].lstrip())
            if indent < want and lines[i].strip().startswith("}"):
                return None
            if indent == want and lines[i].strip().startswith("scf.yield"):
                return i
        return None

    def trace(name: str, use: int, steps: int = 0):
        d = visible_def(name, use)
        if d is None or steps > 64:
            return d
        args = carried(lines[d]) if d in scope[use] else []
        if any(arg == name for arg, _ in args):  # a loop-carried value: what the body yields
            k = [arg for arg, _ in args].index(name)
            y = region_yield(d)
            value = ssa_operands(lines[y].strip()[len("scf.yield") :])[k]
            return trace(args[k][1], d, steps + 1) if value == name else trace(value, y, steps + 1)
        if " scf.if " in lines[d]:  # what the then-region yields
            t = region_yield(d)
            k = int(name.split("#")[1]) if "#" in name else 0
            return trace(ssa_operands(lines[t].strip()[len("scf.yield") :])[k], t, steps + 1)
        return d

    out = []
    for n, ln in enumerate(lines):
        if NOTIFY_ASM not in ln:
            continue
        load = trace(ssa_operands(ln.split("pure = false} ", 1)[1])[0], n)
        m = re.search(rf"tt\.load ({SSA})", lines[load]) if load is not None else None
        addr = trace(m.group(1), load) if m else None
        m = re.search(rf"tt\.addptr ({SSA}), ({SSA})", lines[addr]) if addr is not None else None
        if not m or m.group(1) != "%sy_notify_offsets":
            out.append("not loaded from the notify table")
            continue
        waits = [w for w, wl in enumerate(lines) if WAIT_ASM in wl and scope[w] == scope[addr]]
        if not waits:
            out.append("not beside the wait")
            continue
        wait = lines[waits[0]]
        tile_in = ssa_operands(wait.split("pure = false} ", 1)[1])[9]  # wait_for_tile(_row)'s tile
        tile_out = SSA_DEF.match(wait).group(1) + "#0"
        out.append("waited tile" if m.group(2) in (tile_in, tile_out) else "other tile")
    return out


def compile_kernel(kernel, pointers, values, capability: int, num_warps: int, num_stages: int) -> str:
    names = [p.name for p in kernel.params]
    signature, constexprs = {}, {}
    for i, name in enumerate(names):
        if name in pointers:  # a tuple of fp16 pointers, or a dict of element types
            signature[name] = "*" + (pointers[name] if isinstance(pointers, dict) else "fp16")
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
# The FP8 kernel is built from gemm.py's helpers (prologue, K loop, C store), imported.
FP8_POINTERS = {"a_ptr": "fp8e4nv", "b_ptr": "fp8e4nv", "c_ptr": "bf16", "scale_a_ptr": "fp32", "scale_b_ptr": "fp32"}
FP8_VALUES = dict(GEMM_VALUES, B_IS_NK=True, BLOCK_K=128)
KERNELS = {
    "gemm_tma_kernel": (gemm_module, ("a_ptr", "b_ptr", "c_ptr"), GEMM_VALUES),
    "gemm_fp8_tma_kernel": (gemm_fp8_module, FP8_POINTERS, FP8_VALUES),
    "gemm_reduce_kernel": (gemm_reduce_module, ("a_ptr", "b_ptr", "c_ptr", "p_ptr", "out_ptr"), REDUCE_VALUES),
}
# (kernel, form, sm, warp_specialize, num_warps): what CI compiles (a few seconds each).
VARIANTS = [
    ("gemm_tma_kernel", "original", 90, False, 8),
    ("gemm_tma_kernel", "transformed", 90, False, 8),
    ("gemm_tma_kernel", "transformed", 90, True, 8),
    ("gemm_tma_kernel", "transformed", 90, True, 4),
    ("gemm_reduce_kernel", "original", 90, False, 8),
    ("gemm_reduce_kernel", "transformed", 90, True, 8),
    ("gemm_tma_kernel", "transformed", 100, False, 8),
    ("gemm_tma_kernel", "original", 100, True, 8),
    ("gemm_tma_kernel", "transformed", 100, True, 8),
    ("gemm_fp8_tma_kernel", "original", 90, False, 8),
    ("gemm_fp8_tma_kernel", "transformed", 90, False, 8),
    ("gemm_tma_kernel", "notify-row-carried", 90, False, 8),
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
        kernel = getattr(module, name) if form == "original" else transformed(module, name, form)
        result, diagnostics = captured_stderr(lambda: compile_kernel(kernel, pointers, values, capability, warps, 3))
        if isinstance(result, Exception):
            row.update(compiled=False, error=failure(result, diagnostics))
        else:
            row.update(
                compiled=True,
                dot_loop_depths=dot_loop_depths(result),
                buffer_depths=buffer_depths(result),
                warp_specialized="ttg.warp_specialize(" in result,
                notify_rows=notify_rows(result),
                **wait_order(result),
            )
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
