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
[syncopate]`). Where a tile's wait can go at its tile lookup (nothing but plain statements
between the tile block and the `@sy.consume`), it calls `wait_for_tile`, which returns the tile
id once its chunks have landed: every address computed from the tile then depends on the wait,
so Triton's pipeliner and warp specialiser, which keep data dependences (not the order of side
effects), cannot issue a load of the tile before it. On the GPU the whole wait is one PTX block
and `notify_tile` another, so Triton sees no loop in the tile loop's body: a
`tl.range(..., flatten=True)` tile loop still fuses with its K loop and pipelines
(docs/ANNOTATIONS.md, "Loop structure"). A wait placed later on purpose (after a K loop) stays
`wait_tile` at the `@sy.consume`: a loop, which keeps the loop around it out of the pipeliner.
`tma_store_wait` is the one primitive only the transformer places: before the notify of a tile
stored through a tensor descriptor, so a peer never reads a chunk whose TMA stores are still in
flight.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

from syncopate.settings import env

INTERPRET = env.triton_interpret

# The annotation of the transformer's constexpr parameters (`sy_block_waits: syl.constexpr`): the
# output imports this module as `syl` whatever the kernel's own module calls triton.language.
constexpr = tl.constexpr
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


# wait_for_tile on the GPU: one PTX block, so that Triton sees no loop (see the module's
# docstring). It waits on wait_slots[begin:end], each slot's value >= epoch * writers[slot]
# (modulo 2^32), every thread polling with acquire loads at system scope and each slot bounded
# by bound_ns of %globaltimer. On expiry the first waiter to claim the error record's flag (a
# CAS) writes [1, rank, slot, expected, seen, tile] (ERROR_FIELDS); a waiter that sees the flag
# raised gives up at once. A slot equal to `seen` (the last slot this thread saw complete in
# this launch; slots only grow within a call, so it still is) is not loaded again: tiles in
# arrival order wait on the same slot one after another. After a load, fence.proxy.async
# (sm_90 and newer) orders the wait before the tile's TMA loads. $0 returns the tile ($11) last,
# so everything computed from it follows the wait; $1 the last slot seen complete.
# Operands: $2 begin, $3 end, $4 wait_slots, $5 slot_writers, $6 signals, $7 epoch,
# $8 bound_ns, $9 error record, $10 rank, $11 tile, $12 seen.
_WAIT_FOR_TILE = """{
.reg .pred %sp<8>;
.reg .b32 %si, %sslot, %sw, %sexp, %sseen, %sd;
.reg .b64 %sa, %ssig, %st0, %st1, %sab, %sold, %sv;
mov.b32 $1, $12;
setp.ne.s32 %sp7, 0, 0;
mov.b32 %si, $2;
setp.ge.s32 %sp4, %si, $3;
@%sp4 bra SY_WAIT_END;
SY_WAIT_SLOT:
mul.wide.s32 %sa, %si, 4;
add.s64 %sa, %sa, $4;
ld.global.b32 %sslot, [%sa];
setp.eq.s32 %sp6, %sslot, $12;
@%sp6 bra SY_WAIT_NEXT;
setp.eq.s32 %sp7, 0, 0;
mul.wide.s32 %sa, %sslot, 4;
add.s64 %ssig, %sa, $6;
add.s64 %sa, %sa, $5;
ld.global.b32 %sw, [%sa];
mul.lo.s32 %sexp, %sw, $7;
ld.global.acquire.sys.b32 %sseen, [%ssig];
sub.s32 %sd, %sseen, %sexp;
setp.ge.s32 %sp0, %sd, 0;
@%sp0 mov.b32 $1, %sslot;
@%sp0 bra SY_WAIT_NEXT;
mov.u64 %st0, %globaltimer;
SY_WAIT_SPIN:
ld.global.acquire.sys.b32 %sseen, [%ssig];
sub.s32 %sd, %sseen, %sexp;
setp.ge.s32 %sp0, %sd, 0;
@%sp0 mov.b32 $1, %sslot;
@%sp0 bra SY_WAIT_NEXT;
ld.volatile.global.b64 %sab, [$9];
setp.ne.s64 %sp1, %sab, 0;
@%sp1 bra SY_WAIT_NEXT;
mov.u64 %st1, %globaltimer;
sub.s64 %st1, %st1, %st0;
setp.lt.s64 %sp2, %st1, $8;
@%sp2 bra SY_WAIT_SPIN;
atom.acq_rel.sys.global.cas.b64 %sold, [$9], 0, 1;
setp.ne.s64 %sp3, %sold, 0;
@%sp3 bra SY_WAIT_NEXT;
cvt.s64.s32 %sv, $10;
st.global.b64 [$9+8], %sv;
cvt.s64.s32 %sv, %sslot;
st.global.b64 [$9+16], %sv;
cvt.s64.s32 %sv, %sexp;
st.global.b64 [$9+24], %sv;
cvt.s64.s32 %sv, %sseen;
st.global.b64 [$9+32], %sv;
cvt.s64.s32 %sv, $11;
st.global.b64 [$9+40], %sv;
SY_WAIT_NEXT:
add.s32 %si, %si, 1;
setp.lt.s32 %sp4, %si, $3;
@%sp4 bra SY_WAIT_SLOT;
FENCE
SY_WAIT_END:
mov.b32 $0, $11;
}"""
_WAIT_FOR_TILE_PTX: tl.constexpr = tl.constexpr(_WAIT_FOR_TILE.replace("FENCE\n", ""))
_WAIT_FOR_TILE_PTX_FENCE: tl.constexpr = tl.constexpr(
    _WAIT_FOR_TILE.replace("FENCE", "@%sp7 fence.proxy.async.global;")
)
_WAIT_FOR_TILE_CONSTRAINTS: tl.constexpr = tl.constexpr("=r,=r,r,r,l,l,l,r,l,l,r,r,r")
# wait_for_block on the GPU: the same block over a block's row, returning $13 (the loop variable
# of the visit) instead of the tile, which the error record still names ($11).
_WAIT_FOR_BLOCK = _WAIT_FOR_TILE.replace("mov.b32 $0, $11;", "mov.b32 $0, $13;")
_WAIT_FOR_BLOCK_PTX: tl.constexpr = tl.constexpr(_WAIT_FOR_BLOCK.replace("FENCE\n", ""))
_WAIT_FOR_BLOCK_PTX_FENCE: tl.constexpr = tl.constexpr(
    _WAIT_FOR_BLOCK.replace("FENCE", "@%sp7 fence.proxy.async.global;")
)
_WAIT_FOR_BLOCK_CONSTRAINTS: tl.constexpr = tl.constexpr("=r,=r,r,r,l,l,l,r,l,l,r,r,r,r")

# notify_tile on the GPU: one PTX block. When the tile notifies anything (begin < end, the same
# for every thread), a CTA barrier (every thread's stores of the tile are issued; the barrier is
# CTA-wide, so not for a kernel whose epilogue runs in a warp-specialised partition), then thread
# 0 adds 1 to each of notify_slots[begin:end] with release semantics at system scope.
# Operands: $0 (unused), $1 begin, $2 end, $3 notify_slots, $4 signals.
NOTIFY_TILE_PTX: tl.constexpr = tl.constexpr("""{
.reg .pred %np<3>;
.reg .b32 %ni, %nslot, %nt;
.reg .b64 %na;
mov.b32 $0, 0;
setp.ge.s32 %np0, $1, $2;
@%np0 bra SY_NOTIFY_END;
bar.sync 0;
mov.u32 %nt, %tid.x;
setp.ne.u32 %np1, %nt, 0;
@%np1 bra SY_NOTIFY_END;
mov.b32 %ni, $1;
SY_NOTIFY_SLOT:
mul.wide.s32 %na, %ni, 4;
add.s64 %na, %na, $3;
ld.global.b32 %nslot, [%na];
mul.wide.s32 %na, %nslot, 4;
add.s64 %na, %na, $4;
red.release.sys.global.add.s32 [%na], 1;
add.s32 %ni, %ni, 1;
setp.lt.s32 %np2, %ni, $2;
@%np2 bra SY_NOTIFY_SLOT;
SY_NOTIFY_END:
}""")


@triton.jit
def no_slot_seen():
    """The initial `seen` of wait_for_tile: no slot seen complete yet."""
    return tl.full([], -1, tl.int32)


@triton.jit
def tile_at_or(tile_order_ptr, index, stop, step):
    """tile_at(index) when `index` is an iteration of range(.., stop, step), else 0: the next
    iteration's order entry, loaded one iteration ahead (never past the order's end)."""
    valid = ((step > 0) & (index < stop)) | ((step < 0) & (index > stop))
    return tl.load(tile_order_ptr + index, mask=valid, other=0)


@triton.jit
def wait_for_tile(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr, seen
):
    """wait_tile, returning (`tile`, the last slot seen complete) once the tile's chunks have
    landed. Called at the tile lookup (`sy_tile, sy_seen = syl.wait_for_tile(..., sy_tile, ...,
    sy_seen)`, `sy_seen` starting at no_slot_seen()), so that the tile's coordinates and every
    address computed from them depend on the wait. On the GPU one PTX block (no loop) that skips
    the slot `seen`; under the interpreter wait_tile (`seen` returned as given)."""
    if _INTERPRET:
        wait_tile(
            signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
        )
    else:
        begin = tl.load(wait_offsets_ptr + tile)
        end = tl.load(wait_offsets_ptr + tile + 1)
        epoch = tl.load(epoch_ptr)
        tile, seen = _wait_row_ptx(
            signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
        )
    return tile, seen


@triton.jit
def _wait_row_ptx(
    signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
):
    """The GPU form of wait_for_tile and wait_for_tile_row: one PTX block over the row
    [begin, end) (the fenced variant on Hopper and newer)."""
    operands = [
        begin,
        end,
        wait_slots_ptr,
        slot_writers_ptr,
        signals_ptr,
        epoch,
        bound_ns,
        error_ptr,
        rank,
        tile,
        seen,
    ]
    if cuda_capability_geq(9, 0):
        tile, seen = tl.inline_asm_elementwise(
            _WAIT_FOR_TILE_PTX_FENCE,
            _WAIT_FOR_TILE_CONSTRAINTS,
            operands,
            dtype=(tl.int32, tl.int32),
            is_pure=False,
            pack=1,
        )
    else:
        tile, seen = tl.inline_asm_elementwise(
            _WAIT_FOR_TILE_PTX,
            _WAIT_FOR_TILE_CONSTRAINTS,
            operands,
            dtype=(tl.int32, tl.int32),
            is_pure=False,
            pack=1,
        )
    return tile, seen


@triton.jit
def epoch_of(epoch_ptr):
    """The call's number (the device word `epoch_ptr`), fixed for the whole launch: loaded once
    before a tile loop (`sy_epoch_now = syl.epoch_of(sy_epoch)`) rather than once per tile."""
    return tl.load(epoch_ptr)


@triton.jit
def wait_row(wait_offsets_ptr, tile):
    """(begin, end): `tile`'s row of the wait table. In a loop the transformer loads it one
    iteration ahead, for the next iteration's tile (whose order entry it loads two ahead), so
    no load is waited for at a tile's start. The notify row is never carried that way
    (notify_row: loaded from the tile at its own lookup)."""
    return tl.load(wait_offsets_ptr + tile), tl.load(wait_offsets_ptr + tile + 1)


@triton.jit
def wait_for_tile_row(
    signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
):
    """wait_for_tile with the tile's wait row [begin, end) and the call's number `epoch` given
    (wait_row, epoch_of): (`tile`, the last slot seen complete)."""
    if _INTERPRET:
        for i in range(begin, end):
            slot = tl.load(wait_slots_ptr + i)
            expected = epoch * tl.load(slot_writers_ptr + slot)
            wait(signals_ptr + slot, expected, bound_ns, error_ptr, rank, slot, tile)
        fence_proxy_async()
    else:
        tile, seen = _wait_row_ptx(
            signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
        )
    return tile, seen


@triton.jit
def notify_row(notify_offsets_ptr, tile):
    """(begin, end): `tile`'s row of the notify table. The transformer loads it at the tile
    lookup (`sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)`) when
    the tile block runs before the notify on every path: in a flattened loop the lookup is the
    prologue the pipeliner overlaps with the previous tile's K loop, so the loads leave the
    epilogue (notify_tile_row and tma_store_wait_row then read the row). Always from the tile
    itself, never one iteration ahead and carried: Triton's loop fusion gives the epilogue a
    carried variable as the same tile's prologue left it (the next tile's row; the transformer's
    placement.cpp)."""
    return tl.load(notify_offsets_ptr + tile), tl.load(notify_offsets_ptr + tile + 1)


@triton.jit
def notify_tile_row(signals_ptr, notify_slots_ptr, tile, begin, end):
    """notify_tile with the tile's notify row [begin, end) loaded before (notify_row). `tile`
    is for the checking mode's hooks (syncopate._check_sites); the slots come from the row."""
    if _INTERPRET:
        tl.debug_barrier()
        for i in range(begin, end):
            slot = tl.load(notify_slots_ptr + i)
            tl.atomic_add(signals_ptr + slot, 1, sem="release", scope="sys")
    else:
        tl.inline_asm_elementwise(
            NOTIFY_TILE_PTX,
            "=r,r,r,l,l",
            [begin, end, notify_slots_ptr, signals_ptr],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def notify_tile(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile):
    """Adds 1 to every ready slot of `tile` (CSR row `tile` of the notify table). On the GPU one
    PTX block (no loop, no Triton barrier: either would keep a flattened tile loop from fusing
    or pipelining)."""
    begin, end = notify_row(notify_offsets_ptr, tile)
    notify_tile_row(signals_ptr, notify_slots_ptr, tile, begin, end)


@triton.jit
def tma_store_wait_row(begin, end):
    """When the tile's notify row [begin, end) is not empty: waits until every TMA store this
    thread issued has completed its writes to global memory (`cp.async.bulk.wait_group 0`, not
    the `.read` form Triton uses to reuse shared memory), then orders them before this thread's
    later generic-proxy accesses. A tile that notifies nothing (a consumer's) does not wait, so
    its stores keep overlapping the next tile. Hopper and newer; a no-op elsewhere and under the
    interpreter (whose stores are synchronous)."""
    if _INTERPRET:
        pass
    else:
        if cuda_capability_geq(9, 0):
            if end > begin:
                tl.inline_asm_elementwise(
                    "cp.async.bulk.wait_group 0; fence.proxy.async.global; mov.u32 $0, 0;",
                    "=r",
                    [],
                    dtype=tl.int32,
                    is_pure=False,
                    pack=1,
                )


@triton.jit
def tma_store_wait(notify_offsets_ptr, tile):
    """tma_store_wait_row of `tile`'s notify row, loaded here."""
    begin, end = notify_row(notify_offsets_ptr, tile)
    tma_store_wait_row(begin, end)


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
# block_at (from block_row's position, loaded before the loop; block_in_order in one call)
# renumbers a loop's variable so that `for v in range(start, stop, step)` visits
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
def wait_for_block(
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
    value,
    row_waits,
    seen,
):
    """wait_block, returning (`value`, the last slot seen complete) once the block's chunks have
    landed; `value` is the loop variable. `row_waits` (block_row, loaded before the loop): whether
    the table row has any slot; when it has none the iteration loads nothing from the tables.
    `seen` (carried from the previous iteration, no_slot_seen() before the loop): a slot equal to
    it is not loaded again, so the blocks of one piece cost one acquire load between them.
    Placed at the top of an order=arrival loop (`start_n, sy_block_seen = syl.wait_for_block(..., start_n, ...)`), so
    every address of the iteration, computed from the loop variable, depends on the wait: Triton's
    pipeliner, which keeps data dependences, not the order of side effects, issues a block's
    prefetch only after its wait. On the GPU one PTX block (no loop), so the loop still pipelines;
    under the interpreter wait_block. The PTX block runs only when the block has slots to wait on
    (an `if`, which the pipeliner predicates with its iteration: a prologue iteration past the
    loop's end waits on nothing). A block outside [0, blocks) reads its row's nearest block,
    never a slot from outside the row."""
    block = tl.minimum(tl.maximum(block, 0), blocks - 1)
    if _INTERPRET:
        wait_block(
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
        )
    elif row_waits:
        row = key * blocks + block
        begin = tl.load(block_offsets_ptr + row)
        end = tl.load(block_offsets_ptr + row + 1)
        # The PTX block under an `if`: Triton's pipeliner predicates an scf.if (its condition and
        # the iteration's) but refuses an inline asm with side effects at the top of the loop.
        if begin < end:
            epoch = tl.load(epoch_ptr)
            operands = [
                begin,
                end,
                block_slots_ptr,
                slot_writers_ptr,
                signals_ptr,
                epoch,
                bound_ns,
                error_ptr,
                rank,
                tile,
                seen,
                value,
            ]
            if cuda_capability_geq(9, 0):
                value, seen = tl.inline_asm_elementwise(
                    _WAIT_FOR_BLOCK_PTX_FENCE,
                    _WAIT_FOR_BLOCK_CONSTRAINTS,
                    operands,
                    dtype=(tl.int32, tl.int32),
                    is_pure=False,
                    pack=1,
                )
            else:
                value, seen = tl.inline_asm_elementwise(
                    _WAIT_FOR_BLOCK_PTX,
                    _WAIT_FOR_BLOCK_CONSTRAINTS,
                    operands,
                    dtype=(tl.int32, tl.int32),
                    is_pure=False,
                    pack=1,
                )
    return value, seen


@triton.jit
def block_row(first_ptr, block_offsets_ptr, key, blocks, start, stop, step):
    """(top, row_waits, seen) of an order=arrival loop `range(start, stop, step)`, loaded before
    it: the loop's position (from 0) of block `first_ptr[key]`, clamped into the loop (block_at
    starts there), whether table row `key` has any slot to wait on, and no_slot_seen() (the
    wait_for_block of the first iteration)."""
    count = (stop - start + step - 1) // step
    top = tl.load(first_ptr + key) - start // step
    top = tl.where((top < 0) | (top >= count), count - 1, top)
    row_waits = tl.load(block_offsets_ptr + (key + 1) * blocks) > tl.load(block_offsets_ptr + key * blocks)
    return top, row_waits, no_slot_seen()


@triton.jit
def block_at(v, start, stop, step, top):
    """The value of the loop variable that iteration `v` visits: the loop's values from position
    `top` (block_row) downwards, wrapping around to the top. Arithmetic only (no load)."""
    count = (stop - start + step - 1) // step
    position = top - (v - start) // step
    position = tl.where(position < 0, position + count, position)
    return start + position * step


@triton.jit
def block_in_order(v, start, stop, step, first_ptr, key):
    """The value of the loop variable that iteration `v` visits: the loop's values from block
    `first_ptr[key]` (clamped into the loop) downwards, wrapping around to the top (block_row and
    block_at in one call, loading `first_ptr[key]` each time)."""
    count = (stop - start + step - 1) // step
    top = tl.load(first_ptr + key) - start // step
    top = tl.where((top < 0) | (top >= count), count - 1, top)
    return block_at(v, start, stop, step, top)
