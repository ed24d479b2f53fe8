"""GEMM+AR: all_reduce(a @ b_shard), the reduction overlapped with the GEMM.

    op = GemmAr(group, m=M, k=K_local, n=N, dtype=torch.bfloat16)
    out = op(a, b_shard)          # a [M, K/w], b_shard [K/w, N]  ->  out [M, N] on every rank

The producer machinery of gemm_rs.py with an all-reduce plan (reduce-scatter then all-gather
in one plan): tiles announce themselves, reduce-add chunks leave as tiles are ready, the
gathered shards land once the destination's tiles are stored.
"""

from __future__ import annotations

from syncopate.ops.gemm_rs import ProducerGemm, producer_forward


class GemmAr(ProducerGemm):
    """Context of GEMM+AR: out [m, n] = sum over ranks of a @ b_shard, on every rank."""

    collective = "all-reduce"

    def _result_view(self):
        return self.c


def forward(a, b, *, group):
    """The torch custom op's implementation (custom_ops.py): checked tensors, a ProcessGroup."""
    return producer_forward(GemmAr, a, b, group)
