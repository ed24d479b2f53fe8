"""Backward of the sequence-parallel attention ops (ops/seq_attention.py): what runs when q, k or v
requires grad (docs/SEQUENCE_PARALLEL.md, "Backward").

    o = ulysses_attention(q, k, v, causal=True)   # q.requires_grad: the forward below, then
    o.sum().backward()                            # q.grad, k.grad, v.grad on every rank

Both ops then run their sequential form as a `torch.autograd.Function` that keeps what FlashAttention's
own backward keeps, and nothing else: the operands as the local attention saw them, its output in
the input dtype and the log-sum-exp of each query row (float32, one value per row). The backward
recomputes the softmax from them (no second forward, no score matrix held between the passes).

Ulysses (the operands of the local attention are the head-sharded full sequences):
    forward   one all-to-all of [q | k | v] (sequence-sharded -> H/W heads of the whole sequence),
              local attention with its log-sum-exp, the all-to-all back
    saved     q_h, k_h, v_h (as many elements as q, k, v), o_h (as o), lse [Z, H/W, S] float32
    backward  the all-to-all of grad_o (sequence -> heads), the local attention backward, one
              all-to-all of [dq | dk | dv] back (heads -> sequence). GQA: dk, dv summed over the
              query heads that share each K/V head (as SDPA's enable_gqa does).
Ring (rank r keeps its Q block; the K/V pieces travel r -> r + 1 as in the forward):
    forward   the forward's ring (the next piece's transfer overlaps this piece's attention), the
              log-sum-exp merge; causal skips the pieces after the own one
    saved     q, k, v (this rank's pieces), o, lse [Z, H, S_loc] float32
    backward  the K/V pieces travel the ring again (W - 1 steps, each overlapping the step's
              compute) and with each piece its dk/dv partial sum (float32): a rank adds its part
              and passes the sum on, so after W passes every rank holds its own piece's full dk,
              dv (a ring reduce-scatter, O(S_loc) memory: the gathered K/V is never held). dq
              stays local. Causal: a rank adds nothing for a piece after its own (passes it on).

The local attention and its backward: on a GPU in fp16/bf16 with head dim <= 256, PyTorch's flash
kernels (`aten._scaled_dot_product_flash_attention` and its `_backward`, given the final output
and log-sum-exp: that is what makes one ring step's piece gradients exact); elsewhere (CPU, float32)
the same formulas as float32 matmuls (the score matrix of one piece at a time, transient).

Communication: torch.distributed collectives of the op's group (all_to_all_single, and
isend/irecv for the ring). The backward's collectives feed torch's own attention backward, not a
Syncopate kernel that could consume chunks as they land, so a Syncopate plan would add nothing
over NCCL's; and a fused context's heap is a cache shared by every call of its shape (every layer),
so nothing can stay there between a layer's forward and its backward. Over gloo (ranks sharing a
GPU: the tests) CUDA tensors are staged through host copies, as gloo's own CUDA paths are not
relied on.

mode="fused" and compute="triton" have no backward (the fused kernel and Syncopate's attention
kernel return neither the log-sum-exp nor the head-sharded operands): refused by name when an
operand requires grad; mode="auto" runs the sequential form then.
"""

from __future__ import annotations

from typing import Optional

import torch

from syncopate.errors import UserError
from syncopate.ops.seq_attention import _causal_mask, _expand_kv, _heads_to_ranks, merge_partials


def check_trainable(who: str, mode: str, compute: str) -> None:
    """Refuses, by name, the configurations that have no backward."""
    if mode == "fused":
        raise UserError(
            f"{who}: mode='fused' has no backward (the fused kernel keeps neither the log-sum-exp nor "
            "the operands the backward needs) and q, k or v requires grad; use mode='sequential' or "
            "mode='auto' (which runs the sequential form under autograd), or call it under torch.no_grad()"
        )
    if compute == "triton":
        raise UserError(
            f"{who}: compute='triton' has no backward (Syncopate's attention kernel does not return the "
            "log-sum-exp the backward needs) and q, k or v requires grad; use compute='sdpa'"
        )


# --- communication --------------------------------------------------------------------------------


class _Done:
    def __init__(self, tensors):
        self.tensors = tensors

    def wait(self):
        return self.tensors


class _Pending:
    def __init__(self, requests, tensors, sent):
        self.requests, self.tensors = requests, tensors
        self.sent = sent  # kept alive until the transfer is done

    def wait(self):
        for request in self.requests:
            request.wait()
        self.sent = None
        return self.tensors


class GroupComm:
    """The two exchanges the ops need, over a torch.distributed group (None: the default group).

    all_to_all(x): x [W, ...], block j to rank j; returns [W, ...], block j from rank j.
    ring_pass(tensors, tag).wait(): sends each tensor to rank + 1, returns those of rank - 1.
    Over gloo, CUDA tensors go through host copies (synchronously)."""

    def __init__(self, group, rank: int, world: int):
        import torch.distributed as dist

        self.group, self.rank, self.world = group, rank, world
        self.host_staged = world > 1 and dist.get_backend(group) == "gloo"

    def _on_wire(self, t: torch.Tensor) -> torch.Tensor:
        return t.cpu() if self.host_staged and t.is_cuda else t.contiguous()

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        sent = self._on_wire(x)
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=self.group)
        return got.to(x.device)

    def ring_pass(self, tensors, tag: int):
        import torch.distributed as dist

        to = dist.get_global_rank(self.group, (self.rank + 1) % self.world)
        frm = dist.get_global_rank(self.group, (self.rank - 1) % self.world)
        sent = [self._on_wire(t) for t in tensors]
        got = [torch.empty_like(t) for t in sent]
        ops = []
        for s, g in zip(sent, got):
            ops.append(dist.P2POp(dist.isend, s, to, self.group, tag))
            ops.append(dist.P2POp(dist.irecv, g, frm, self.group, tag))
        requests = dist.batch_isend_irecv(ops)
        if any(t.is_cuda and not s.is_cuda for t, s in zip(tensors, sent)):
            for request in requests:
                request.wait()
            return _Done([g.to(t.device) for g, t in zip(got, tensors)])
        return _Pending(requests, got, sent)


def group_comm(group) -> GroupComm:
    from syncopate.ops.seq_attention import group_rank_world

    return GroupComm(*group_rank_world(group))


# --- the local attention and its backward ----------------------------------------------------------


def _flash_applies(q: torch.Tensor) -> bool:
    return q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256


def attention_forward(q, k, v, *, causal: bool, scale: float):
    """(o, lse [Z, H, S_q] float32, flash) of q over k, v (GQA allowed); causal: aligned
    diagonal (query i sees keys 0..i). PyTorch's flash kernel where it applies (o in q's dtype;
    `flash`: its sequence-offset and RNG-state tensors, which its backward takes back; no
    dropout), else float32 matmuls (o float32, flash None)."""
    if _flash_applies(q):
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q, _expand_kv(q, k), _expand_kv(q, v), 0.0, causal, False, scale=scale
        )
        return out[0], out[1][..., : q.shape[2]].float(), (out[2], out[3], out[6], out[7])
    scores = torch.matmul(q.float(), _expand_kv(q, k).float().transpose(-1, -2)) * scale
    if causal:
        scores = scores.masked_fill(~_causal_mask(q.shape[2], k.shape[2], 0, q.device), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    return torch.matmul(weights, _expand_kv(q, v).float()), lse, None


def _sum_groups(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[Z, H, S, D] -> [Z, H_KV, S, D]: the sum over the query heads sharing a K/V head."""
    z, h, s, d = t.shape
    return t if h == kv_heads else t.reshape(z, kv_heads, h // kv_heads, s, d).sum(2)


def attention_backward(grad_o, q, k, v, o, lse, *, causal: bool, scale: float, flash=None):
    """(dq, dk, dv) in float32 of one piece's attention, given the **final** o and lse of the rows
    (over every piece): P = exp(q k^T * scale - lse) is then the piece's share of the softmax and
    the gradients are the piece's exact part. grad_o, o like q; lse [Z, H, S_q] float32; flash:
    what attention_forward returned for it (None: the float32 formulas)."""
    if flash is not None:
        cum_seq_q, cum_seq_k, rng_state, unused = flash
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            grad_o.contiguous(),
            q,
            _expand_kv(q, k),
            _expand_kv(q, v),
            o if o.stride(-1) == 1 else o.contiguous(),
            lse.contiguous(),
            cum_seq_q,
            cum_seq_k,
            q.shape[2],
            k.shape[2],
            0.0,
            causal,
            rng_state,
            unused,
            scale=scale,
        )
        h_kv = k.shape[1]
        return dq.float(), _sum_groups(dk.float(), h_kv), _sum_groups(dv.float(), h_kv)
    qf, kf, vf = q.float(), _expand_kv(q, k).float(), _expand_kv(q, v).float()
    go = grad_o.float()
    scores = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    p = torch.exp(scores - lse.unsqueeze(-1))
    if causal:
        p = p.masked_fill(~_causal_mask(q.shape[2], k.shape[2], 0, q.device), 0.0)
    delta = (go * o.float()).sum(-1, keepdim=True)  # rowsum(dO * O): the softmax's Jacobian term
    ds = p * (torch.matmul(go, vf.transpose(-1, -2)) - delta)
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qf) * scale
    dv = torch.matmul(p.transpose(-1, -2), go)
    return dq, _sum_groups(dk, k.shape[1]), _sum_groups(dv, k.shape[1])


# --- Ulysses --------------------------------------------------------------------------------------


def _to_heads(comm, tensors):
    """Sequence-sharded [Z, H_i, S_loc, D] tensors -> [Z, H_i / W, W * S_loc, D], one all-to-all."""
    w = comm.world
    parts = [_heads_to_ranks(t, w) for t in tensors]  # [W, Z, H_i / W, S_loc, D]
    got = comm.all_to_all(torch.cat(parts, dim=2))  # got[r]: rank r's positions of my heads
    out = []
    for piece in got.split([p.shape[2] for p in parts], dim=2):
        _, z, h, s, d = piece.shape
        out.append(piece.permute(1, 2, 0, 3, 4).reshape(z, h, w * s, d))
    return out


def _to_sequence(comm, tensors):
    """Head-sharded [Z, H_i / W, W * S_loc, D] tensors -> [Z, H_i, S_loc, D], one all-to-all."""
    w = comm.world
    parts = []
    for t in tensors:
        z, h, n, d = t.shape
        parts.append(t.reshape(z, h, w, n // w, d).permute(2, 0, 1, 3, 4))  # positions of rank r to r
    got = comm.all_to_all(torch.cat(parts, dim=2).contiguous())  # got[j]: head group j, my positions
    out = []
    for piece in got.split([p.shape[2] for p in parts], dim=2):
        _, z, h, s, d = piece.shape
        out.append(piece.permute(1, 0, 2, 3, 4).reshape(z, w * h, s, d))
    return out


class UlyssesFunction(torch.autograd.Function):
    """Ulysses attention with its backward (see the module)."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, comm):
        heads = _to_heads(comm, (q, k, v)) if comm.world > 1 else (q, k, v)
        o_h, lse, flash = attention_forward(*heads, causal=causal, scale=scale)
        o_h = o_h.to(q.dtype)
        ctx.save_for_backward(*heads, o_h, lse)
        ctx.causal, ctx.scale, ctx.comm, ctx.flash = causal, scale, comm, flash
        return _to_sequence(comm, (o_h,))[0] if comm.world > 1 else o_h

    @staticmethod
    def backward(ctx, grad_o):
        q_h, k_h, v_h, o_h, lse = ctx.saved_tensors
        comm = ctx.comm
        grad_h = _to_heads(comm, (grad_o.contiguous(),))[0] if comm.world > 1 else grad_o
        grads = attention_backward(grad_h, q_h, k_h, v_h, o_h, lse, causal=ctx.causal, scale=ctx.scale, flash=ctx.flash)
        grads = [g.to(q_h.dtype) for g in grads]
        if comm.world > 1:
            grads = _to_sequence(comm, grads)
        dq, dk, dv = grads
        return dq, dk, dv, None, None, None


# --- ring -----------------------------------------------------------------------------------------

_KV_TAG, _GRAD_TAG = 1, 2  # the two transfers of a backward step may be in flight together (gloo matches tags)


class RingFunction(torch.autograd.Function):
    """Ring attention with its backward (see the module)."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, comm):
        rank, world = comm.rank, comm.world
        kv = torch.stack([k, v])
        o = lse = flash = None
        for step in range(world):
            piece = (rank - step) % world
            transfer = comm.ring_pass([kv], _KV_TAG) if step < world - 1 else None
            if not (causal and piece > rank):
                o_p, lse_p, flash = attention_forward(q, kv[0], kv[1], causal=causal and piece == rank, scale=scale)
                o, lse = merge_partials(o, lse, o_p, lse_p.unsqueeze(-1))  # float32 from the second piece on
            if transfer is not None:
                kv = transfer.wait()[0]
        out = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse.squeeze(-1).contiguous())
        ctx.causal, ctx.scale, ctx.comm, ctx.flash = causal, scale, comm, flash
        return out

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, out, lse = ctx.saved_tensors
        comm, causal, scale = ctx.comm, ctx.causal, ctx.scale
        rank, world = comm.rank, comm.world
        grad_o = grad_o.contiguous()
        kv = torch.stack([k, v])
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)  # the held piece's partial sums
        for step in range(world):
            piece = (rank - step) % world  # the piece held now (with its partial sums)
            transfer = comm.ring_pass([kv], _KV_TAG) if step < world - 1 else None
            if not (causal and piece > rank):
                dq_p, dk_p, dv_p = attention_backward(
                    grad_o, q, kv[0], kv[1], out, lse, causal=causal and piece == rank, scale=scale, flash=ctx.flash
                )
                dq += dq_p
                dkv[0] += dk_p
                dkv[1] += dv_p
            if world > 1:  # on to the next rank; after W passes the own piece's sums come home
                dkv = comm.ring_pass([dkv], _GRAD_TAG).wait()[0]
            if transfer is not None:
                kv = transfer.wait()[0]
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None


# Run eagerly under torch.compile (a graph break): traced by dynamo, the Function's backward
# (collectives, flash backward, a Python object in ctx) came out as zero gradients, silently
# (torch 2.11, aot_eager; test_seq_attention_grad.py checks the compiled gradients).
@torch.compiler.disable
def trainable(
    kind: str, q, k, v, *, causal: bool, group, sm_scale: Optional[float], mode: str, compute: str, comm=None
):
    """The op `kind` ("ulysses" or "ring") with its backward; the operands were checked by the op."""
    check_trainable(f"{kind}_attention", mode, compute)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else float(sm_scale)
    comm = group_comm(group) if comm is None else comm
    fn = UlyssesFunction if kind == "ulysses" else RingFunction
    return fn.apply(q, k, v, bool(causal), scale, comm)
