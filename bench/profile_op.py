"""Where one fused op call spends its time: host issue time, GPU time, and a kernel trace.

    torchrun --nproc-per-node 2 bench/profile_op.py --op ag_gemm --shape 1024x4096x3072 [--layout nk]

Runs the op (mode, backend as given) 20 times to warm up, then 20 timed calls: host time of the
call alone (no synchronisation), GPU time between CUDA events, and the same for sequential
NCCL + torch.mm; then 5 calls under torch.profiler. Rank 0 prints the kernels by GPU time and
writes a Chrome trace (profile_<op>_<shape>_rank0.json) under $OUT or bench/results/.
"""

from __future__ import annotations

import os

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def timed(fn, n=20):
    host, gpu = [], []
    for _ in range(n):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        end.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(end) * 1e3)
    return statistics.median(host), statistics.median(gpu)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="ag_gemm", choices=("ag_gemm", "gemm_rs", "gemm_ar"))
    p.add_argument("--shape", default="1024x4096x3072", help="MxKxN of the whole op")
    p.add_argument("--layout", default="kn", choices=("kn", "nk"))
    p.add_argument("--backend", default="copy-engine")
    p.add_argument("--mode", default="fused")
    p.add_argument("--split", type=int, default=None)
    p.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    m, k, n = (int(x) for x in args.shape.lower().split("x"))
    dev = torch.device("cuda", local)
    gen = torch.Generator(device=dev).manual_seed(1 + rank)
    dtype = torch.bfloat16

    def weight(kk):
        w = torch.randn(n, kk, generator=gen, device=dev, dtype=dtype)
        return w.t() if args.layout == "nk" else w.t().contiguous()

    kw = dict(backend=args.backend, mode=args.mode, b_layout=args.layout)
    if args.split:
        kw["split"] = args.split
    if args.op == "ag_gemm":
        from syncopate.ops.ag_gemm import AgGemm

        a = torch.randn(m // world, k, generator=gen, device=dev, dtype=dtype)
        b = weight(k)
        ctx = AgGemm(dist.group.WORLD, m=m, k=k, n=n, dtype=dtype, **kw)
        full = torch.empty(m, k, device=dev, dtype=dtype)
        out = torch.empty(m, n, device=dev, dtype=dtype)

        def seq():
            dist.all_gather_into_tensor(full, a)
            torch.mm(full, b, out=out)
    else:
        from syncopate.ops.gemm_ar import GemmAr
        from syncopate.ops.gemm_rs import GemmRs

        cls = GemmRs if args.op == "gemm_rs" else GemmAr
        a = torch.randn(m, k // world, generator=gen, device=dev, dtype=dtype)
        b = weight(k // world)
        ctx = cls(dist.group.WORLD, m=m, k=k // world, n=n, dtype=dtype, **kw)
        part = torch.empty(m, n, device=dev, dtype=dtype)
        out = torch.empty(m // world, n, device=dev, dtype=dtype)

        def seq():
            torch.mm(a, b, out=part)
            if args.op == "gemm_rs":
                dist.reduce_scatter_tensor(out, part)
            else:
                dist.all_reduce(part)

    def fused():
        ctx(a, b, check=False)

    for _ in range(20):
        fused()
        seq()
    ctx.check()
    results = {"fused": timed(fused), "sequential": timed(seq)}
    ctx.check()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            dist.barrier()
            fused()
        torch.cuda.synchronize()
    ctx.check()
    if rank == 0:
        print(
            f"{args.op} {args.shape} {args.layout} world {world}: decision {ctx.decision} backend {ctx.backend} "
            f"split {ctx.split} order {ctx.tile_order} gemm {ctx.gemm_config}; predicted {ctx.predicted_us}"
        )
        for name, (host, gpu) in results.items():
            print(f"  {name:11}: host {host:8.1f} us per call (no sync), GPU {gpu:8.1f} us (events)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"profile_{args.op}_{args.shape}_{args.layout}_rank0.json"
        prof.export_chrome_trace(str(path))
        print(f"trace: {path}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
