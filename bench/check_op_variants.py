"""CPU self-check of op_variants.py: every variant's result, at world sizes 2 and 3, on gloo.

    python bench/check_op_variants.py        # no GPU; exits 1 on any mismatch

The benchmark's variants split collectives and GEMMs into pieces (two_stream); an indexing
slip there would make bench_ops.py time a wrong computation. This runs each variant once on
small float32 CPU tensors and compares it with the plain result. gloo lacks the tensor forms
of all-gather and reduce-scatter, so those two calls are emulated with list/all-reduce forms;
async-TP needs GPUs and is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import op_variants  # noqa: E402

TOLERANCE = 1e-6


def _emulate_tensor_collectives(world: int, rank: int) -> None:
    def all_gather_into_tensor(out, inp):
        dist.all_gather(list(out.chunk(world)), inp)

    def reduce_scatter_tensor(out, inp):
        total = inp.clone()
        dist.all_reduce(total)
        out.copy_(total.chunk(world)[rank])

    dist.all_gather_into_tensor = all_gather_into_tensor
    dist.reduce_scatter_tensor = reduce_scatter_tensor
    op_variants._symm_ops = lambda: (None, "needs CUDA")


def _run_variants(variants, expected: dict, label: str) -> list[str]:
    failures = []
    for name, variant in variants.items():
        if isinstance(variant, str):
            continue
        fn, get_out, poison = variant
        if poison:
            get_out().fill_(float("nan"))
        fn()
        out, ref = get_out(), expected.get(name, expected["op"])
        err = ((out - ref).norm() / ref.norm()).item() if out.shape == ref.shape else float("inf")
        if not err < TOLERANCE:
            failures.append(f"{label} {name}: relative error {err}")
    return failures


def _worker(rank: int, world: int, port: int, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    _emulate_tensor_collectives(world, rank)
    torch.manual_seed(rank)
    m, k, n, chunks = 24 * world, 16 * world, 20, 3
    failures = []

    a_shard = torch.randn(m // world, k)
    b = torch.randn(k, n)
    dist.broadcast(b, 0)
    gathered = torch.empty(m, k)
    dist.all_gather_into_tensor(gathered, a_shard)
    failures += _run_variants(
        op_variants.ag_gemm_variants(a_shard, b, chunks), {"op": gathered @ b, "collective": gathered}, "ag_gemm"
    )

    a = torch.randn(m, k // world)
    b_shard = torch.randn(k // world, n)
    local = a @ b_shard
    total = local.clone()
    dist.all_reduce(total)
    failures += _run_variants(
        op_variants.gemm_rs_variants(a, b_shard, chunks), {"op": total.chunk(world)[rank], "gemm": local}, "gemm_rs"
    )
    failures += _run_variants(op_variants.gemm_ar_variants(a, b_shard, chunks), {"op": total, "gemm": local}, "gemm_ar")
    Path(result_dir, f"w{world}_r{rank}.txt").write_text("\n".join(failures))
    dist.destroy_process_group()


def main() -> int:
    import tempfile

    failures = []
    with tempfile.TemporaryDirectory() as result_dir:
        for world, port in ((2, 29561), (3, 29562)):
            mp.spawn(_worker, args=(world, port, result_dir), nprocs=world)
            for rank in range(world):
                text = Path(result_dir, f"w{world}_r{rank}.txt").read_text()
                failures += [f"world {world} rank {rank}: {line}" for line in text.splitlines()]
    for line in failures:
        print(line)
    print("op_variants: all variants match" if not failures else f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
