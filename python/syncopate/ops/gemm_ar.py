"""GEMM+AR: all_reduce(a @ b_shard), the reduction overlapped with the GEMM.

    op = GemmAr(group, m=M, k=K_local, n=N, dtype=torch.bfloat16)
    out = op(a, b_shard)          # a [M, K/w], b_shard [K/w, N]  ->  out [M, N] on every rank

The producer machinery of gemm_rs.py with an all-reduce plan (reduce-scatter then all-gather
in one plan): tiles announce themselves, reduce-add chunks leave as tiles are ready, the
gathered shards land once the destination's tiles are stored.

reduce="epilogue" (ProducerGemm, shared with GemmRs): the staged all-reduce plan
(make_plan("all-reduce", ..., staging="p")): plain copy chunks stage every other rank's partial
of this rank's box in "p"; the fused kernel's own tiles add them in the epilogue, store the sum
into this rank's box of the heap's C and notify the gather chunks that push that box to every
other rank; the call then waits for the gathered boxes and copies C out.
"""

from __future__ import annotations

from syncopate.ops.gemm_rs import ProducerGemm, producer_forward


class GemmAr(ProducerGemm):
    """Context of GEMM+AR: out [m, n] = sum over ranks of a @ b_shard, on every rank.

    reduce (see ProducerGemm): "epilogue" stores the reduced own box in the heap (the gather
    chunks read it there) and copies all of C out after the gathered boxes landed.
    """

    collective = "all-reduce"
    staged_writes_out = False

    def _result_view(self):
        return self.c


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup."""
    return producer_forward(GemmAr, a, b, group)
