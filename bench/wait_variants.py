"""Candidate device code for the transformed GEMM's wait and notify, timed by
bench_wait_variants.py against what the transformer emits today (issue 16).

Why candidates: Triton fuses a `tl.range(..., flatten=True)` tile loop with its K loop only when
the tile loop holds exactly one inner loop, and its software pipeliner leaves a loop alone when
its body holds another loop or a `tl.debug_barrier`. syncopate.language's wait_tile and
notify_tile are a loop each and notify_tile opens with a barrier, so the transformed kernel keeps
the tile loop and the K loop apart and drains the pipeline at every tile.

Here the whole wait of a tile (every slot, the bounded spin, the timeout record, the proxy
fence) is one PTX block, and so is the notify (barrier, then one thread adds to each slot):
Triton sees no loop and no barrier, so the loops fuse and pipeline. Inside the fused loop the
wait sits in the same `scf.if` as the tile's coordinates (the "prologue" of the flattened
loop), which the pipeliner schedules with the TMA loads' address computation: the wait of a
tile runs before that tile's first load is issued.

Each variant is the transformer's output with textual changes (make_variant); the names here are
what the changed calls use. The forms that ship in syncopate.language (the notify as one PTX
block, notify_tile; the wait at the tile lookup with the slot cache, wait_for_tile) are not
copied here: the variants keep the transformer's `syl.` calls of them.
"""

import triton
import triton.language as tl
from triton.language.target_info import cuda_capability_geq

import syncopate.language as _language

# One PTX block: waits on wait_slots[begin:end] (each slot's value >= epoch * writers[slot],
# modulo 2^32), every thread polling with acquire loads at system scope, each slot bounded by
# bound_ns of %globaltimer. On expiry the first waiter to claim the error record's flag (a CAS)
# writes [1, rank, slot, expected, seen, tile]; a waiter that sees the flag raised gives up at
# once. FENCE: fence.proxy.async after a wait, so that later TMA loads are ordered after it.
# Operands: $0 (dummy out), $1 begin, $2 end, $3 wait_slots, $4 slot_writers, $5 signals,
# $6 epoch, $7 bound_ns, $8 error record, $9 rank, $10 tile.
_WAIT_HEAD = """{
.reg .pred %sp<6>;
.reg .b32 %si, %sslot, %sw, %sexp, %sseen, %sd;
.reg .b64 %sa, %ssig, %st0, %st1, %sab, %sold, %sv;
mov.b32 $0, 0;
mov.b32 %si, $1;
setp.ge.s32 %sp5, %si, $2;
@%sp5 bra SY_WAIT_END;
SY_WAIT_SLOT:
mul.wide.s32 %sa, %si, 4;
add.s64 %sa, %sa, $3;
ld.global.b32 %sslot, [%sa];
mul.wide.s32 %sa, %sslot, 4;
add.s64 %ssig, %sa, $5;
add.s64 %sa, %sa, $4;
ld.global.b32 %sw, [%sa];
mul.lo.s32 %sexp, %sw, $6;
ld.global.acquire.sys.b32 %sseen, [%ssig];
sub.s32 %sd, %sseen, %sexp;
setp.ge.s32 %sp0, %sd, 0;
@%sp0 bra SY_WAIT_NEXT;
mov.u64 %st0, %globaltimer;
SY_WAIT_SPIN:
ld.global.acquire.sys.b32 %sseen, [%ssig];
sub.s32 %sd, %sseen, %sexp;
setp.ge.s32 %sp0, %sd, 0;
@%sp0 bra SY_WAIT_NEXT;
ld.volatile.global.b64 %sab, [$8];
setp.ne.s64 %sp1, %sab, 0;
@%sp1 bra SY_WAIT_NEXT;
mov.u64 %st1, %globaltimer;
sub.s64 %st1, %st1, %st0;
setp.lt.s64 %sp2, %st1, $7;
@%sp2 bra SY_WAIT_SPIN;
atom.acq_rel.sys.global.cas.b64 %sold, [$8], 0, 1;
setp.ne.s64 %sp3, %sold, 0;
@%sp3 bra SY_WAIT_NEXT;
cvt.s64.s32 %sv, $9;
st.global.b64 [$8+8], %sv;
cvt.s64.s32 %sv, %sslot;
st.global.b64 [$8+16], %sv;
cvt.s64.s32 %sv, %sexp;
st.global.b64 [$8+24], %sv;
cvt.s64.s32 %sv, %sseen;
st.global.b64 [$8+32], %sv;
cvt.s64.s32 %sv, $10;
st.global.b64 [$8+40], %sv;
SY_WAIT_NEXT:
add.s32 %si, %si, 1;
setp.lt.s32 %sp4, %si, $2;
@%sp4 bra SY_WAIT_SLOT;
"""
# The cached form: $0 returns the last slot this thread saw complete (in: $11); a slot equal to
# it is not loaded again (slots only grow within a call), and the fence runs only after a load.
_CACHED = (
    _WAIT_HEAD.replace(".reg .pred %sp<6>;", ".reg .pred %sp<8>;")
    .replace("mov.b32 $0, 0;", "mov.b32 $0, $11;\nsetp.ne.s32 %sp7, 0, 0;")
    .replace(
        "ld.global.b32 %sslot, [%sa];\n",
        "ld.global.b32 %sslot, [%sa];\nsetp.eq.s32 %sp6, %sslot, $11;\n@%sp6 bra SY_WAIT_NEXT;\nsetp.eq.s32 %sp7, 0, 0;\n",
    )
    .replace(
        "sub.s32 %sd, %sseen, %sexp;\nsetp.ge.s32 %sp0, %sd, 0;\n@%sp0 bra SY_WAIT_NEXT;\nmov.u64",
        "sub.s32 %sd, %sseen, %sexp;\nsetp.ge.s32 %sp0, %sd, 0;\n@%sp0 mov.b32 $0, %sslot;\n@%sp0 bra SY_WAIT_NEXT;\nmov.u64",
    )
    .replace("@%sp0 bra SY_WAIT_NEXT;\nld.volatile", "@%sp0 mov.b32 $0, %sslot;\n@%sp0 bra SY_WAIT_NEXT;\nld.volatile")
)
WAIT_PTX_CACHED_FENCE: tl.constexpr = tl.constexpr(_CACHED + "@%sp7 fence.proxy.async.global;\nSY_WAIT_END:\n}")
WAIT_PTX_CACHED: tl.constexpr = tl.constexpr(_CACHED + "SY_WAIT_END:\n}")
WAIT_CACHED_CONSTRAINTS: tl.constexpr = tl.constexpr("=r,r,r,l,l,l,r,l,l,r,r,r")
# The form called at the tile lookup: $0 returns the tile ($10) once every slot is waited for, so
# every address computed from the tile's coordinates depends on the wait (the pipeliner and the
# warp specialiser keep data dependences, not the order of side effects).
_AT = _WAIT_HEAD.replace("mov.b32 $0, 0;", "")
WAIT_AT_PTX_FENCE: tl.constexpr = tl.constexpr(_AT + "fence.proxy.async.global;\nSY_WAIT_END:\nmov.b32 $0, $10;\n}")
WAIT_AT_PTX: tl.constexpr = tl.constexpr(_AT + "SY_WAIT_END:\nmov.b32 $0, $10;\n}")
WAIT_PTX_FENCE: tl.constexpr = tl.constexpr(_WAIT_HEAD + "fence.proxy.async.global;\nSY_WAIT_END:\n}")
WAIT_PTX: tl.constexpr = tl.constexpr(_WAIT_HEAD + "SY_WAIT_END:\n}")
WAIT_CONSTRAINTS: tl.constexpr = tl.constexpr("=r,r,r,l,l,l,r,l,l,r,r")

# The notify as one PTX block (barrier, then thread 0 adds to each slot): the form that ships as
# syncopate.language.notify_tile, imported rather than copied. Operands: $0 (dummy out), $1 begin,
# $2 end, $3 notify_slots, $4 signals.
NOTIFY_PTX: tl.constexpr = _language.NOTIFY_TILE_PTX


@triton.jit
def wait_tile_fused(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
):
    begin = tl.load(wait_offsets_ptr + tile)
    end = tl.load(wait_offsets_ptr + tile + 1)
    epoch = tl.load(epoch_ptr)
    if cuda_capability_geq(9, 0):
        tl.inline_asm_elementwise(
            WAIT_PTX_FENCE,
            WAIT_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.inline_asm_elementwise(
            WAIT_PTX,
            WAIT_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def wait_tile_cached(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr, seen
):
    """wait_tile_fused, skipping the slot this thread last saw complete (`seen`); returns the new one."""
    begin = tl.load(wait_offsets_ptr + tile)
    end = tl.load(wait_offsets_ptr + tile + 1)
    epoch = tl.load(epoch_ptr)
    if cuda_capability_geq(9, 0):
        seen = tl.inline_asm_elementwise(
            WAIT_PTX_CACHED_FENCE,
            WAIT_CACHED_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile, seen],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        seen = tl.inline_asm_elementwise(
            WAIT_PTX_CACHED,
            WAIT_CACHED_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile, seen],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    return seen


@triton.jit
def wait_tile_at(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
):
    """wait_tile_fused, returning `tile` after the wait (call it at the tile lookup)."""
    begin = tl.load(wait_offsets_ptr + tile)
    end = tl.load(wait_offsets_ptr + tile + 1)
    epoch = tl.load(epoch_ptr)
    if cuda_capability_geq(9, 0):
        tile = tl.inline_asm_elementwise(
            WAIT_AT_PTX_FENCE,
            WAIT_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tile = tl.inline_asm_elementwise(
            WAIT_AT_PTX,
            WAIT_CONSTRAINTS,
            [begin, end, wait_slots_ptr, slot_writers_ptr, signals_ptr, epoch, bound_ns, error_ptr, rank, tile],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    return tile


@triton.jit
def notify_range(notify_offsets_ptr, tile):
    """The tile's notify row, loaded where the tile starts (the flattened loop's prologue)."""
    return tl.load(notify_offsets_ptr + tile), tl.load(notify_offsets_ptr + tile + 1)


@triton.jit
def tma_store_wait_range(begin, end):
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
def notify_range_fused(signals_ptr, notify_slots_ptr, begin, end):
    tl.inline_asm_elementwise(
        NOTIFY_PTX, "=r,r,r,l,l", [begin, end, notify_slots_ptr, signals_ptr], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def wait_tile_skip(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
):
    """Diagnostic only (never correct with communication): no wait at all."""
    pass


# --- the variants: textual changes of the transformer's output ------------------------------

_WAIT = "syl.wait_tile("
_NOTIFY = "syl.notify_tile("
_LOOKUP = "sy_tile = syl.tile_at(sy_tile_order, tile_id)  # [syncopate]"
_IMPORT = "import syncopate.language as syl  # [syncopate]"

VARIANTS = {
    "before": "this morning's output: wait and notify loops at the consume and produce (tile and K loops apart)",
    "emitted": "the transformer's output as it is now (with the syncopate.language of this tree)",
    "fused": "wait (at the consume) and notify as one PTX block each (the notify as shipped, syl.notify_tile): "
    "the tile and K loops fuse and pipeline",
    "fused+prefetch": "fused, and the next tile's order entry loaded one tile ahead",
    "fused+prefetch+cache": "fused+prefetch, and a slot this program saw complete is not loaded again",
    "fused+all": "fused+prefetch+cache, and the notify row loaded where the tile starts",
    "fused@tile": "fused, the wait called at the tile lookup and returning the tile (addresses depend on it)",
    "fused@tile+prefetch": "fused@tile, and the next tile's order entry loaded one tile ahead",
    "fused@tile+all": "fused@tile with the prefetch, the slot cache (the wait as shipped, syl.wait_for_tile) and "
    "the notify row of fused+all",
    "fused, no wait": "diagnostic: fused with the wait removed (lookup and notify only)",
    "row at lookup": "the wait loading its own row and the notify row loaded at the tile lookup (the "
    "transformer's output of issue 16's first round, 2026-11-25 12:02)",
    "row at store": "row at lookup with the notify row loaded by the store wait and the notify "
    "(the transformer's output before that)",
    "emitted, no wait": "diagnostic: row at lookup with the wait removed (lookup, prefetch and notify row only)",
    "notify row carried": "diagnostic, WRONG on a GPU: the emitted form with the notify row also loaded one tile "
    "ahead and carried to the notify (the form of 2026-11-25 12:33); Triton's loop fusion gives the epilogue the "
    "next tile's row, so every tile raises its successor's slots (src/transform/placement.cpp)",
    "rows after wait": "the tile's wait row loaded for the next tile right after this tile's wait "
    "(the order entry loaded before it, so its latency overlaps the wait), the notify row loaded from the tile "
    "at its lookup, and the epoch once before the loop: the wait reads no row it has to wait for (what the "
    "transformer emits since 2026-11-25's fifth session)",
}


_ROW = "sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)  # [syncopate]"


def row_at_store(source: str) -> str:
    """The emitted source with the notify row loaded where it is used (after the store), as the
    transformer emitted it before the row moved to the tile lookup."""
    lines = [line for line in source.splitlines(keepends=True) if _ROW not in line]
    out = "".join(lines)
    out = out.replace(
        "syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)", "syl.tma_store_wait(sy_notify_offsets, sy_tile)"
    )
    return out.replace(
        "syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)",
        "syl.notify_tile(sy_signals, sy_notify_offsets, sy_notify_slots, sy_tile)",
    )


_ROWS_CALL = (
    "syl.wait_for_tile_row(sy_signals, sy_wait_slots, sy_slot_writers, sy_tile, sy_wait_begin, sy_wait_end, "
    "sy_epoch_now, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)"
)


def row_at_lookup(source: str) -> str:
    """The transformer's output in its round-1 form (the wait loading its own row, the notify
    row loaded at the lookup), whichever of the two forms `source` is in."""
    if _ROWS_CALL not in source:
        return source
    lines = [
        line
        for line in source.splitlines(keepends=True)
        if "= syl.wait_row(" not in line
        and "sy_epoch_now = syl.epoch_of(" not in line
        and "sy_wait_begin, sy_wait_end = " not in line
        and _ROW not in line
    ]
    out = []
    for line in lines:
        if _ROWS_CALL in line:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + _ROW + "\n")
            line = line.replace(
                _ROWS_CALL,
                "syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, "
                "sy_wait_bound_ns, sy_rank, sy_error, sy_seen)",
            )
        out.append(line)
    return "".join(out)


_WAIT_CALL = (
    "syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, "
    "sy_wait_bound_ns, sy_rank, sy_error, sy_seen)"
)
_ROWS_NEXT = "sy_wb_next, sy_we_next = syl.wait_row(sy_wait_offsets, sy_tile_next)"


def rows_after_wait(source: str) -> str:
    """The emitted source (a prefetched tile loop) with the next tile's wait row loaded right after
    this tile's wait (syncopate.language's epoch_of, wait_row, wait_for_tile_row), the notify row
    loaded from the tile at its lookup. Loading the wait row two tiles ahead (the order entry
    three ahead) would hide the order load too, but a value carried through two iterations stops
    Triton's pipeliner (no multi-buffering). The notify row is not carried: Triton's loop fusion
    hands the epilogue the next tile's (src/transform/placement.cpp)."""
    seen = "    sy_seen = syl.no_slot_seen()  # [syncopate]\n"
    lookup = "        sy_tile = sy_tile_next  # [syncopate]\n"
    assert seen in source and lookup in source and _WAIT_CALL in source and _ROW in source
    out = source.replace(
        seen, seen + "    sy_epoch_now = syl.epoch_of(sy_epoch)  # [variant]\n    " + _ROWS_NEXT + "  # [variant]\n"
    )
    out = out.replace(
        lookup,
        lookup + "        sy_wait_begin, sy_wait_end = sy_wb_next, sy_we_next  # [variant]\n",
    )
    wait = next(line for line in out.splitlines(keepends=True) if _WAIT_CALL in line)
    indent = wait[: len(wait) - len(wait.lstrip())]
    new_wait = wait.replace(
        _WAIT_CALL,
        "syl.wait_for_tile_row(sy_signals, sy_wait_slots, sy_slot_writers, sy_tile, sy_wait_begin, sy_wait_end, "
        "sy_epoch_now, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)",
    )
    return out.replace(wait, new_wait + indent + _ROWS_NEXT + "  # [variant]\n")


_CONSUME = "# @sy.consume(a_ptr, m=pid_m)"


def canonical(source: str) -> str:
    """The transformer's output in this morning's form: the order entry looked up in the tile
    block and the wait (`syl.wait_tile(...)`) at the consume, whatever form the transformer
    emits now (the wait at the tile lookup, the next entry prefetched, the slot cache)."""
    lines = source.splitlines(keepends=True)
    wait = next((i for i, line in enumerate(lines) if "= syl.wait_for_tile(" in line), None)
    if wait is None:
        return source
    call = lines.pop(wait).strip()
    call = _WAIT + call[call.index("syl.wait_for_tile(") + len("syl.wait_for_tile(") :]
    call = call.replace(", sy_seen)", ")") + "\n"
    lines = [
        line
        for line in lines
        if "sy_tile_next = syl.tile_at_or(" not in line and "sy_seen = syl.no_slot_seen()" not in line
    ]
    lines = [
        line.replace("sy_tile = sy_tile_next  # [syncopate]", _LOOKUP) if "sy_tile = sy_tile_next" in line else line
        for line in lines
    ]
    consume = next(i for i, line in enumerate(lines) if _CONSUME in line)
    indent = lines[consume][: len(lines[consume]) - len(lines[consume].lstrip())]
    lines.insert(consume + 1, indent + call)
    return "".join(lines)


@triton.jit
def wait_tile_loop(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch_ptr, bound_ns, rank, error_ptr
):
    """syncopate.language's wait_tile as it was this morning (a loop of bounded spins)."""
    begin = tl.load(wait_offsets_ptr + tile)
    end = tl.load(wait_offsets_ptr + tile + 1)
    epoch = tl.load(epoch_ptr)
    for i in range(begin, end):
        slot = tl.load(wait_slots_ptr + i)
        expected = epoch * tl.load(slot_writers_ptr + slot)
        _language.wait(signals_ptr + slot, expected, bound_ns, error_ptr, rank, slot, tile)
    _language.fence_proxy_async()


@triton.jit
def notify_tile_loop(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile):
    """syncopate.language's notify_tile as it was this morning (a barrier, then a loop)."""
    begin = tl.load(notify_offsets_ptr + tile)
    end = tl.load(notify_offsets_ptr + tile + 1)
    tl.debug_barrier()
    for i in range(begin, end):
        slot = tl.load(notify_slots_ptr + i)
        tl.atomic_add(signals_ptr + slot, 1, sem="release", scope="sys")


_NOTIFY_ROW_NEXT = "sy_nb_next, sy_ne_next = syl.notify_row(sy_notify_offsets, sy_tile_next)  # [variant]"


def notify_row_carried(source: str) -> str:
    """The emitted source with the notify row loaded one tile ahead beside the wait row and
    carried to the notify (what "notify row carried" describes)."""
    take = "sy_wait_begin, sy_wait_end = sy_wait_begin_next, sy_wait_end_next  # [syncopate]"
    assert take in source and _ROW in source, "not a prefetched tile loop with the notify row at the lookup"
    out = "".join(line for line in source.splitlines(keepends=True) if _ROW not in line)
    out = out.replace(
        take,
        "sy_wait_begin, sy_wait_end, sy_notify_begin, sy_notify_end = sy_wait_begin_next, sy_wait_end_next, "
        "sy_nb_next, sy_ne_next  # [variant]",
    )
    lines = []
    for line in out.splitlines(keepends=True):
        lines.append(line)
        if "sy_wait_begin_next, sy_wait_end_next = syl.wait_row(" in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(indent + _NOTIFY_ROW_NEXT + "\n")
    return "".join(lines)


def make_variant(source: str, name: str) -> str:
    """The transformed gemm_tma_kernel source `source` changed into variant `name`."""
    if name == "emitted":
        return source
    if name == "notify row carried":
        return notify_row_carried(source)
    if _ROWS_CALL in source and name == "rows after wait":
        return source
    source = row_at_lookup(source)
    if name == "row at lookup":
        return source
    if name == "rows after wait":
        return rows_after_wait(source)
    if name == "emitted, no wait":
        lines = source.splitlines(keepends=True)
        out = "".join(line for line in lines if "= syl.wait_for_tile(" not in line)
        assert out != source
        return out
    source = row_at_store(source)
    if name == "row at store":
        return source
    source = canonical(source)
    out = source.replace(_IMPORT, _IMPORT + "\nimport wait_variants as syv  # [variant]")
    if name == "before":
        return out.replace(_WAIT, "syv.wait_tile_loop(").replace(_NOTIFY, "syv.notify_tile_loop(")
    if name == "fused, no wait":
        out = out.replace(_WAIT, "syv.wait_tile_skip(")
    else:
        out = out.replace(_WAIT, "syv.wait_tile_fused(")
    # The notify stays the transformer's syl.notify_tile: the fused form, as shipped.
    if name.startswith("fused@tile"):
        lines = out.splitlines()
        wait_line = next(line for line in lines if "syv.wait_tile_fused(" in line)
        lines.remove(wait_line)
        out = "\n".join(lines) + "\n"
        call = wait_line.strip().replace("syv.wait_tile_fused(", "sy_tile = syv.wait_tile_at(")
        if name in ("fused@tile+all",):
            call = call.replace("sy_tile = syv.wait_tile_at(", "sy_tile, sy_seen = syl.wait_for_tile(").replace(
                "sy_rank, sy_error)", "sy_rank, sy_error, sy_seen)"
            )
        coords = "pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]"
        out = out.replace(coords, call + "\n        " + coords)
        if name == "fused@tile+all":
            out = out.replace(
                coords, coords + "\n        sy_nb, sy_ne = syv.notify_range(sy_notify_offsets, sy_tile)  # [variant]"
            )
            out = out.replace(
                "syl.tma_store_wait(sy_notify_offsets, sy_tile)", "syv.tma_store_wait_range(sy_nb, sy_ne)"
            )
            out = out.replace(
                "syl.notify_tile(sy_signals, sy_notify_offsets, sy_notify_slots, sy_tile)",
                "syv.notify_range_fused(sy_signals, sy_notify_slots, sy_nb, sy_ne)",
            )
    if name in ("fused+prefetch+cache", "fused+all"):
        out = out.replace("syv.wait_tile_fused(", "sy_seen = syv.wait_tile_cached(").replace(
            "sy_rank, sy_error)  # [syncopate]", "sy_rank, sy_error, sy_seen)  # [syncopate]"
        )
    if name == "fused+all":
        wait_line = next(line for line in out.splitlines() if "sy_seen = syv.wait_tile_cached(" in line)
        indent = wait_line[: len(wait_line) - len(wait_line.lstrip())]
        out = out.replace(
            wait_line,
            wait_line + "\n" + indent + "sy_nb, sy_ne = syv.notify_range(sy_notify_offsets, sy_tile)  # [variant]",
        )
        out = out.replace("syl.tma_store_wait(sy_notify_offsets, sy_tile)", "syv.tma_store_wait_range(sy_nb, sy_ne)")
        out = out.replace(
            "syl.notify_tile(sy_signals, sy_notify_offsets, sy_notify_slots, sy_tile)",
            "syv.notify_range_fused(sy_signals, sy_notify_slots, sy_nb, sy_ne)",
        )
    if name in ("fused+prefetch", "fused+prefetch+cache", "fused+all", "fused@tile+prefetch", "fused@tile+all"):
        header = "    for tile_id in tl.range("
        assert header in out and "tl.program_id(0), num_tiles, num_programs" in out, "the tile loop changed"
        first = (
            "    sy_tile_next = tl.load(sy_tile_order + tl.program_id(0), mask=tl.program_id(0) < num_tiles, other=0)"
            "  # [variant]\n"
        )
        if "sy_seen" in out:
            first += "    sy_seen = syl.no_slot_seen()  # [variant]\n"
        out = out.replace(header, first + header, 1)
        indent = "        "
        out = out.replace(
            _LOOKUP,
            "sy_tile = sy_tile_next  # [variant]\n"
            + indent
            + "sy_tile_next = tl.load(sy_tile_order + tile_id + num_programs, "
            "mask=tile_id + num_programs < num_tiles, other=0)  # [variant]",
        )
    assert out != source
    return out
