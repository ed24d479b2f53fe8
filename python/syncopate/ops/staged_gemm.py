"""The fused GEMM of the staged GEMM+RS and GEMM+AR (GemmRs / GemmAr(reduce="epilogue")):
kernels/gemm_reduce.py's `gemm_reduce_kernel` rewritten by the transformer.

The plan (make_plan("reduce-scatter" | "all-reduce", ..., staging="p"): tensor "c" [1, M, N],
staging tensor "p" [W, M/W, N]; docs/PYTHON.md) moves, for every ordered pair s != r, rank s's
partial of row box r by plain copy chunks into slot p[s] on rank r. The kernel's tiles outside
this rank's box store c and notify the ready slots of those chunks; the tiles of this rank's box
wait, after their K loop, for the landing slots of every chunk staging their rows, add the
partials in registers and store the sum once: reduce-scatter, straight into the caller's `out`
[M/W, N] (no add kernel, no atomics, no dst-ready gate, no copy-out); all-reduce, into this
rank's own box of "c" in the heap (the kernel's `out` is that view), after which the same
annotated statement notifies the ready slots of the gather chunks that push the reduced box to
every other rank (they land on the peers once the peers' own partials of that box were stored,
dst-ready, and staged, a plan dependency).

The lowering reads the accesses of STAGED_ACCESSES (the same for both collectives): "p" is
consumed with m_local_shard (its rows are this rank's shard of the grid rows), "c" produced.
"""

from __future__ import annotations


import torch

from syncopate.errors import InternalError, UserError
from syncopate.launch import transformed_info
from syncopate.ops.fused_gemm import FusedGemm, tma_describable, transformed_kernel
from syncopate.settings import Env, env

STAGED_KERNEL = "gemm_reduce_kernel"
STAGED_MODULE = "syncopate.kernels.gemm_reduce"
# (tensor, role, m_dim, n_dim, m_local_shard): c is [1, M, N], p is [W, M/W, N].
STAGED_ACCESSES = (("c", "produce", 1, 2), ("p", "consume", 1, 2, True))


def staged_unsupported(m: int, n: int, k: int, world: int, block_m: int, dtype: torch.dtype):
    """Why the staged epilogue cannot run this shape (a sentence), or None if it can."""
    if m % world != 0:
        return f"m={m} is not a multiple of the world size {world}"
    shard = m // world
    if shard % block_m != 0:
        return (
            f"the shard of {shard} rows is not a multiple of the GEMM's BLOCK_M={block_m}, so a "
            "tile would straddle two ranks' boxes"
        )
    if not tma_describable(m, n, k, dtype):
        return (
            f"TMA cannot describe the operands (a row pitch of K={k} or N={n} elements is not a "
            "multiple of 16 bytes); the staged kernel has no pointer-load variant"
        )
    return None


def check_accesses_match(kernel, accesses) -> None:
    """InternalError unless the kernel's annotations (the transformer's __syncopate__ accesses)
    describe exactly `accesses`, which the lowering and the workspace use."""
    described = {
        (a["tensor"], a["role"], a["m_dim"], a["n_dim"], bool(a.get("m_local_shard", False)))
        for a in transformed_info(kernel)["accesses"]
    }
    given = {(t, role, md, nd, bool(rest[0]) if rest else False) for t, role, md, nd, *rest in accesses}
    if described != given:
        raise InternalError(
            f"syncopate.ops: {STAGED_KERNEL}'s annotations describe the accesses "
            f"{sorted(described)}, the op lowers {sorted(given)}"
        )


class StagedReduceGemm(FusedGemm):
    """One rank's fused GEMM+RS / GEMM+AR with the reduction in the epilogue, for fixed shapes,
    layout, plan and tile order. launch(a, b, c, signals, epoch_word, p, out): c the heap's [M, N]
    view of "c", p the heap's "p" [W, M/W, N], out a [M/W, N] view with row pitch N: the
    caller's tensor (reduce-scatter) or c's own rows [rank * M/W, (rank + 1) * M/W) (all-reduce;
    the kernel's masks keep the two stores disjoint)."""

    def __init__(
        self,
        *,
        plan,
        rank: int,
        world: int,
        m: int,
        n: int,
        k: int,
        dtype: torch.dtype,
        b_layout: str,
        config,
        tile_order: str,
        device: torch.device,
        wait_bound_ns: int,
        num_programs: int,
        accesses=STAGED_ACCESSES,
    ):
        why = staged_unsupported(m, n, k, world, config.block_m, dtype)
        if why is not None:
            raise UserError(f"StagedReduceGemm: {why}")
        self.use_tma = True
        self.kernel_name = STAGED_KERNEL
        self.kernel = transformed_kernel(STAGED_KERNEL, STAGED_MODULE)
        check_accesses_match(self.kernel, accesses)
        self._bind(
            plan=plan,
            rank=rank,
            m=m,
            n=n,
            b_layout=b_layout,
            config=config,
            accesses=accesses,
            tile_order=tile_order,
            device=device,
            wait_bound_ns=wait_bound_ns,
            num_programs=num_programs,
        )
        shard = m // world
        self.kwargs.update(
            NUM_SLOTS=world, B_IS_NK=self.b_is_nk, WARP_SPECIALIZE=config.warp_specialize, FLATTEN=config.flatten
        )
        b_pitch = k if self.b_is_nk else n
        # After the pointers a, b, c, p, out: M, N, K, stride_am, stride_b, stride_cm, stride_ps,
        # stride_pm, stride_om, shard_begin, shard_rows, skip_slot (this rank's own slot of p,
        # never written), num_programs.
        self.scalars = (m, n, k, k, b_pitch, n, shard * n, n, n, rank * shard, shard, rank, self.num_programs)
        self._finish_binding()


# reduce="auto" takes the staged kernel only when this is set (why: docs/RUNTIME.md, "Staged
# epilogue").
AUTO_STAGED_ENV = Env.auto_staged.name


def staged_in_auto() -> bool:
    """Whether reduce="auto" may choose the staged epilogue (see AUTO_STAGED_ENV)."""
    return env.auto_staged


# The collectives whose plans have a staged template (make_plan(..., staging=)).
STAGED_COLLECTIVES = ("reduce-scatter", "all-reduce")


def staged_plan(
    *, world: int, m: int, n: int, split: int, dtype: str, backend: str, collective: str = "reduce-scatter"
):
    """The staged plan of C [M, N] (reduce-scatter, or all-reduce: the same staging chunks, then
    each owner pushes its reduced box to every other rank): tensor "c" [1, M, N] (dim 1),
    staging "p"."""
    import syncopate as sy

    if collective not in STAGED_COLLECTIVES:
        raise UserError(
            f"staged_plan: collective {collective!r} has no staged template; use one of {STAGED_COLLECTIVES}"
        )
    return sy.make_plan(
        collective,
        world_size=world,
        shape=[1, m, n],
        dim=1,
        algorithm="direct",
        split=split,
        dtype=dtype,
        backend=backend,
        tensor="c",
        staging="p",
    )
