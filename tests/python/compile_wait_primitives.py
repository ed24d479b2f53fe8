"""Compiles syncopate.language's waits for sm_90 and checks that no CTA barrier is in them: no GPU
needed.

    python tests/python/compile_wait_primitives.py    # prints OK/FAIL per primitive, exit 1 on a FAIL

The threads of a program leave a wait's spin loop on values each of them loaded itself (the
signal, the error flag another program may have just set, the clock), so they can disagree on
whether to write the timeout record. A barrier on that path is reached by some warps only, which
is undefined and can stop the program for good: the bounded wait then hangs the kernel. Triton's
scalar atomics broadcast their result through shared memory behind a bar.sync, which is how
`_record_timeout` once hung (docs/RUNTIME.md, "Bounded waits"). Run by test_wait_primitives.py in
a subprocess (TRITON_INTERPRET must be unset when triton is imported).
"""

import os
import re
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_wait_primitives.py: unset TRITON_INTERPRET (the interpreter compiles nothing)")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import syncopate.language as syl  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# Any PTX instruction that synchronises the threads of a CTA.
BARRIER = re.compile(r"^\s*(@%?\w+\s+)?(bar|barrier)(\.cta)?\.(sync|red|arrive)\b", re.MULTILINE)


@triton.jit
def one_wait(signal, error, bound_ns, out, expected, rank, slot, tile):
    tl.store(out, syl.wait(signal, expected, bound_ns, error, rank, slot, tile))


@triton.jit
def tile_wait(signals, offsets, slots, writers, epoch, bound_ns, rank, error, out):
    tile = tl.program_id(0)
    syl.wait_tile(signals, offsets, slots, writers, tile, epoch, bound_ns, rank, error)
    tl.store(out + tile, tile)


@triton.jit
def block_wait(signals, offsets, slots, writers, epoch, bound_ns, rank, error, out, blocks):
    tile = tl.program_id(0)
    for block in range(0, blocks):
        syl.wait_block(signals, offsets, slots, writers, tile, block, blocks, tile, epoch, bound_ns, rank, error)
    tl.store(out + tile, tile)


@triton.jit
def block_wait_for(signals, offsets, slots, writers, epoch, bound_ns, rank, error, out, blocks):
    tile = tl.program_id(0)
    total = 0
    seen = syl.no_slot_seen()
    for block in range(0, blocks):
        block, seen = syl.wait_for_block(
            signals,
            offsets,
            slots,
            writers,
            tile,
            block,
            blocks,
            tile,
            epoch,
            bound_ns,
            rank,
            error,
            block,
            blocks > 0,
            seen,
        )
        total += block
    tl.store(out + tile, total)


TABLES = {"signals": "*i32", "offsets": "*i32", "slots": "*i32", "writers": "*i32", "epoch": "*i32"}
KERNELS = [
    (
        "wait",
        one_wait,
        {
            "signal": "*i32",
            "error": "*i64",
            "bound_ns": "i64",
            "out": "*i32",
            "expected": "i32",
            "rank": "i32",
            "slot": "i32",
            "tile": "i32",
        },
    ),
    ("wait_tile", tile_wait, dict(TABLES, bound_ns="i64", rank="i32", error="*i64", out="*i32")),
    ("wait_block", block_wait, dict(TABLES, bound_ns="i64", rank="i32", error="*i64", out="*i32", blocks="i32")),
    (
        "wait_for_block",
        block_wait_for,
        dict(TABLES, bound_ns="i64", rank="i32", error="*i64", out="*i32", blocks="i32"),
    ),
]
# The CAS claiming the timeout record: Triton's spelling (wait) or the PTX blocks' (wait_for_*).
CAS = ("atom.global.acq_rel.sys.cas.b64", "atom.acq_rel.sys.global.cas.b64")


def main() -> int:
    failed = 0
    for name, kernel, signature in KERNELS:
        for warps in (4, 8):
            compiled = triton.compile(
                ASTSource(fn=kernel, signature=signature, constexprs={}), target=TARGET, options={"num_warps": warps}
            )
            ptx = compiled.asm["ptx"]
            found = [m.group(0).strip() for m in BARRIER.finditer(ptx)]
            if "cubin" not in compiled.asm or not any(cas in ptx for cas in CAS):
                print(f"FAIL {name} num_warps={warps}: no cubin, or no CAS claiming the timeout record", flush=True)
                failed += 1
            elif found:
                print(f"FAIL {name} num_warps={warps}: CTA barrier(s) on the wait's path: {found}", flush=True)
                failed += 1
            else:
                print(f"OK {name} num_warps={warps}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
