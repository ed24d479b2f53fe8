"""A local flash-attention forward kernel, written as Triton users write one (the shape of
Triton's fused-attention tutorial: a loop over K/V blocks inside each Q tile, online softmax),
annotated for Syncopate (docs/ANNOTATIONS.md, "Waiting per block").

q: [Z, H, N_Q, HEAD_DIM]; k, v: [Z, H_KV, N_KV, HEAD_DIM] with H a multiple of H_KV (GQA: H //
H_KV query heads share one K/V head); o like q. Query row i sits at position Q_START + i of the
K/V sequence (a rank's own piece of a sequence-parallel layout), rows from Q_SPLIT on at
Q_START2 + (i - Q_SPLIT) (the zig-zag layout: a rank's piece is two half-pieces, an early and a
late one, plan/sequence_parallel.hpp; Q_SPLIT >= N_Q: one run of positions), which is what
CAUSAL masks against and where a causal tile's loop stops. BLOCK_M must divide Q_SPLIT (no tile
straddles the two runs). One program per tile; tile t covers query block t // (Z * H) of
head-batch t % (Z * H).

Positions may lie in pieces of PIECE positions, piece p at `p * stride_*p` (q, k, v and o alike):
position n is element `(n // PIECE) * stride_p + (n % PIECE) * stride_m`. That reads Ulysses'
all-to-all output in place (plan/sequence_parallel.hpp: local head h at position r * S_loc + s
is [z, r * (H / W) + h, s], so PIECE = S_loc and stride_p = (H / W) * stride of dim 1). A plain
layout is one piece (PIECE >= the length, `attention_reference_args`). PIECE must be a multiple
of BLOCK_M and BLOCK_N, so that no block straddles two pieces.

The annotations: the tile block (the program's coordinates), a wait for the tile's Q rows (they
arrive with Ulysses' all-to-all; the ring keeps Q local, so its tiles wait on nothing), a wait per
K/V block inside the loop
on the chunks that carry that block of k and of v, visited in the order the plan lands them
(`order=arrival`: the loop indexes K/V by `start_n`, never by an advanced pointer, so any visit
order computes the same softmax), and the notify after the output tile's store (Ulysses' return
all-to-all ships finished tiles).

The online softmax tolerates a first visited block that masks a whole row (causal, arrival order):
the running maximum stays -inf and the row's terms are zero until a visible key comes.
"""

import triton
import triton.language as tl
import syncopate.language as syl  # [syncopate]
__syncopate__ = {"version": 2, "kernel": "attention_fwd_kernel", "params": ["sy_signals", "sy_tile_order", "sy_tiles_n", "sy_wait_offsets", "sy_wait_slots", "sy_notify_offsets", "sy_notify_slots", "sy_slot_writers", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_error", "sy_blocks", "sy_block_wait_offsets", "sy_block_wait_slots", "sy_block_first", "sy_block_waits"], "accesses": [{"tensor": "q", "param": "q_ptr", "role": "consume", "m_dim": 2, "n_dim": 1}, {"tensor": "k", "param": "k_ptr", "role": "consume", "m_dim": 2, "n_dim": -1, "per_block": True, "order": "arrival"}, {"tensor": "v", "param": "v_ptr", "role": "consume", "m_dim": 2, "n_dim": -1, "per_block": True, "order": "arrival"}, {"tensor": "o", "param": "o_ptr", "role": "produce", "m_dim": 0, "n_dim": 1}]}  # [syncopate]


@triton.jit
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, Z, H, H_KV, N_Q, N_KV, Q_START, Q_SPLIT, Q_START2, PIECE,
                         stride_qz, stride_qh, stride_qp, stride_qm, stride_kz, stride_kh, stride_kp, stride_kn,
                         stride_vz, stride_vh, stride_vp, stride_vn, stride_oz, stride_oh, stride_op, stride_om,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr,
                         sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_blocks, sy_block_wait_offsets, sy_block_wait_slots, sy_block_first, sy_block_waits: syl.constexpr,  # [syncopate]
):
    # @sy.tile(index=tl.program_id(0), m=start_m, n=off_hz)
    # [syncopate] was: pid = tl.program_id(0)
    # [syncopate] was: start_m = pid // (Z * H)
    # [syncopate] was: off_hz = pid % (Z * H)
    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]
    sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)  # [syncopate]
    sy_seen = syl.no_slot_seen()  # [syncopate]
    sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, sy_seen)  # [syncopate]
    start_m, off_hz = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]
    # @sy.end
    off_z = off_hz // H
    off_h = off_hz % H
    off_hkv = off_h // (H // H_KV)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    piece_m = (start_m * BLOCK_M) // PIECE
    rows_m = start_m * BLOCK_M - piece_m * PIECE + tl.arange(0, BLOCK_M)  # within the piece
    q_rows = q_ptr + off_z * stride_qz + off_h * stride_qh + piece_m * stride_qp + rows_m[:, None] * stride_qm
    # @sy.consume(q_ptr, m=start_m, n=off_hz, m_dim=2, n_dim=1)
    q = tl.load(q_rows + offs_d[None, :], mask=offs_m[:, None] < N_Q, other=0.0)
    k_base = k_ptr + off_z * stride_kz + off_hkv * stride_kh
    v_base = v_ptr + off_z * stride_vz + off_hkv * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.44269504  # exp(x) = exp2(x * log2(e))
    q_start = tl.where(start_m * BLOCK_M >= Q_SPLIT, Q_START2 - Q_SPLIT, Q_START)  # the tile's run
    hi = N_KV
    if CAUSAL:
        hi = tl.minimum(N_KV, q_start + (start_m + 1) * BLOCK_M)
    if sy_block_waits:  # [syncopate]
        sy_block_top, sy_block_row_waits, sy_block_seen = syl.block_row(sy_block_first, sy_block_wait_offsets, off_hz, sy_blocks, 0, hi, BLOCK_N)  # [syncopate]
    for start_n in range(0, hi, BLOCK_N):
        if sy_block_waits:  # [syncopate]
            start_n = syl.block_at(start_n, 0, hi, BLOCK_N, sy_block_top)  # [syncopate]
            start_n, sy_block_seen = syl.wait_for_block(sy_signals, sy_block_wait_offsets, sy_block_wait_slots, sy_slot_writers, off_hz, start_n // BLOCK_N, sy_blocks, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error, start_n, sy_block_row_waits, sy_block_seen)  # [syncopate]
        offs_n = start_n + tl.arange(0, BLOCK_N)
        piece_n = start_n // PIECE
        cols_n = start_n - piece_n * PIECE + tl.arange(0, BLOCK_N)
        # @sy.consume_block(k_ptr, block=start_n // BLOCK_N, n=off_hz, dim=2, order=arrival)
        k = tl.load(k_base + piece_n * stride_kp + cols_n[None, :] * stride_kn + offs_d[:, None],
                    mask=offs_n[None, :] < N_KV, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        visible = offs_n[None, :] < N_KV
        if CAUSAL:
            visible = visible & (q_start + offs_m[:, None] >= offs_n[None, :])
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # @sy.consume_block(v_ptr, block=start_n // BLOCK_N, n=off_hz, dim=2, order=arrival)
        v = tl.load(v_base + piece_n * stride_vp + cols_n[:, None] * stride_vn + offs_d[None, :],
                    mask=offs_n[:, None] < N_KV, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_rows = o_ptr + off_z * stride_oz + off_h * stride_oh + piece_m * stride_op + rows_m[:, None] * stride_om
    # @sy.produce(o_ptr, m=start_m, n=off_hz)
    tl.store(o_rows + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N_Q)
    syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, sy_notify_begin, sy_notify_end)  # [syncopate]


def attention_reference_args(q, k, v, o, sm_scale: float, q_start: int = 0):
    """The kernel's positional arguments for plain layouts (one piece) with a contiguous last dim."""
    z, h, n_q, _ = q.shape
    piece = max(n_q, k.shape[2])
    return (q, k, v, o, sm_scale, z, h, k.shape[1], n_q, k.shape[2], q_start, n_q, 0, piece,
            q.stride(0), q.stride(1), 0, q.stride(2), k.stride(0), k.stride(1), 0, k.stride(2),
            v.stride(0), v.stride(1), 0, v.stride(2), o.stride(0), o.stride(1), 0, o.stride(2))


def attention_piece_args(q, k, v, o, sm_scale: float, world: int):
    """The kernel's positional arguments for Ulysses' all-to-all output, read in place: each of
    q, k, v, o is [Z, W * h, S_loc, D] whose [z, r * h + i, s] is local head i at position
    r * S_loc + s (plan/sequence_parallel.hpp); positions are W pieces of S_loc."""
    z, wh, s_loc, _ = q.shape
    h, h_kv = wh // world, k.shape[1] // world

    def strides(t, heads):
        return t.stride(0), t.stride(1), heads * t.stride(1), t.stride(2)

    return (q, k, v, o, sm_scale, z, h, h_kv, world * s_loc, world * s_loc, 0, world * s_loc, 0, s_loc,
            *strides(q, h), *strides(k, h_kv), *strides(v, h_kv), *strides(o, h))


def zigzag_positions(rank: int, world: int, s_loc: int):
    """(Q_START, Q_SPLIT, Q_START2) of rank `rank`'s zig-zag piece of S_loc positions: half-pieces
    `rank` and 2W - 1 - rank of S_loc / 2 positions each (plan/sequence_parallel.hpp)."""
    half = s_loc // 2
    return rank * half, half, (2 * world - 1 - rank) * half


def attention_zigzag_args(q, k, v, o, sm_scale: float, rank: int, world: int):
    """The kernel's positional arguments for a zig-zag rank: q, o this rank's [Z, H, S_loc, D]
    piece (its two halves in order), k, v the gathered [Z, H_KV, W * S_loc, D] in global order
    (make_zigzag_gather_plan's output); contiguous last dims."""
    z, h, s_loc, _ = q.shape
    n_kv = k.shape[2]
    return (q, k, v, o, sm_scale, z, h, k.shape[1], s_loc, n_kv, *zigzag_positions(rank, world, s_loc),
            max(s_loc, n_kv), q.stride(0), q.stride(1), 0, q.stride(2), k.stride(0), k.stride(1), 0, k.stride(2),
            v.stride(0), v.stride(1), 0, v.stride(2), o.stride(0), o.stride(1), 0, o.stride(2))
