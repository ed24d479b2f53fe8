"""A plan given to an op instead of a template: checked against the op, timed by the simulator
beside the templates. Pure (no GPU); the op contexts call it when built with `plan=`.

    ported = sy.import_plan("ring.xml", format="msccl-xml", shape=[M, K], tensor="a")
    op = AgGemm(group, m=M, k=K, n=N, dtype=torch.bfloat16, plan=ported.plan)
    op.predicted_us["fused"], op.predicted_us["template_fused"], op.reason

What the plan must be, per op (its collective tensor, along dim 0, of the op's dtype):
    AgGemm  all-gather of "a" [M, K]     GemmRs  reduce-scatter of "c" [M, N]
    GemmAr  all-reduce of "c" [M, N]
for the op's world size, every chunk with one backend (copy-engine, sm-copy or nccl). A
backend other than the plan's is refused, except copy-engine <-> sm-copy (the same chunks issued
by the same ranks: only the engine that moves them changes). Staged plans (reduce="epilogue")
are the template's own; a given plan reduces by its reduce-add chunks. A given plan runs fused
(mode="sequential" runs its chunks, then the GEMM): the user chose it, so "auto" does not
replace it; `reason` says how its predicted time compares with the best template's.
"""

from __future__ import annotations

from typing import Optional

from syncopate.errors import UserError

# The op's plan tensor and the GEMM dimension that is its second one.
OP_TENSORS = {"all-gather": ("a", "k"), "reduce-scatter": ("c", "n"), "all-reduce": ("c", "n")}
# Backends whose chunks are issued by the same side, so one plan runs on either.
ONE_SIDED = ("copy-engine", "sm-copy")


def _retarget(plan, backend: str):
    """The plan with every chunk on `backend` (through its checked JSON form)."""
    import syncopate as sy

    data = plan.to_dict()
    for chunk in data["chunks"]:
        chunk["backend"] = backend
    return sy.CommPlan.from_dict(data, source="<retargeted plan>")


def check_user_plan(
    who: str,
    plan,
    *,
    collective: str,
    m: int,
    k: int,
    n: int,
    world: int,
    dtype: str,
    backend: str,
    reduce: Optional[str] = None,
):
    """(the plan to run, its backend) for `plan` given to op `who`, or UserError saying what does
    not match. `dtype` is the plan spelling ("bf16"); `backend` the op's argument ("auto" or one)."""
    import syncopate as sy

    if isinstance(plan, sy.ImportedPlan):
        plan = plan.plan
    if not isinstance(plan, sy.CommPlan):
        raise UserError(
            f"{who}: plan must be a syncopate CommPlan (sy.make_plan, sy.load_plan, "
            f"sy.import_plan(...).plan), got {type(plan).__name__}"
        )
    if reduce == "epilogue":
        raise UserError(
            f"{who}: reduce='epilogue' runs the staged template plan; a given plan reduces by its own "
            "reduce-add chunks (reduce='chunks' or 'auto')"
        )
    spec = plan.collective
    tensor, second = OP_TENSORS[collective]
    shape = [m, k if second == "k" else n]
    if spec.kind != collective:
        raise UserError(f"{who}: the plan is a {spec.kind}; this op runs a {collective} of tensor {tensor!r}")
    if spec.output:
        raise UserError(
            f"{who}: the plan is a staged {spec.kind} (into {spec.output!r}); only the op's own "
            "template stages (reduce='epilogue')"
        )
    if plan.world_size != world:
        raise UserError(f"{who}: the plan is for world size {plan.world_size}, the op's group has {world} ranks")
    if spec.tensor != tensor:
        raise UserError(
            f"{who}: the plan's tensor is {spec.tensor!r}; this op's is {tensor!r} (make or import "
            f"the plan with tensor={tensor!r})"
        )
    got = plan.tensors[tensor]
    if list(got.shape) != shape or spec.dim != 0:
        raise UserError(
            f"{who}: the plan's {tensor!r} is {list(got.shape)} along dim {spec.dim}; this op needs "
            f"{shape} along dim 0 (m={m}, {second}={shape[1]})"
        )
    if got.dtype != dtype:
        raise UserError(f"{who}: the plan's {tensor!r} is {got.dtype}; this op's dtype is {dtype}")
    backends = sorted({c.backend for c in plan.chunks})
    if len(backends) > 1:
        raise UserError(f"{who}: the plan mixes backends {backends}; an op runs one")
    plan_backend = backends[0] if backends else (backend if backend != "auto" else "copy-engine")
    if backend not in ("auto", plan_backend):
        if plan_backend in ONE_SIDED and backend in ONE_SIDED:
            plan = _retarget(plan, backend)
            plan_backend = backend
        else:
            raise UserError(
                f"{who}: backend={backend!r} but the plan's chunks are {plan_backend}; only "
                f"copy-engine and sm-copy plans run on each other's backend"
            )
    sy.verify_or_raise(plan, f"{who} plan")
    return plan, plan_backend


def choice_for_plan(
    who: str,
    plan,
    *,
    collective: str,
    m: int,
    n: int,
    k: int,
    world: int,
    dtype: str,
    block_m: int,
    block_n: int,
    backend: str,
    tile_order: str,
    mode: str,
):
    """The OpChoice an op runs a given plan with: its predicted times (and, as
    predicted_us["template_fused"], the best fused template's) for the GEMM's real block shape."""
    import syncopate as sy
    from syncopate.ops.choice import OpChoice, cached_calibration, calibration_name, choose

    calib = cached_calibration(calibration_name())
    order = "arrival" if tile_order == "auto" else tile_order
    try:
        p = sy.simulate(plan, sy.GemmShape(m, n, k, block_m, block_n), calib, order=order)
    except UserError as exc:
        raise UserError(f"{who}: the simulator cannot run the given plan with tile order {order!r}: {exc}") from None
    best = choose(collective, m=m, n=n, k=k, world=world, dtype=dtype, block_m=block_m, block_n=block_n, mode="fused")
    template_us = best.predicted_us["fused"]
    predicted = dict(
        fused=p.fused_us,
        sequential=p.sequential_us,
        floor=p.floor_us,
        gemm=p.gemm_alone_us,
        comm=p.comm_alone_us,
        template_fused=template_us,
    )
    ratio = p.fused_us / template_us if template_us > 0 else float("inf")
    reason = (
        f"plan given: simulated fused {p.fused_us:.1f} us, {ratio:.2f}x the best template's "
        f"{template_us:.1f} us ({best.algorithm} {best.backend} split {best.split} {best.tile_order})"
    )
    decision = "sequential" if mode == "sequential" else "fused"
    return OpChoice(decision, backend, "given", int(plan.collective.split), order, predicted, reason, "chunks")
