"""The device primitives a transformed kernel calls, shaped for the places the transformer puts
them (`syncopate transform` imports this module as `syl`; docs/ANNOTATIONS.md).

Everything is syncopate.language's (re-exported here), plus what a call site needs:

- `wait_tile` and `notify_tile` are syncopate.language's loops. A branch-guarded wait and a
  loop-free vector-atomic notify let Triton fuse the flattened tile and K loops (as the
  untransformed kernel does), but the fused transformed GEMM measured 3.4x slower than the
  untransformed one on nvidia-h100-x1 (2026-11-24, bench/bench_wait_overhead.py, 8192^3 and
  2048x8192x3584) against 1.01-1.04x with these loops; so the loops stay apart for now
  (docs/ANNOTATIONS.md, "Loop structure").
- `tma_store_wait` waits until this thread's TMA (bulk asynchronous) stores have landed in
  global memory, when the tile notifies anything; the transformer puts it before the notify of
  a tile stored through a tensor descriptor, so a peer never reads a chunk whose stores are
  still in flight.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from syncopate.language import (  # noqa: F401  (the transformer's output calls them as syl.*)
    ERROR_FIELDS,
    ERROR_WORDS,
    INTERPRET,
    fence_proxy_async,
    notify,
    notify_tile,
    tile_at,
    tile_coords,
    tile_row,
    wait,
    wait_tile,
)

_INTERPRET: tl.constexpr = tl.constexpr(INTERPRET)

@triton.jit
def tma_store_wait(notify_offsets_ptr, tile):
    """When `tile` notifies anything: waits until every TMA store this thread issued has
    completed its writes to global memory (`cp.async.bulk.wait_group 0`, not the `.read` form
    Triton uses to reuse shared memory), then orders them before this thread's later
    generic-proxy accesses. A tile that notifies nothing (a consumer's) does not wait, so its
    stores keep overlapping the next tile. Hopper and newer; a no-op elsewhere and under the
    interpreter (whose stores are synchronous)."""
    if _INTERPRET:
        pass
    else:
        if cuda_capability_geq(9, 0):
            if tl.load(notify_offsets_ptr + tile + 1) > tl.load(notify_offsets_ptr + tile):
                tl.inline_asm_elementwise(
                    "cp.async.bulk.wait_group 0; fence.proxy.async.global; mov.u32 $0, 0;", "=r", [],
                    dtype=tl.int32, is_pure=False, pack=1)
