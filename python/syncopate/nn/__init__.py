"""Tensor-parallel layers on the fused ops (needs torch).

    import syncopate.nn as snn
    up = snn.ColumnParallelLinear(4096, 14336, bias=False)   # x [S/w, 4096] -> [S, 14336/w]  (AG+GEMM)
    down = snn.RowParallelLinear(14336, 4096, bias=False)    # [S, 14336/w] -> [S/w, 4096]    (GEMM+RS)

See parallel_linear.py; docs/PYTHON.md, "Tensor-parallel layers".
"""

from syncopate.nn.parallel_linear import ColumnParallelLinear, RowParallelLinear, allreduce_sequence_parallel_grads

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "allreduce_sequence_parallel_grads"]
