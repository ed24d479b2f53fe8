"""Sequence-parallel attention ops (docs/SEQUENCE_PARALLEL.md):

    o = ulysses_attention(q, k, v, causal=True)   # q, k, v, o: [Z, H, S_loc, D] on each rank
    o = ring_attention(q, k, v, causal=True)

Rank r holds positions r * S_loc .. (r+1) * S_loc - 1 of the sequence (the usual contiguous
layout); the result is attention over the whole (gathered) sequence, this rank's rows, as
`torch.nn.functional.scaled_dot_product_attention` on the gathered q, k, v would give. GQA: k and
v may have fewer heads (a divisor of q's).

What runs today is the **sequential** form of each, built the way the plans of
plan/sequence_parallel.hpp move data, so the fused form can replace it op for op:
- Ulysses: an all-to-all over heads (`dist.all_to_all_single`), attention on whole sequences of
  H / W heads, the same all-to-all back. Head counts (q's and k/v's) must be multiples of W.
- Ring: the K/V pieces travel around the ring (rank r receives from r - 1, as the ring-pass plan
  lands them: own piece, r - 1, r - 2, ...) in two buffers; each step's attention is merged into
  the running result by log-sum-exp; causal skips the pieces after the rank's own and masks the
  own one.
`mode="fused"` runs the fused form instead (ops/fused_attention.py: the transformed
`kernels/attention.py` reading K/V from the symmetric heap as the runtime executor lands them,
waiting per block; one context per shapes, dtype, device, causality and scale, cached).
`mode="auto"` runs what the simulator picks (`choose_mode`: sim/attention_model.hpp, from the
calibration's measured SDPA and kernel rates): the fused form only where it pays and the
tensors are on a GPU. With today's kernel (about 2.3x slower than SDPA) that is sequential on
every shape measured (docs/SEQUENCE_PARALLEL.md).

With q, k or v requiring grad, both run their sequential form with its backward
(seq_attention_grad.py); mode="fused" and compute="triton" are refused then (no log-sum-exp).

`compute="sdpa"` (default) runs each attention with torch; `compute="triton"` with Syncopate's
local attention kernel (`kernels/attention.py`, untransformed; Ulysses only: the ring steps need
the log-sum-exp, which that kernel does not return).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from syncopate.errors import ShapeError, UserError
from syncopate.ops import common

MODES = ("auto", "sequential", "fused")
COMPUTES = ("sdpa", "triton")


def group_rank_world(group):
    """(group, rank, world) with group=None the default group (common.group_rank_world)."""
    return common.group_rank_world(group, none_is_world=True)


def _check(who: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mode: str, compute: str) -> None:
    if mode not in MODES:
        raise UserError(f"{who}: mode={mode!r}, expected one of {MODES}")
    if compute not in COMPUTES:
        raise UserError(f"{who}: compute={compute!r}, expected one of {COMPUTES}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ShapeError(f"{who}: {name} has shape {list(t.shape)}; expected [Z, H, S_loc, D]")
    if k.shape != v.shape:
        raise ShapeError(f"{who}: k {list(k.shape)} and v {list(v.shape)} differ")
    z, h, s, d = q.shape
    if k.shape[0] != z or k.shape[2] != s or k.shape[3] != d:
        raise ShapeError(f"{who}: k/v {list(k.shape)} do not match q {list(q.shape)} in batch, positions or head dim")
    if h % k.shape[1] != 0:
        raise ShapeError(f"{who}: {h} query heads are not a multiple of {k.shape[1]} K/V heads (GQA)")
    if not (q.dtype == k.dtype == v.dtype):
        raise ShapeError(f"{who}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise UserError(f"{who}: q, k, v are on different devices ({q.device}, {k.device}, {v.device})")


# The fused contexts made by the ops, by op, group and problem (a cache: a context owns a heap and
# a compiled kernel).
_FUSED: dict = {}


def fused_context(cls, q, k, v, *, causal: bool, group, sm_scale: Optional[float], layout: str = "contiguous"):
    """The fused context of `cls` (ops/fused_attention.py) for these operands, made on first use."""
    group, _, _ = group_rank_world(group)  # None: the default group where torch.distributed runs
    z, h, s, d = q.shape
    scale = d**-0.5 if sm_scale is None else float(sm_scale)
    name = None if group is None else getattr(group, "group_name", id(group))
    key = (cls.__name__, name, z, h, k.shape[1], s, d, q.dtype, q.device, bool(causal), scale, layout)
    if key not in _FUSED:
        _FUSED[key] = cls(
            group,
            z=z,
            h=h,
            h_kv=k.shape[1],
            s_loc=s,
            d=d,
            dtype=q.dtype,
            device=q.device,
            causal=causal,
            sm_scale=scale,
            layout=layout,
        )
    return _FUSED[key]


def _expand_kv(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    group = q.shape[1] // t.shape[1]
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _causal_mask(n_q: int, n_kv: int, q_start: int, device) -> torch.Tensor:
    return (torch.arange(n_q, device=device)[:, None] + q_start) >= torch.arange(n_kv, device=device)[None, :]


def local_attention(
    q, k, v, *, causal: bool = False, q_start: int = 0, sm_scale: Optional[float] = None, compute: str = "sdpa"
) -> torch.Tensor:
    """Attention of q's rows (at positions q_start ..) over all of k, v (GQA allowed)."""
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    if compute == "triton":
        from syncopate.kernels.attention import attention_fwd_kernel, attention_reference_args

        q, k, v = (t.contiguous() for t in (q, k, v))
        o = torch.empty_like(q)
        block = 16 if q.shape[2] <= 64 else 64
        tiles = -(-q.shape[2] // block) * q.shape[0] * q.shape[1]
        attention_fwd_kernel[(tiles,)](
            *attention_reference_args(q, k, v, o, scale, q_start),
            HEAD_DIM=q.shape[-1],
            BLOCK_M=block,
            BLOCK_N=block,
            CAUSAL=causal,
        )
        return o
    # Causal over the whole sequence (q_start 0, as many keys as queries) is SDPA's own is_causal,
    # which its flash and cuDNN kernels run; only a shifted diagonal needs an explicit mask (that
    # falls back to a slower kernel: measured 3.9x on nvidia-h200, 2026-11-25).
    aligned = q_start == 0 and q.shape[2] == k.shape[2]
    mask = _causal_mask(q.shape[2], k.shape[2], q_start, q.device) if causal and not aligned else None
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and aligned, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )


def _flash_with_lse(q, k, v, *, causal: bool, scale: float):
    """(o, lse) from PyTorch's flash-attention kernel (CUDA, fp16/bf16, head dim <= 256), or None
    where it does not apply: the ring's sequential steps then run at SDPA's speed, not as fp32
    matmuls."""
    if not (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256):
        return None
    k, v = _expand_kv(q, k), _expand_kv(q, v)
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    return out[0].float(), out[1].unsqueeze(-1)


def attention_with_lse(q, k, v, *, causal: bool, scale: float):
    """(o, lse) of q over one K/V piece, in float32: o the piece's softmax-weighted values, lse the
    log of its softmax denominator per row. Causal: the piece is the rows' own (query i sees keys
    0..i). On a GPU PyTorch's flash kernel computes it."""
    fast = _flash_with_lse(q, k, v, causal=causal, scale=scale)
    if fast is not None:
        return fast
    mask = _causal_mask(q.shape[2], k.shape[2], 0, q.device) if causal else None
    scores = torch.matmul(q.float(), _expand_kv(q, k).float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse))
    return torch.matmul(weights, _expand_kv(q, v).float()), lse


def merge_partials(
    o: Optional[torch.Tensor], lse: Optional[torch.Tensor], o_step: torch.Tensor, lse_step: torch.Tensor
):
    """The running (o, lse) with one more piece's (o_step, lse_step) merged in."""
    if o is None:
        return o_step, lse_step
    new = torch.logaddexp(lse, lse_step)
    safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
    return o * torch.exp(lse - safe) + o_step * torch.exp(lse_step - safe), new


def ring_steps(q, pieces, rank: int, world: int, *, causal: bool, scale: float) -> torch.Tensor:
    """The ring's per-step attention and merge, given the K/V pieces in the order they arrive:
    `pieces` yields (piece index, k, v), own piece first. Causal: pieces after `rank` are skipped
    (never computed), the own piece is masked on its diagonal."""
    o = lse = None
    for p, k, v in pieces:
        if causal and p > rank:
            continue
        o, lse = merge_partials(o, lse, *attention_with_lse(q, k, v, causal=causal and p == rank, scale=scale))
    return o.to(q.dtype)


def _ring_pieces(k, v, group, rank: int, world: int):
    """Own piece, then each step's: rank r sends what it holds to r + 1 and receives from r - 1,
    into the other of two buffers (the ring-pass plan's double buffer)."""
    import torch.distributed as dist

    yield rank, k, v
    held = torch.stack([k, v]).contiguous()
    spare = torch.empty_like(held)
    for step in range(1, world):
        ops = [
            dist.P2POp(dist.isend, held, dist.get_global_rank(group, (rank + 1) % world), group),
            dist.P2POp(dist.irecv, spare, dist.get_global_rank(group, (rank - 1) % world), group),
        ]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        held, spare = spare, held
        yield (rank - step) % world, held[0], held[1]


@functools.lru_cache(maxsize=256)
def _predicted(kind: str, world, batch, heads, kv_heads, seq_local, head_dim, causal, elem_bytes):
    from syncopate import _core
    from syncopate.ops.choice import calibration

    return _core.predict_attention(
        kind,
        calibration(),
        world=world,
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        seq_local=seq_local,
        head_dim=head_dim,
        causal=causal,
        elem_bytes=elem_bytes,
    )


def choose_mode(kind: str, q: torch.Tensor, k: torch.Tensor, world: int, causal: bool) -> str:
    """mode="auto": "fused" where the simulator predicts that it pays (the same prediction at
    every rank: it depends on shapes only) and q is on a GPU, else "sequential"."""
    if not q.is_cuda:
        return "sequential"
    z, h, s_loc, d = q.shape
    prediction = _predicted(kind, world, z, h, k.shape[1], s_loc, d, causal, q.element_size())
    return prediction.decision


def zigzag_order(world: int) -> list:
    """[(rank, half)] of the 2W half-pieces in global order: half-piece p is the first half of
    rank p for p < W, else the second half of rank 2W - 1 - p (plan/sequence_parallel.hpp)."""
    return [(p, 0) if p < world else (2 * world - 1 - p, 1) for p in range(2 * world)]


def zigzag_gather(x: torch.Tensor, group, world: int) -> torch.Tensor:
    """[..., S_loc, D] zig-zag pieces of every rank -> [..., W * S_loc, D] in global order."""
    import torch.distributed as dist

    got = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(got, x.contiguous(), group=group)
    half = x.shape[-2] // 2
    return torch.cat([got[r][..., h * half : (h + 1) * half, :] for r, h in zigzag_order(world)], dim=-2)


def _zigzag_attention(q, k, v, group, rank: int, world: int, *, causal: bool, scale: float):
    """The sequential zig-zag form: K/V gathered into global order, this rank's two query halves
    masked at their own positions."""
    kv = zigzag_gather(torch.stack([k, v]), group, world)
    mask = None
    if causal:
        from syncopate.kernels.attention import zigzag_positions

        q_start, q_split, q_start2 = zigzag_positions(rank, world, q.shape[2])
        rows = torch.arange(q.shape[2], device=q.device)
        positions = torch.where(rows >= q_split, rows - q_split + q_start2, rows + q_start)
        mask = positions[:, None] >= torch.arange(kv.shape[3], device=q.device)[None, :]
    return torch.nn.functional.scaled_dot_product_attention(
        q, kv[0], kv[1], attn_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )


LAYOUTS = ("contiguous", "zigzag")


def wants_grad(*tensors) -> bool:
    """Whether autograd records this call (grad enabled and some operand requires grad)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def trainable(kind: str, q, k, v, **kwargs):
    from syncopate.ops.seq_attention_grad import trainable as with_backward

    return with_backward(kind, q, k, v, **kwargs)


def ring_attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    group=None,
    sm_scale: Optional[float] = None,
    mode: str = "auto",
    compute: str = "sdpa",
    layout: str = "contiguous",
) -> torch.Tensor:
    """Ring attention (see the module): this rank's rows of attention over the whole sequence.
    `layout="zigzag"`: rank r holds half-pieces r and 2W - 1 - r of the sequence (S_loc / 2
    positions each, in that order; S_loc even), the load-balanced causal layout; q, k, v and the
    output are this rank's two halves."""
    _check("ring_attention", q, k, v, mode, compute)
    if layout not in LAYOUTS:
        raise UserError(f"ring_attention: layout={layout!r}, expected one of {LAYOUTS}")
    if layout == "zigzag" and q.shape[2] % 2:
        raise ShapeError(f"ring_attention: layout='zigzag' needs an even S_loc (two halves), got {q.shape[2]}")
    if wants_grad(q, k, v):  # the sequential form with its backward (seq_attention_grad.py)
        if layout != "contiguous":
            raise UserError(f"ring_attention: backward with layout={layout!r} is not built; use layout='contiguous'")
        return trainable("ring", q, k, v, causal=causal, group=group, sm_scale=sm_scale, mode=mode, compute=compute)
    if mode == "auto":
        mode = choose_mode("ring", q, k, group_rank_world(group)[2], causal)
    if mode == "fused":  # the transformed kernel, whatever `compute` says
        from syncopate.ops.fused_attention import RingAttention

        ctx = fused_context(RingAttention, q, k, v, causal=causal, group=group, sm_scale=sm_scale, layout=layout)
        return ctx(q, k, v)
    if compute == "triton":
        raise UserError(
            "ring_attention: compute='triton' needs the attention kernel's log-sum-exp, which it "
            "does not return yet; use compute='sdpa'"
        )
    group, rank, world = group_rank_world(group)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    if world == 1:  # zig-zag at one rank: half-pieces 0 and 1, the sequence in order
        return local_attention(q, k, v, causal=causal, sm_scale=scale)
    if layout == "zigzag":
        return _zigzag_attention(q, k, v, group, rank, world, causal=causal, scale=scale)
    return ring_steps(q, _ring_pieces(k, v, group, rank, world), rank, world, causal=causal, scale=scale)


def _heads_to_ranks(x: torch.Tensor, world: int) -> torch.Tensor:
    """[Z, H, S, D] -> [W, Z, H/W, S, D]: head group j first, to be sent to rank j."""
    z, h, s, d = x.shape
    return x.reshape(z, world, h // world, s, d).permute(1, 0, 2, 3, 4).contiguous()


def ulysses_attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    group=None,
    sm_scale: Optional[float] = None,
    mode: str = "auto",
    compute: str = "sdpa",
) -> torch.Tensor:
    """Ulysses attention (see the module): this rank's rows of attention over the whole sequence."""
    _check("ulysses_attention", q, k, v, mode, compute)
    group, rank, world = group_rank_world(group)
    for name, heads in (("q", q.shape[1]), ("k/v", k.shape[1])):
        if heads % world != 0:
            raise ShapeError(
                f"ulysses_attention: {heads} {name} heads cannot be shared by {world} ranks: the "
                "world size must divide the head count (plan/sequence_parallel.hpp)"
            )
    if wants_grad(q, k, v):  # the sequential form with its backward (seq_attention_grad.py)
        return trainable("ulysses", q, k, v, causal=causal, group=group, sm_scale=sm_scale, mode=mode, compute=compute)
    if mode == "auto":
        mode = choose_mode("ulysses", q, k, world, causal)
    if mode == "fused":
        from syncopate.ops.fused_attention import UlyssesAttention

        return fused_context(UlyssesAttention, q, k, v, causal=causal, group=group, sm_scale=sm_scale)(q, k, v)
    if world == 1:
        return local_attention(q, k, v, causal=causal, sm_scale=sm_scale, compute=compute)
    import torch.distributed as dist

    def exchange(x):  # [Z, H, S_loc, D] -> [Z, H/W, S, D]: the all-to-all over heads
        sent = _heads_to_ranks(x, world)
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=group)  # got[r]: rank r's piece of my heads
        w, z, h, s, d = got.shape
        return got.permute(1, 2, 0, 3, 4).reshape(z, h, w * s, d)

    o_heads = local_attention(exchange(q), exchange(k), exchange(v), causal=causal, sm_scale=sm_scale, compute=compute)
    z, h, n, d = o_heads.shape
    s = n // world
    back = o_heads.reshape(z, h, world, s, d).permute(2, 0, 1, 3, 4).contiguous()  # piece r to rank r
    got = torch.empty_like(back)
    dist.all_to_all_single(got, back, group=group)  # got[j]: head group j of my positions
    return got.permute(1, 0, 2, 3, 4).reshape(z, world * h, s, d)
