"""GPU correctness of the FP8 ops (ops/fp8.py) under torchrun, one process per rank.

    torchrun --nproc_per_node=W tests/gpu/test_ops_fp8_gpu.py [--quick]
    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 python3 tests/gpu/test_ops_fp8_gpu.py --quick

Every op (AgGemm, GemmRs, GemmAr with reduce="chunks") x backend (copy-engine, sm-copy) x mode
(fused: the transformer's FP8 kernel; sequential) x scales (per tensor; per row of A and per
column of B, each rank's own) x B layout (kn, nk), at a shape that is a multiple of every block
and one that is not. Operands e4m3, fresh each call, output poisoned with NaN; reference: the
fp32 product of the dequantised operands, gathered / reduced in fp32 on every rank from all
ranks' operands (each rank draws every rank's inputs from one seed). GEMM+RS/AR reduce bf16
partials, so their error limit allows the bf16 rounding of W partials. Ranks may share one GPU
(gpu_group.py: gloo, no NCCL). Prints one line per case and `SUMMARY world=W passed=P failed=F`.
"""

import argparse
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

import torch  # noqa: E402

E4M3 = torch.float8_e4m3fn


def _inputs(op, m, k, n, world, layout, scales, seed):
    """Every rank's operands (the same on each rank: one seed) as CPU-generated, moved later."""
    gen = torch.Generator().manual_seed(seed)
    ranks = []
    for _ in range(world):
        rows = m // world if op == "ag_gemm" else m
        a = (torch.randn(rows, k, generator=gen) * 2).to(E4M3)
        b = (
            (torch.randn(n, k, generator=gen) * 2).to(E4M3).t()
            if layout == "nk"
            else (torch.randn(k, n, generator=gen) * 2).to(E4M3)
        )
        if scales == "tensor":
            sa, sb = torch.rand(1, generator=gen) + 0.25, torch.rand(1, generator=gen) + 0.25
        else:
            sa, sb = torch.rand(rows, 1, generator=gen) + 0.25, torch.rand(1, n, generator=gen) + 0.25
        ranks.append((a, b, sa, sb))
    return ranks


def _reference(op, ranks, rank, world, m):
    def prod(a, b, sa, sb):
        return (a.float() @ b.float()) * sa.reshape(-1, 1) * sb.reshape(1, -1)

    if op == "ag_gemm":  # every rank's B is its own; A's rows (and their scales) are gathered
        a = torch.cat([r[0].float() for r in ranks])
        sa = torch.cat([r[2].expand(r[0].shape[0], 1) for r in ranks])
        _, b, _, sb = ranks[rank]
        return (a @ b.float()) * sa * sb.reshape(1, -1)
    total = sum(prod(*r) for r in ranks)
    if op == "gemm_rs":
        rows = m // world
        return total[rank * rows : (rank + 1) * rows]
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_group import GpuGroup

    from syncopate.ops.ag_gemm import AgGemm
    from syncopate.ops.gemm_ar import GemmAr
    from syncopate.ops.gemm_rs import GemmRs

    group = GpuGroup()
    rank, world, device = group.rank, group.world, group.device
    classes = {"ag_gemm": AgGemm, "gemm_rs": GemmRs, "gemm_ar": GemmAr}
    backends = (
        [b for b in ("copy-engine", "sm-copy") if group.backend_usable(b)]
        if group.shared
        else ["copy-engine", "sm-copy"]
    )
    shapes = [(1024, 512, 512), (world * 200, 384, 272)]  # the second a multiple of no block
    if args.quick:  # one shape, the copy engine only (the chunk movers do not depend on the dtype)
        shapes = shapes[:1]
        backends = backends[:1]
    passed = failed = 0
    case = 0
    for op, cls in classes.items():
        for backend in backends:
            for mode in ("fused", "sequential"):
                for layout in ("kn", "nk"):
                    for m, k, n in shapes:
                        name = f"{op} {backend} {mode} {layout} {m}x{k}x{n}"
                        try:
                            ctx = cls(
                                group.group,
                                m=m,
                                k=k,
                                n=n,
                                dtype=E4M3,
                                device=device,
                                backend=backend,
                                mode=mode,
                                b_layout=layout,
                                algorithm="direct",
                                split=1,
                                **({} if op == "ag_gemm" else {"reduce": "chunks"}),
                            )
                            for scales in ("tensor", "row"):
                                case += 1
                                ranks = _inputs(op, m, k, n, world, layout, scales, seed=case)
                                a, b, sa, sb = (t.to(device) for t in ranks[rank])
                                if layout == "nk":
                                    b = b.t().contiguous().t()
                                ref = _reference(op, ranks, rank, world, m).to(device)
                                rows = m if op != "gemm_rs" else m // world
                                out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)
                                ctx(a, b, out=out, scale_a=sa, scale_b=sb, check=True)
                                torch.cuda.synchronize(device)
                                err = (
                                    ((out.double() - ref.double()).norm() / ref.double().norm()).item()
                                    if torch.isfinite(out).all()
                                    else float("inf")
                                )
                                limit = 5e-3 if op == "ag_gemm" else 5e-3 * world
                                ok = err < limit
                                passed += ok
                                failed += not ok
                                print(
                                    f"{'PASS' if ok else 'FAIL'} rank {rank} {name} {scales}: err {err:.2e} "
                                    f"(decision {ctx.decision}, kernel {ctx.kernel_name})",
                                    flush=True,
                                )
                        except Exception:
                            failed += 1
                            print(f"FAIL rank {rank} {name}: {traceback.format_exc(limit=4)}", flush=True)
    print(f"SUMMARY world={world} rank={rank} passed={passed} failed={failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
