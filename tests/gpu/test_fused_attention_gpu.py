"""GPU correctness of the fused sequence-parallel attention ops under torchrun (one process per
rank; worlds larger than the GPU count share a GPU over gloo, gpu_group.py).

    torchrun --nproc_per_node=W tests/gpu/test_fused_attention_gpu.py [--quick] [--zigzag-only]

Every rank draws the same global q, k, v (seeded) and passes its slice of positions to
`ulysses_attention` / `ring_attention` with mode="fused"; the reference is SDPA in float32 on the
global tensors (no collective needed), this rank's rows. Cases: both ops, fp16 and bf16, causal
or not, head dim 64 and 128, GQA. Then 200 calls in a row (no check in between, inputs drawn
afresh for every 20th call, each checked against its reference at the end), a withheld chunk
(drop_chunk) that the rank it lands on must report as a WaitTimeoutError naming it, and at world
1 the fused forms against the sequential ones. The ring also runs the zig-zag layout
(`layout="zigzag"`: rank r holds half-pieces r and 2W - 1 - r), fused and sequential
(`--zigzag-only`: just those rows).

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


def global_problem(seed, z, h, h_kv, n, d, dtype, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(z, hh, n, d, generator=gen, device=device, dtype=dtype) for hh in (h, h_kv, h_kv))


def sdpa_fp32(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    q, k, v = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def rel_error(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def zigzag_rows(rank, world, s_loc, device):
    """Global positions of rank `rank`'s zig-zag piece: half-pieces rank and 2W - 1 - rank."""
    half, late = s_loc // 2, 2 * world - 1 - rank
    return torch.cat([torch.arange(rank * half, (rank + 1) * half), torch.arange(late * half, (late + 1) * half)]).to(
        device
    )


def case(op, rank, world, *, z, h, h_kv, s_loc, d, dtype, causal, seed, mode="fused", layout="contiguous"):
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if op == "ulysses" else ring_attention
    dev = torch.device("cuda", torch.cuda.current_device())
    q, k, v = global_problem(seed, z, h, h_kv, world * s_loc, d, dtype, dev)
    own = zigzag_rows(rank, world, s_loc, dev) if layout == "zigzag" else slice(rank * s_loc, (rank + 1) * s_loc)
    ref = sdpa_fp32(q, k, v, causal)[:, :, own]  # before the call: no module loads while a peer spins
    mine = tuple(t[:, :, own].contiguous() for t in (q, k, v))
    torch.cuda.synchronize()
    if dist.get_world_size() > 1:
        dist.barrier()
    extra = {"layout": layout} if layout != "contiguous" else {}
    out = fn(*mine, causal=causal, mode=mode, **extra)
    torch.cuda.synchronize()
    err = rel_error(out, ref)
    if not err < 1e-2:
        raise AssertionError(f"relative error {err:.2e} >= 1e-2")
    return f"rel_err={err:.1e}"


def heads(world, h, h_kv):
    """(h, h_kv) scaled up so that the world divides both (Ulysses' rule), keeping the GQA group
    h / h_kv: e.g. (8, 2) stays at worlds 1 and 2, becomes (16, 4) at world 4, (24, 6) at world 3."""
    grow = world // math.gcd(world, h_kv)
    return h * grow, h_kv * grow


def cases(world, quick):
    rows = []
    gqa_h, gqa_kv = heads(world, 8, 2)
    mha_h, _ = heads(world, 4, 4)
    for op in ("ulysses", "ring"):
        for dtype in (torch.bfloat16,) if quick else (torch.float16, torch.bfloat16):
            for causal in (False, True):
                rows.append((op, dict(z=1, h=gqa_h, h_kv=gqa_kv, s_loc=512, d=128, dtype=dtype, causal=causal)))
        rows.append((op, dict(z=2, h=mha_h, h_kv=mha_h, s_loc=256, d=64, dtype=torch.float16, causal=True)))
        # S_loc not a multiple of 128: 64 x 64 blocks (the cases above run 128 x 64)
        rows.append((op, dict(z=1, h=mha_h, h_kv=mha_h, s_loc=192, d=64, dtype=torch.float16, causal=True)))
    return rows + zigzag_cases(world)


def zigzag_cases(world):
    """The ring over the zig-zag layout (half-pieces r and 2W - 1 - r): halves of 256 (128 x 64
    blocks) and of 96 (64 x 64), causal and not, GQA."""
    gqa_h, gqa_kv = heads(world, 8, 2)
    return [
        ("ring", dict(z=1, h=gqa_h, h_kv=gqa_kv, s_loc=512, d=128, dtype=torch.bfloat16, causal=True, layout="zigzag")),
        ("ring", dict(z=1, h=gqa_h, h_kv=gqa_kv, s_loc=512, d=128, dtype=torch.float16, causal=False, layout="zigzag")),
        ("ring", dict(z=2, h=4, h_kv=4, s_loc=192, d=64, dtype=torch.float16, causal=True, layout="zigzag")),
    ]


def back_to_back(op, rank, world, calls=200):
    """`calls` calls with no check in between; inputs change every 20 calls; every 20th output is
    kept and compared at the end."""
    from syncopate.ops import ring_attention, ulysses_attention

    fn = ulysses_attention if op == "ulysses" else ring_attention
    dev = torch.device("cuda", torch.cuda.current_device())
    s_loc, own = 256, slice(rank * 256, (rank + 1) * 256)
    kept = []
    for call in range(calls):
        if call % 20 == 0:
            q, k, v = global_problem(100 + call, 1, *heads(world, 4, 2), world * s_loc, 64, torch.bfloat16, dev)
            mine = tuple(t[:, :, own].contiguous() for t in (q, k, v))
            out = fn(*mine, causal=True, mode="fused")
            kept.append((out, (q, k, v)))
        else:
            fn(*mine, causal=True, mode="fused")
    torch.cuda.synchronize()
    worst = max(rel_error(out, sdpa_fp32(*qkv, True)[:, :, own]) for out, qkv in kept)
    if not worst < 1e-2:
        raise AssertionError(f"worst relative error over the kept calls {worst:.2e}")
    return f"calls={calls} worst_rel_err={worst:.1e}"


def withheld(op, rank, world, group):
    """Drops one chunk that lands on rank 0 (at world 1: the own piece's local copy, Ulysses
    only); rank 0 must raise WaitTimeoutError naming it, the others finish."""
    import syncopate as sy
    from syncopate.errors import WaitTimeoutError
    from syncopate.ops.fused_attention import RingAttention, UlyssesAttention

    (s_loc, d), (h, _) = (256, 64), heads(world, 4, 4)
    cls = UlyssesAttention if op == "ulysses" else RingAttention
    if op == "ulysses":
        plan = sy.make_plan(
            "all-to-all",
            world_size=world,
            shape=[1, 3 * h, s_loc, d],
            dim=1,
            algorithm="direct",
            tensor="x",
            dtype="f16",
        )
    else:
        plan = sy.make_plan(
            "all-gather",
            world_size=world,
            shape=[2, 1, h, world * s_loc, d],
            dim=3,
            algorithm="ring",
            tensor="kv",
            dtype="f16",
        )
    chunk = next(c.id for c in plan.chunks if c.dst == 0 and (c.src != c.dst or world == 1))
    ctx = cls(
        group if world > 1 else None,
        z=1,
        h=h,
        h_kv=h,
        s_loc=s_loc,
        d=d,
        dtype=torch.float16,
        wait_bound_ns=50_000_000,
        drop_chunk=chunk,
    )
    dev = torch.device("cuda", torch.cuda.current_device())
    q, k, v = global_problem(7, 1, h, h, world * s_loc, d, torch.float16, dev)
    own = slice(rank * s_loc, (rank + 1) * s_loc)
    try:
        ctx(*(t[:, :, own].contiguous() for t in (q, k, v)), check=True)
    except WaitTimeoutError as exc:
        if rank != 0:
            raise AssertionError(f"rank {rank} timed out, only rank 0 should: {exc}") from exc
        if f"chunk {chunk} never arrived" not in str(exc):
            raise AssertionError(f"the error does not name chunk {chunk}: {exc}") from exc
        return f"named: {str(exc)[:160]}"
    if rank == 0:
        raise AssertionError(f"chunk {chunk} was withheld but no WaitTimeoutError was raised")
    return "no wait here (the chunk lands on rank 0)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--zigzag-only", action="store_true", help="only the zig-zag rows (and their sequential form)")
    args = parser.parse_args()
    from gpu_group import GpuGroup

    grp = GpuGroup()
    rank, world = grp.rank, grp.world
    res = Results(rank)
    if rank == 0:
        print(f"== mode: {grp.mode}", flush=True)
    rows = zigzag_cases(world) if args.zigzag_only else cases(world, args.quick)
    for i, (op, kw) in enumerate(rows):
        name = (
            f"{op} {str(kw['dtype'])[6:]} causal={kw['causal']} z={kw['z']} h={kw['h']} h_kv={kw['h_kv']} "
            f"s_loc={kw['s_loc']} d={kw['d']}" + (f" layout={kw['layout']}" if "layout" in kw else "")
        )
        res.run(name, lambda: case(op, rank, world, seed=i, **kw))
    if world == 1:  # the sequential forms' collectives take CUDA tensors: not over gloo (shared)
        res.run(
            "ring zigzag sequential",
            lambda: case(
                "ring",
                rank,
                world,
                z=1,
                h=8,
                h_kv=2,
                s_loc=512,
                d=128,
                dtype=torch.float16,
                causal=True,
                seed=60,
                mode="sequential",
                layout="zigzag",
            ),
        )
    if args.zigzag_only:
        totals = grp.all_reduce_sum(torch.tensor([res.passed, res.failed], device="cuda"))
        if rank == 0:
            print(
                f"SUMMARY world={world} passed={int(totals[0])} failed={int(totals[1])} "
                f"device={torch.cuda.get_device_name()} mode={grp.mode} (zig-zag rows only)",
                flush=True,
            )
        dist.barrier()
        dist.destroy_process_group()
        sys.exit(1 if int(totals[1]) else 0)
    if world == 1:
        for op in ("ulysses", "ring"):
            res.run(
                f"{op} sequential (world 1)",
                lambda: case(
                    op,
                    rank,
                    world,
                    z=1,
                    h=8,
                    h_kv=2,
                    s_loc=512,
                    d=128,
                    dtype=torch.float16,
                    causal=True,
                    seed=50,
                    mode="sequential",
                ),
            )
    for op in ("ulysses", "ring"):
        res.run(f"{op} 200 calls", lambda: back_to_back(op, rank, world))
    for op in ("ulysses", "ring") if world > 1 else ("ulysses",):
        grp.barrier()
        res.run(f"{op} withheld chunk", lambda: withheld(op, rank, world, grp.group))
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
