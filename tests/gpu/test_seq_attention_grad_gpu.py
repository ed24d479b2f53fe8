"""GPU correctness of the sequence-parallel attention ops' backward (ops/seq_attention_grad.py) under
torchrun (one process per rank; worlds larger than the GPU count share a GPU over gloo, gpu_group.py).

    torchrun --nproc_per_node=W tests/gpu/test_seq_attention_grad_gpu.py [--quick] [--bench]

Every rank draws the same global q, k, v and grad_o (seeded) and runs `ulysses_attention` /
`ring_attention` on its slice of positions with q, k, v requiring grad; the reference is autograd
through SDPA in float32 on the global tensors, this rank's rows of o, dq, dk, dv. Cases: both
ops, fp16 and bf16, causal or not, head dim 64 and 128, GQA (and one with as many K/V heads as
query heads, batch 2). Before every case the CUDA caching allocator is filled with NaN (blocks of
the sizes the case allocates, freed back to the cache) so that a gradient element the backward
fails to write comes out NaN; every gradient must be finite. Also: grad_o non-contiguous, only k
requiring grad, mode='fused' with an operand requiring grad refused by name, and at world 1 the
forward under autograd equal to the forward-only one. --bench (world 1): forward + backward time
of both ops against SDPA's at S = 8192 (the ops' own cost at one rank: no collective).

Prints one line per case and `SUMMARY world=W passed=P failed=F`; exits 1 on any failure.
"""

import argparse
import math
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

BOUND = {torch.float16: 1e-2, torch.bfloat16: 2e-2}  # relative error (norm) against float32


class Results:
    def __init__(self, rank):
        self.rank, self.passed, self.failed = rank, 0, 0

    def run(self, name, fn):
        try:
            detail = fn()
            self.passed += 1
            print(f"PASS rank {self.rank} {name} {detail or ''}", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported, counted
            self.failed += 1
            print(f"FAIL rank {self.rank} {name}: {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc()


def heads(world, h, h_kv):
    """(h, h_kv) scaled so that the world divides both (Ulysses' rule), keeping the GQA group."""
    grow = world // math.gcd(world, h_kv)
    return h * grow, h_kv * grow


def global_problem(seed, z, h, h_kv, n, d, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(z, hh, n, d, generator=gen, device=device) for hh in (h, h_kv, h_kv))
    return q, k, v, torch.randn(z, h, n, d, generator=gen, device=device)


def reference(q, k, v, grad_o, causal):
    """(o, dq, dk, dv) in float32 by autograd through SDPA on the whole sequence."""
    q, k, v = (t.float().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), grad_o.float()))


def poison_allocator(device, sizes):
    """Fills cached allocator blocks of these byte sizes (and one large one) with NaN and frees
    them: the case's own allocations reuse them, so memory it reads before writing is NaN."""
    blocks = [torch.full((max(n // 4, 1),), float("nan"), device=device) for n in sizes for _ in range(8)]
    blocks.append(torch.full((64 << 20,), float("nan"), device=device))
    torch.cuda.synchronize(device)
    del blocks


def rel_error(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def case(op, rank, world, *, z, h, h_kv, s_loc, d, dtype, causal, seed, grad_layout="contiguous", only_k=False):
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if op == "ulysses" else ring_attention
    dev = torch.device("cuda", torch.cuda.current_device())
    q, k, v, grad_o = global_problem(seed, z, h, h_kv, world * s_loc, d, dev)
    q, k, v, grad_o = (t.to(dtype) for t in (q, k, v, grad_o))
    ref = reference(q, k, v, grad_o, causal)
    own = slice(rank * s_loc, (rank + 1) * s_loc)
    mine = [t[:, :, own].clone() for t in (q, k, v)]
    for i, t in enumerate(mine):
        t.requires_grad_(not only_k or i == 1)
    g = grad_o[:, :, own]
    if grad_layout == "transposed":  # same values, [Z, S, H, D] in memory
        g = g.transpose(1, 2).contiguous().transpose(1, 2)
    else:
        g = g.contiguous()
    elem = q.element_size()
    poison_allocator(dev, [z * h * s_loc * d * elem, z * h_kv * s_loc * d * elem, z * h * s_loc * d * 4 * world])
    if world > 1:
        dist.barrier()
    o = fn(*mine, causal=causal)
    o.backward(g)
    torch.cuda.synchronize()
    errors = {"o": rel_error(o.detach(), ref[0][:, :, own])}
    for name, t, r in zip(("dq", "dk", "dv"), mine, ref[1:]):
        if t.grad is None:
            if t.requires_grad:
                raise AssertionError(f"{name} is None")
            continue
        if not torch.isfinite(t.grad).all():
            raise AssertionError(f"{name} has {int((~torch.isfinite(t.grad)).sum())} non-finite elements")
        errors[name] = rel_error(t.grad, r[:, :, own])
    bound = BOUND[dtype]
    bad = {k_: e for k_, e in errors.items() if not e < bound}
    if bad:
        raise AssertionError(f"relative errors over {bound}: {bad}")
    return " ".join(f"{k_}={e:.1e}" for k_, e in errors.items())


def cases(world, quick):
    rows = []
    gqa_h, gqa_kv = heads(world, 8, 2)
    mha_h, _ = heads(world, 4, 4)
    for op in ("ulysses", "ring"):
        for dtype in (torch.bfloat16,) if quick else (torch.float16, torch.bfloat16):
            for d in (64, 128):
                for causal in (False, True):
                    rows.append((op, dict(z=1, h=gqa_h, h_kv=gqa_kv, s_loc=256, d=d, dtype=dtype, causal=causal)))
        rows.append((op, dict(z=2, h=mha_h, h_kv=mha_h, s_loc=128, d=64, dtype=torch.float16, causal=True)))
        rows.append(
            (
                op,
                dict(
                    z=1,
                    h=gqa_h,
                    h_kv=gqa_kv,
                    s_loc=256,
                    d=128,
                    dtype=torch.bfloat16,
                    causal=True,
                    grad_layout="transposed",
                ),
            )
        )
        rows.append(
            (op, dict(z=1, h=gqa_h, h_kv=gqa_kv, s_loc=256, d=64, dtype=torch.float16, causal=False, only_k=True))
        )
    return rows


def refused(op, rank, world):
    from syncopate.errors import UserError
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if op == "ulysses" else ring_attention
    dev = torch.device("cuda", torch.cuda.current_device())
    h, h_kv = heads(world, 4, 2)
    q, k, v = (torch.randn(1, hh, 128, 64, device=dev, dtype=torch.bfloat16) for hh in (h, h_kv, h_kv))
    try:
        fn(q.requires_grad_(), k, v, mode="fused")
    except UserError as exc:
        if "mode='fused' has no backward" not in str(exc):
            raise AssertionError(f"refused, but not by name: {exc}") from exc
        return f"refused: {str(exc)[:80]}"
    raise AssertionError("mode='fused' with q requiring grad was not refused")


def same_forward(op):
    """World 1: the forward under autograd (flash with its log-sum-exp) equals the forward-only op."""
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if op == "ulysses" else ring_attention
    dev = torch.device("cuda", torch.cuda.current_device())
    q, k, v, _ = global_problem(60, 1, 8, 2, 512, 128, dev)
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    with torch.no_grad():
        plain = fn(q, k, v, causal=True, mode="sequential")
    traced = fn(q.requires_grad_(), k, v, causal=True, mode="sequential")
    err = rel_error(traced.detach(), plain.float())
    if not err < 1e-2:
        raise AssertionError(f"relative difference {err:.2e}")
    return f"rel_diff={err:.1e}"


def bench():
    """World 1, S = 8192, 16 heads (4 K/V), head dim 128, bf16, causal: forward + backward times."""
    from syncopate.ops import ring_attention, ulysses_attention

    dev = torch.device("cuda", torch.cuda.current_device())
    q, k, v, g = global_problem(70, 1, 16, 4, 8192, 128, dev)
    q, k, v, g = (t.to(torch.bfloat16) for t in (q, k, v, g))
    leaves = [t.requires_grad_() for t in (q, k, v)]

    def sdpa(q, k, v, causal):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    rows = []
    for name, fn in (("sdpa", sdpa), ("ulysses", ulysses_attention), ("ring", ring_attention)):
        times = []
        for i in range(8):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            o = fn(*leaves, causal=True)
            o.backward(g)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
            for t in leaves:
                t.grad = None
        rows.append((name, sorted(times)[len(times) // 2]))
    base = rows[0][1]
    return " ".join(f"{n}={ms:.3f}ms({ms / base:.2f}x)" for n, ms in rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bench", action="store_true")
    args = parser.parse_args()
    from gpu_group import GpuGroup

    grp = GpuGroup()
    rank, world = grp.rank, grp.world
    res = Results(rank)
    if rank == 0:
        print(f"== mode: {grp.mode}", flush=True)
    for i, (op, kw) in enumerate(cases(world, args.quick)):
        extra = " ".join(f"{k_}={kw[k_]}" for k_ in ("grad_layout", "only_k") if k_ in kw)
        name = (
            f"{op} backward {str(kw['dtype'])[6:]} causal={kw['causal']} z={kw['z']} h={kw['h']} "
            f"h_kv={kw['h_kv']} s_loc={kw['s_loc']} d={kw['d']} {extra}"
        )
        res.run(name, lambda: case(op, rank, world, seed=i, **kw))
    for op in ("ulysses", "ring"):
        res.run(f"{op} mode='fused' with grad refused", lambda: refused(op, rank, world))
    if world == 1:
        for op in ("ulysses", "ring"):
            res.run(f"{op} forward under autograd = forward only", lambda: same_forward(op))
        if args.bench:
            res.run("bench fwd+bwd S=8192 h=16 h_kv=4 d=128 bf16 causal", bench)
    totals = grp.all_reduce_sum(torch.tensor([res.passed, res.failed], device="cuda"))
    if rank == 0:
        print(
            f"SUMMARY world={world} passed={int(totals[0])} failed={int(totals[1])} "
            f"device={torch.cuda.get_device_name()} mode={grp.mode}",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
