"""Ready-made fused ops, callable with plain torch tensors under torchrun (needs torch).

    import syncopate.ops as sops
    y = sops.ag_gemm(x_shard, w)        # all_gather(x_shard) @ w
    z = sops.gemm_rs(y, w2_shard)       # reduce_scatter(y @ w2_shard)
    r = sops.gemm_ar(y, w2_shard)       # all_reduce(y @ w2_shard)
    y, x = sops.ag_gemm_gathered(x_shard, w)   # ag_gemm, and the gathered x
    o = sops.ulysses_attention(q, k, v, causal=True)   # sequence-parallel attention
    o = sops.ring_attention(q, k, v, causal=True)      # (seq_attention.py; backward:
                                                       # seq_attention_grad.py; mode="fused":
                                                       # fused_attention.py, forward only)

Each is a torch custom op (torch.ops.syncopate.*, see custom_ops.py) with a backward formula
(autograd.py), so it can sit inside a torch.compile(fullgraph=True) region and train. Without
torch.distributed they run as one rank. The GPU implementations (context objects owning symmetric
buffers and kernels) are the submodules syncopate.ops.ag_gemm / gemm_rs / gemm_ar.
"""

import sys as _sys
import types as _types

from syncopate.ops.custom_ops import NO_GROUP, OP_NAMES, SUPPORTED_DTYPES, ag_gemm, ag_gemm_gathered, gemm_ar, gemm_rs
from syncopate.ops.seq_attention import ring_attention, ulysses_attention

__all__ = [
    "ag_gemm",
    "ag_gemm_gathered",
    "gemm_rs",
    "gemm_ar",
    "NO_GROUP",
    "OP_NAMES",
    "SUPPORTED_DTYPES",
    "ulysses_attention",
    "ring_attention",
]


class _OpsPackage(_types.ModuleType):
    """Keeps `syncopate.ops.ag_gemm` (etc.) the public function once the implementation submodule
    of the same name is imported.

    Python's import system sets every imported submodule as an attribute of its package, so
    `import syncopate.ops.ag_gemm` anywhere would otherwise replace the function with the module.
    The submodule stays reachable as usual: `from syncopate.ops.ag_gemm import X` reads
    sys.modules, not this attribute.
    """

    def __setattr__(self, name, value):
        if name in OP_NAMES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _OpsPackage
