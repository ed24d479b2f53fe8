"""Syncopate's Triton device primitives, called by transformed kernels (docs/ANNOTATIONS.md).

    import syncopate.language as syl

    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))        # TileOrder lookup
    pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)
    syl.wait_tile(sy_signals, ..., sy_tile, sy_epoch, ...)          # before the first read
    syl.notify_tile(sy_signals, sy_notify_offsets, sy_notify_slots, sy_tile)   # after the store

Signals are int32 slots in the symmetric heap; call `epoch` (1, 2, ...) of a plan waits for
`slot >= epoch * writers`, so nothing resets them between calls. The epoch is not a kernel
argument but an int32 in device memory (`sy_epoch` points at it) that each call advances on the
device before the kernel runs, so a launch captured in a CUDA graph waits for the right values
on every replay. Slots and the epoch are int32 and wrap around: a wait compares
`seen - expected >= 0` modulo 2^32 (runtime/epoch.hpp), so there is no limit on calls.
Memory order follows the PTX model: the waiter's loads are `ld.acquire.sys` (every thread of
the program polls, so each thread's later reads are ordered after its own acquire); the notifier
runs a CTA barrier (all of the tile's stores are issued) then one `atom.add.release.sys`.

Every wait is bounded: on the GPU by `%globaltimer` nanoseconds; under TRITON_INTERPRET=1,
where inline assembly cannot run, by a spin count of `bound_ns // INTERPRET_NS_PER_SPIN`. On
expiry the first waiter to notice writes `[1, rank, slot, expected, seen, tile]` into the int64
error record (ERROR_FIELDS), and every other waiter of the launch gives up as soon as it sees the
flag, so the kernel ends within about one bound instead of hanging.

The transformer's output imports this module as `syl` (`import syncopate.language as syl  #
[syncopate]`). `wait_tile` and `notify_tile` are a loop each, kept apart from the tile's K loop
(docs/ANNOTATIONS.md, "Loop structure", says what was measured). `tma_store_wait` is the one
primitive only the transformer places: before the notify of a tile stored through a tensor
descriptor, so a peer never reads a chunk whose TMA stores are still in flight.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from syncopate.settings import env

INTERPRET = env.triton_interpret
_INTERPRET: tl.constexpr = tl.constexpr(INTERPRET)

# Layout of the int64 error record `sy_error` (the launcher zeroes it before each launch).
ERROR_FIELDS = ("flag", "rank", "slot", "expected", "seen", "tile")
ERROR_WORDS = 8

# Under the interpreter one spin of a wait counts as this many nanoseconds of the bound.
INTERPRET_NS_PER_SPIN = 1000
_NS_PER_SPIN: tl.constexpr = tl.constexpr(INTERPRET_NS_PER_SPIN)


@triton.jit
def now_ns():
    """The GPU's global nanosecond timer (not available under the interpreter)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def load_acquire(ptr):
    """One int32 load with acquire semantics at system scope (sees other GPUs and the host)."""
    if _INTERPRET:
        value = tl.atomic_add(ptr, 0, sem="acquire", scope="sys")
    else:
        value = tl.inline_asm_elementwise(
            "ld.global.acquire.sys.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32, is_pure=False, pack=1
        )
    return value


@triton.jit
def fence_proxy_async():
    """Orders this thread's generic-proxy accesses (the acquire of a wait) before its later
    async-proxy ones (TMA loads through tensor descriptors). Hopper and newer; a no-op elsewhere."""
    if _INTERPRET:
        pass
    else:
        if cuda_capability_geq(9, 0):
            tl.inline_asm_elementwise(
                "fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1
            )


# The record as the first waiter to time out writes it on the GPU: every thread that timed out
# claims the flag with its own CAS, and only the winner stores the fields. It must stay free of
# CTA barriers: the threads of a program reach it or not by values each loaded itself (a warp can
# see the flag another program just set while its neighbour already timed out), and a barrier
# that only some warps reach is undefined (it hung a program for good: docs/RUNTIME.md, "Bounded
# waits"). Triton's scalar tl.atomic_cas broadcasts its result through shared memory behind a
# bar.sync, so it is not used here.
_RECORD_TIMEOUT_PTX = tl.constexpr(
    """{
.reg .pred won;
.reg .b64 old, zero, one;
mov.b64 zero, 0;
mov.b64 one, 1;
atom.global.acq_rel.sys.cas.b64 old, [$1], zero, one;
setp.eq.b64 won, old, 0;
@won st.global.b64 [$1+8], $2;
@won st.global.b64 [$1+16], $3;
@won st.global.b64 [$1+24], $4;
@won st.global.b64 [$1+32], $5;
@won st.global.b64 [$1+40], $6;
mov.b32 $0, 0;
}"""
)


@triton.jit
def _record_timeout(error_ptr, rank, slot, expected, seen, tile):
    if _INTERPRET:
        # One thread runs the interpreter: no barrier to diverge on.
        old = tl.atomic_cas(error_ptr, tl.full([], 0, tl.int64), tl.full([], 1, tl.int64), sem="acq_rel", scope="sys")
        if old == 0:
            tl.store(error_ptr + 1, rank)
            tl.store(error_ptr + 2, slot)
            tl.store(error_ptr + 3, expected)
            tl.store(error_ptr + 4, seen)
            tl.store(error_ptr + 5, tile)
    else:
        wide = tl.zeros([], tl.int64)
        tl.inline_asm_elementwise(
            _RECORD_TIMEOUT_PTX,
            "=r,l,l,l,l,l,l",
            [error_ptr, wide + rank, wide + slot, wide + expected, wide + seen, wide + tile],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def wait(signal_ptr, expected, bound_ns, error_ptr, rank, slot, tile):
    """Spins until `*signal_ptr` reaches `expected` (int32, modulo 2^32: seen - expected >= 0)
    or `bound_ns` passes or another waiter timed out.

    Returns 1 if the signal arrived, 0 otherwise (then `error_ptr` holds the record).
    """
    seen = load_acquire(signal_ptr)
    aborted = tl.load(error_ptr, volatile=True)
    if _INTERPRET:
        spins = bound_ns - bound_ns
        limit = bound_ns // _NS_PER_SPIN
        while ((seen - expected) < 0) & (spins < limit) & (aborted == 0):
            seen = load_acquire(signal_ptr)
            aborted = tl.load(error_ptr, volatile=True)
            spins += 1
    else:
        start = now_ns()
        elapsed = start - start
        while ((seen - expected) < 0) & (elapsed < bound_ns) & (aborted == 0):
            seen = load_acquire(signal_ptr)
            aborted = tl.load(error_ptr, volatile=True)
            elapsed = now_ns() - start
    if (seen - expected) < 0:
        if aborted == 0:
            _record_timeout(error_ptr, rank, slot, expected, seen, tile)
    return ((seen - expected) >= 0).to(tl.int32)


@triton.jit
def notify(signal_ptr, value):
    """Makes this program's earlier writes visible, then adds `value` to the signal (release)."""
    tl.debug_barrier()
    tl.atomic_add(signal_ptr, value, sem="release", scope="sys")


@triton.jit
def tile_at(tile_order_ptr, index):
    """The linear tile id at position `index` of the tile order."""
    return tl.load(tile_order_ptr + index)


@triton.jit
def tile_coords(tile, tiles_n):
    """(row, column) of a linear tile id: tiles are numbered row-major, tiles_n per row."""
    return tile // tiles_n, tile % tiles_n


@triton.jit
def tile_row(tile, tiles_n):
    """Row of a linear tile id, for kernels that tile only M."""
    return tile // tiles_n


@triton.jit
def wait_tile(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
):
    """Waits on every landing slot of `tile` (CSR row `tile` of the wait table) for the call
    whose number `epoch_ptr` (int32 in device memory) holds."""
    begin = tl.load(wait_offsets_ptr + tile)
    end = tl.load(wait_offsets_ptr + tile + 1)
    epoch = tl.load(epoch_ptr)
    for i in range(begin, end):
        slot = tl.load(wait_slots_ptr + i)
        expected = epoch * tl.load(slot_writers_ptr + slot)
        wait(signals_ptr + slot, expected, bound_ns, error_ptr, rank, slot, tile)
    fence_proxy_async()


@triton.jit
def notify_tile(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile):
    """Adds 1 to every ready slot of `tile` (CSR row `tile` of the notify table)."""
    begin = tl.load(notify_offsets_ptr + tile)
    end = tl.load(notify_offsets_ptr + tile + 1)
    tl.debug_barrier()
    for i in range(begin, end):
        slot = tl.load(notify_slots_ptr + i)
        tl.atomic_add(signals_ptr + slot, 1, sem="release", scope="sys")


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
                    "cp.async.bulk.wait_group 0; fence.proxy.async.global; mov.u32 $0, 0;",
                    "=r",
                    [],
                    dtype=tl.int32,
                    is_pure=False,
                    pack=1,
                )


@triton.jit
def symm_at(ptr, heap_bases_ptr, from_rank, to_rank):
    """Translates `ptr`, a pointer into `from_rank`'s symmetric heap, to the same offset in
    `to_rank`'s heap. `heap_bases_ptr` holds each rank's heap base address as int64."""
    local_base = tl.load(heap_bases_ptr + from_rank)
    peer_base = tl.load(heap_bases_ptr + to_rank)
    offset = ptr.to(tl.int64) - local_base
    return (peer_base + offset).to(ptr.dtype)


@triton.jit
def put(dst_ptr, src_ptr, num_elements, BLOCK: tl.constexpr):
    """SM-driven copy of `num_elements` contiguous elements by this program, BLOCK at a time.

    `dst_ptr` may point into a peer's heap (see `symm_at`). Follow it with `notify` on the
    destination's signal to announce the data; `notify` orders the copy's stores before it.
    """
    offs = tl.arange(0, BLOCK)
    for start in range(0, num_elements, BLOCK):
        mask = start + offs < num_elements
        tl.store(dst_ptr + start + offs, tl.load(src_ptr + start + offs, mask=mask), mask=mask)


# --- a wait inside a loop over blocks (`@sy.consume_block`, docs/ANNOTATIONS.md "Waiting per block")
#
# wait_block waits on the landing slots of one block: row `key * blocks + block` of the block
# tables (CSR, as the tile tables), for the call whose number the epoch word holds.
# block_in_order renumbers a loop's variable so that `for v in range(start, stop, step)` visits
# the same values from block `first[key]` (a block number `v // step`) downwards, wrapping around
# to the top. The templates land a rank's K/V pieces in the order own piece, rank - 1, rank - 2,
# ... (ring and all-to-all alike), so with `first` the last block of the own piece the loop visits
# the own piece, then each piece as it lands. A first block past the loop's end (causal: the own
# piece reaches beyond the tile's diagonal) starts at the loop's last block; one before its start
# visits the loop downwards from its last block.


@triton.jit
def wait_block(
    signals_ptr,
    block_offsets_ptr,
    block_slots_ptr,
    slot_writers_ptr,
    key,
    block,
    blocks,
    tile,
    epoch_ptr,
    bound_ns,
    rank,
    error_ptr,
):
    """Waits on every landing slot of `block` in table row `key` (CSR row key * blocks + block)."""
    row = key * blocks + block
    begin = tl.load(block_offsets_ptr + row)
    end = tl.load(block_offsets_ptr + row + 1)
    epoch = tl.load(epoch_ptr)
    for i in range(begin, end):
        slot = tl.load(block_slots_ptr + i)
        expected = epoch * tl.load(slot_writers_ptr + slot)
        wait(signals_ptr + slot, expected, bound_ns, error_ptr, rank, slot, tile)
    fence_proxy_async()


@triton.jit
def block_in_order(v, start, stop, step, first_ptr, key):
    """The value of the loop variable that iteration `v` visits: the loop's values from block
    `first_ptr[key]` (clamped into the loop) downwards, wrapping around to the top."""
    count = (stop - start + step - 1) // step
    top = tl.load(first_ptr + key) - start // step
    top = tl.where((top < 0) | (top >= count), count - 1, top)
    position = top - (v - start) // step
    position = tl.where(position < 0, position + count, position)
    return start + position * step
