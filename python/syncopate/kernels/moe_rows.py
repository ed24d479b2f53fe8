"""Row movement of the MoE layer's capacity-slot path (ops/moe_slots.py): every index is read on
the device, so the host never needs the routing's counts.

pack_rows_kernel: program (p, h) copies columns h * BLOCK_H .. of routed row p (token p // top_k,
its (p % top_k)-th expert) to row dest[p] of the dispatch's slots: into `recv` (x_recv, where the
grouped GEMM reads it in place) when dest[p] is one of this rank's own slots
(local_lo <= dest[p] < local_hi), else into `send` (x_send, whence the plan's chunks carry it).
dest[p] < 0 (a row over its expert's capacity) is not written anywhere.

combine_rows_kernel: program (t, h) sums token t's top_k expert outputs, each from row dest[...]
of `y_send` (own slots, computed here) or `y_recv` (landed by the return all-to-all), times its
routing weight, in fp32, and stores the sum in out's row t. A pair with dest < 0 adds nothing.
"""

import triton
import triton.language as tl


@triton.jit
def pack_rows_kernel(
    x_ptr, dest_ptr, send_ptr, recv_ptr, H, top_k, local_lo, local_hi, stride_x, stride_slot, BLOCK_H: tl.constexpr
):
    p = tl.program_id(0)
    hb = tl.program_id(1)
    d = tl.load(dest_ptr + p).to(tl.int64)
    t = p // top_k
    offs = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    live = (offs < H) & (d >= 0)
    local = (d >= local_lo) & (d < local_hi)
    remote = (d < local_lo) | (d >= local_hi)
    v = tl.load(x_ptr + t.to(tl.int64) * stride_x + offs, mask=live)
    tl.store(recv_ptr + d * stride_slot + offs, v, mask=live & local)
    tl.store(send_ptr + d * stride_slot + offs, v, mask=live & remote)


@triton.jit
def combine_rows_kernel(
    y_send_ptr,
    y_recv_ptr,
    dest_ptr,
    w_ptr,
    out_ptr,
    H,
    local_lo,
    local_hi,
    stride_y,
    stride_out,
    TOP_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    t = tl.program_id(0)
    hb = tl.program_id(1)
    offs = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = offs < H
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        d = tl.load(dest_ptr + t * TOP_K + j).to(tl.int64)
        w = tl.load(w_ptr + t * TOP_K + j).to(tl.float32)
        live = cols & (d >= 0)
        local = (d >= local_lo) & (d < local_hi)
        remote = (d < local_lo) | (d >= local_hi)
        own = tl.load(y_send_ptr + d * stride_y + offs, mask=live & local, other=0.0)
        landed = tl.load(y_recv_ptr + d * stride_y + offs, mask=live & remote, other=0.0)
        acc += w * (own.to(tl.float32) + landed.to(tl.float32))
    tl.store(out_ptr + t.to(tl.int64) * stride_out + offs, acc.to(out_ptr.dtype.element_ty), mask=cols)
