"""GPU: plans ported from other tools run inside AgGemm and GemmRs, correct against an fp32
reference, with ranks that may share a GPU.

    torchrun --nproc_per_node=W tests/gpu/test_imported_plan_gpu.py [--modes fused,sequential]

One GPU per rank where there are enough, else every rank on the GPUs there are (gpu_group.py:
gloo, CUDA IPC), so W = 2 and 4 run on one GPU; the imported plans use the copy engine and SM
copies, which run either way. The plans,
built here as the tools would write them, then imported (syncopate.import_plan):
  AgGemm  a ring all-gather as MSCCL XML (s, rcs, ..., r per GPU), and as a send/recv list;
  GemmRs  an all-pairs reduce-scatter as MSCCL XML (each GPU sends its partial of chunk p to p,
          and adds the others' partials of its own chunk one thread block after the other),
          and a template exported to MSCCL XML and imported back (sy.export_msccl_xml);
each with the copy engine and with SM copies, fused and sequential (the plan's chunks, then the
GEMM). Inputs are drawn from per-rank seeds, so every rank computes the reference itself (no
collective). Prints one line per case and `SUMMARY world=W passed=P failed=F`; exits 1 on any
failure.
"""

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TOLERANCE = {torch.bfloat16: 2.5e-2}
M_PER_RANK, K, N = 256, 512, 768


def step(s, kind, sb, so, db, do, cnt=1, depid=-1, deps=-1, hasdep=0):
    return (
        f'<step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="{cnt}" '
        f'depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>'
    )


def msccl_ring_allgather(world):
    """MSCCL XML: in-place ring all-gather, one thread block per GPU."""
    lines = [
        f'<algo name="ring" proto="Simple" nchannels="1" nchunksperloop="{world}" ngpus="{world}" '
        'coll="allgather" inplace="1">'
    ]
    for r in range(world):
        lines.append(f'<gpu id="{r}" i_chunks="1" o_chunks="{world}" s_chunks="0">')
        lines.append(f'<tb id="0" send="{(r + 1) % world}" recv="{(r - 1) % world}" chan="0">')
        lines.append(step(0, "s", "i", 0, "o", r))
        for k in range(1, world):
            c = (r - k) % world
            lines.append(step(k, "rcs" if k < world - 1 else "r", "o", c, "o", c))
        lines.append("</tb></gpu>")
    return "\n".join(lines + ["</algo>"])


def msccl_allpairs_reduce_scatter(world):
    """MSCCL XML: in-place all-pairs reduce-scatter; the adds into a GPU's chunk are chained."""
    lines = [
        f'<algo name="allpairs" proto="Simple" nchannels="1" nchunksperloop="{world}" ngpus="{world}" '
        'coll="reducescatter" inplace="1">'
    ]
    for r in range(world):
        lines.append(f'<gpu id="{r}" i_chunks="{world}" o_chunks="1" s_chunks="0">')
        for t in range(world - 1):
            p = (r + 1 + t) % world
            lines.append(f'<tb id="{t}" send="{p}" recv="{p}" chan="0">')
            lines.append(step(0, "s", "i", p, "i", p))
            dep = {} if t == 0 else dict(depid=t - 1, deps=1)
            lines.append(step(1, "rrc", "i", r, "i", r, hasdep=1, **dep))
            lines.append("</tb>")
        lines.append("</gpu>")
    return "\n".join(lines + ["</algo>"])


def sendrecv_ring_allgather(world, rows, cols):
    """A send/recv list: the same ring, one stream per rank, tensor "a"."""

    def box(c):
        return [[c * rows, (c + 1) * rows], [0, cols]]

    ranks = []
    for r in range(world):
        items = [{"send": (r + 1) % world, "box": box(r)}]
        for k in range(1, world):
            c = (r - k) % world
            items.append({"recv": (r - 1) % world, "box": box(c)})
            if k < world - 1:
                items.append({"send": (r + 1) % world, "box": box(c)})
        ranks.append({"rank": r, "streams": [items]})
    return json.dumps(
        {
            "format": "syncopate-sendrecv",
            "version": 1,
            "world_size": world,
            "collective": {"kind": "all-gather", "tensor": "a", "dim": 0},
            "tensors": {"a": {"shape": [world * rows, cols], "dtype": "bf16"}},
            "ranks": ranks,
        }
    )


def plans(world):
    """(name, op, ImportedPlan) for this world size."""
    import syncopate as sy

    m = M_PER_RANK * world
    out = []
    if world > 1:
        out.append(
            (
                "msccl ring all-gather",
                "ag_gemm",
                sy.import_plan(
                    text=msccl_ring_allgather(world), format="msccl-xml", shape=[m, K], tensor="a", source="ring.xml"
                ),
            )
        )
        out.append(
            (
                "sendrecv ring all-gather",
                "ag_gemm",
                sy.import_plan(
                    text=sendrecv_ring_allgather(world, M_PER_RANK, K), format="sendrecv", source="ring.json"
                ),
            )
        )
        out.append(
            (
                "msccl all-pairs reduce-scatter",
                "gemm_rs",
                sy.import_plan(
                    text=msccl_allpairs_reduce_scatter(world),
                    format="msccl-xml",
                    shape=[m, N],
                    tensor="c",
                    source="allpairs.xml",
                ),
            )
        )
    template = sy.make_plan("reduce-scatter", world_size=world, shape=[m, N], algorithm="ring", split=2, tensor="c")
    out.append(
        (
            "exported ring reduce-scatter",
            "gemm_rs",
            sy.import_plan(
                text=sy.export_msccl_xml(template), format="msccl-xml", shape=[m, N], tensor="c", source="exported.xml"
            ),
        )
    )
    return out


def inputs(op, world, rank, seed, device):
    """Every rank's operands, from per-rank seeds: (this rank's a, b), and the fp32 reference."""

    def draw(r):
        g = torch.Generator(device="cpu").manual_seed(seed * 1000 + r)
        rows = M_PER_RANK if op == "ag_gemm" else M_PER_RANK * world
        a = torch.randn(rows, K, generator=g)
        b = torch.randn(K, N, generator=g) / K**0.5
        return a.to(torch.bfloat16), b.to(torch.bfloat16)

    if op == "ag_gemm":
        shards = [draw(r)[0] for r in range(world)]
        b = draw(0)[1]  # one B for every rank
        ref = torch.cat(shards).float() @ b.float()
        return shards[rank].to(device), b.to(device), ref.to(device)
    parts = [draw(r) for r in range(world)]
    total = sum(a.float() @ b.float() for a, b in parts)
    ref = total[rank * M_PER_RANK : (rank + 1) * M_PER_RANK]
    a, b = parts[rank]
    return a.to(device), b.to(device), ref.to(device)


def run_case(group, world, rank, device, name, op, imported, backend, mode):
    from syncopate.ops.ag_gemm import AgGemm
    from syncopate.ops.gemm_rs import GemmRs

    cls = AgGemm if op == "ag_gemm" else GemmRs
    kw = {} if op == "ag_gemm" else {"reduce": "chunks"}
    ctx = cls(
        group,
        m=M_PER_RANK * world,
        k=K,
        n=N,
        dtype=torch.bfloat16,
        device=device,
        backend=backend,
        mode=mode,
        plan=imported.plan,
        **kw,
    )
    worst = 0.0
    for seed in range(3):
        a, b, ref = inputs(op, world, rank, seed, device)
        out = ctx(a, b, check=True)
        err = (torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref)).item()
        worst = max(worst, err if torch.isfinite(out).all() else float("inf"))
    ok = worst < TOLERANCE[torch.bfloat16] and ctx.algorithm == "given" and ctx.decision == mode
    return ok, (
        f"rel_err={worst:.2e} decision={ctx.decision} backend={ctx.backend} "
        f"predicted={ctx.predicted_us['fused']:.1f}us template={ctx.predicted_us['template_fused']:.1f}us"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="fused,sequential")
    parser.add_argument("--backends", default="copy-engine,sm-copy")
    args = parser.parse_args()
    from gpu_group import GpuGroup

    gpu_group = GpuGroup()
    rank, world, group, device = gpu_group.rank, gpu_group.world, gpu_group.group, gpu_group.device
    if rank == 0:
        print(f"== mode: {gpu_group.mode}", flush=True)
    passed = failed = 0
    for name, op, imported in plans(world):
        for backend in args.backends.split(","):
            for mode in args.modes.split(","):
                case = f"{op} [{name}] backend={backend} mode={mode} world={world}"
                try:
                    ok, detail = run_case(group, world, rank, device, name, op, imported, backend, mode)
                except Exception as exc:  # noqa: BLE001 - every failure is a recorded case
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                    traceback.print_exc()
                passed, failed = passed + ok, failed + (not ok)
                print(f"{'PASS' if ok else 'FAIL'} rank={rank} {case} {detail}", flush=True)
                gpu_group.barrier()
    totals = gpu_group.all_reduce_sum(torch.tensor([passed, failed], device=device))
    if rank == 0:
        print(
            f"SUMMARY world={world} passed={int(totals[0])} failed={int(totals[1])} "
            f"device={torch.cuda.get_device_name()} gpus={torch.cuda.device_count()}",
            flush=True,
        )
    gpu_group.barrier()
    dist.destroy_process_group()
    sys.exit(1 if int(totals[1]) else 0)


if __name__ == "__main__":
    main()
