"""The device primitives a transformed kernel calls, shaped for the places the transformer puts
them (`syncopate transform` imports this module as `syl`; docs/ANNOTATIONS.md).

Everything is syncopate.language's (re-exported here), except where a call site needs more:

- `wait_tile` skips its wait loop when the tile waits on nothing. The check is a branch around
  the loop, so the loop sits inside an `scf.if` and Triton's loop fusion (`tl.range(...,
  flatten=True)`) still sees one inner loop, the K loop, in the tile loop's body, not two.
- `notify_tile` adds 1 to every ready slot of the tile with one masked vector atomic instead of
  a loop: a loop after the K loop is a second inner loop (no fusion), and inside a branch it
  stops Triton 3.6's fusion pass (a verifier error in TritonGPUFuseNestedLoops).
  A tile may notify at most MAX_TILE_NOTIFIES slots; `syncopate.launch` checks the tables.
- `tma_store_wait` waits until this thread's TMA (bulk asynchronous) stores have landed in
  global memory, when the tile notifies anything; the transformer puts it before the notify of
  a tile stored through a tensor descriptor, so a peer never reads a chunk whose stores are
  still in flight.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from syncopate import language as _language
from syncopate.language import (  # noqa: F401  (the transformer's output calls them as syl.*)
    ERROR_FIELDS,
    ERROR_WORDS,
    INTERPRET,
    fence_proxy_async,
    notify,
    tile_at,
    tile_coords,
    tile_row,
    wait,
)

_INTERPRET: tl.constexpr = tl.constexpr(INTERPRET)

# Ready slots one tile may notify (lowering gives a tile one per chunk its box overlaps).
MAX_TILE_NOTIFIES = 32
_NOTIFY_WIDTH: tl.constexpr = tl.constexpr(MAX_TILE_NOTIFIES)


@triton.jit
def wait_tile(signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch,
              bound_ns, rank, error_ptr):
    """syncopate.language.wait_tile, entered only when the tile has something to wait on."""
    if tl.load(wait_offsets_ptr + tile + 1) > tl.load(wait_offsets_ptr + tile):
        _language.wait_tile(signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile,
                            epoch, bound_ns, rank, error_ptr)


@triton.jit
def notify_tile(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile):
    """Adds 1 to every ready slot of `tile` (CSR row `tile` of the notify table), without a loop:
    a CTA barrier (all of the tile's stores are issued), then one release atomic per slot."""
    begin = tl.load(notify_offsets_ptr + tile)
    end = tl.load(notify_offsets_ptr + tile + 1)
    tl.debug_barrier()
    index = begin + tl.arange(0, _NOTIFY_WIDTH)
    mask = index < end
    slots = tl.load(notify_slots_ptr + index, mask=mask, other=0)
    tl.atomic_add(signals_ptr + slots, 1, mask=mask, sem="release", scope="sys")


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
