"""GPU correctness of kernel-level mode (syncopate.kernel_level) under torchrun.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc_per_node=W tests/gpu/test_kernel_level_gpu.py [--list] [--results-file F]

Cases: op (ag_gemm, gemm_rs) x controls (plain, priority, carveout, both) x gemm (cublas,
triton) x dtype (fp16, bf16) x 2 shapes (one with M/w and K, N multiples of no block), plus the
Triton GEMM shaped to 1 block per SM (64x128 block, no warp specialisation: 2 unshaped) per op x dtype x shape. Each
case: two calls with fresh random inputs and the output poisoned with NaN, relative error vs an
fp32 reference. Shaped cases also assert the driver's occupancy of the padded kernel (1) and of
the unpadded one (>= 2). Checks: the priority group's NCCL options, the stream priority range, a
greatest-priority torch stream, and that the cuBLAS carveout is restored after each call.
Prints one line per case and `SUMMARY kernel_level world=W passed=P failed=F`; exit 1 on failure.
"""

import argparse
import dataclasses
import os
import sys
import time
import traceback
from pathlib import Path

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

OPS = ("ag_gemm", "gemm_rs")
CONTROLS = {
    "plain": dict(priority=False),
    "priority": dict(priority=True),
    "carveout": dict(priority=False, sm_carveout=16),
    "both": dict(priority=True, sm_carveout=16),
}
GEMMS = ("cublas", "triton")
DTYPES = (torch.float16, torch.bfloat16)
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


def shapes(world):
    """(M, K, N, what): for gemm_rs K is the local depth."""
    return [(512 * world, 1024, 768, "multiples of every block"), (255 * world, 328, 712, "multiple of no block")]


def cases(world):
    out = []
    for op in OPS:
        for shape in shapes(world):
            for dtype in DTYPES:
                for gemm in GEMMS:
                    for control in CONTROLS:
                        out.append((op, control, gemm, dtype, shape))
                out.append((op, "shaped", "triton", dtype, shape))
    return out


def inputs(op, m, k, n, dtype, world, rank, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)
    shared = torch.Generator(device="cuda").manual_seed(seed * 1000 + 999)

    def rand(g, *size):
        return torch.randn(*size, generator=g, device="cuda").to(dtype)

    if op == "ag_gemm":
        a, b = rand(gen, m // world, k), rand(shared, k, n)
        full = torch.empty((m, k), dtype=dtype, device="cuda")
        dist.all_gather_into_tensor(full, a)
        return a, b, full.float() @ b.float()
    a, b = rand(gen, m, k), rand(gen, k, n)
    ref = torch.empty((m // world, n), dtype=torch.float32, device="cuda")
    dist.reduce_scatter_tensor(ref, a.float() @ b.float())
    return a, b, ref


def run_case(case, world, rank, seed):
    from syncopate import kernel_level
    from syncopate.kernels.configs import CANDIDATES

    op, control, gemm, dtype, (m, k, n, _) = case
    extra = dict(CONTROLS.get(control, {}))
    if control == "shaped":
        extra = dict(priority=True, residency=1)
    if gemm == "triton":
        # The 64x128 block without warp specialisation (4 warps, 112 KiB) fits 2 per SM
        # unshaped, so residency 1 is real shaping.
        extra["gemm_config"] = dataclasses.replace(
            next(c for c in CANDIDATES if (c.block_m, c.block_n) == (64, 128)), warp_specialize=False
        )
    cls = kernel_level.KernelLevelAgGemm if op == "ag_gemm" else kernel_level.KernelLevelGemmRs
    ctx = cls(None, m=m, k=k, n=n, dtype=dtype, chunks=3, gemm=gemm, **extra)
    errors = []
    for call in range(2):
        a, b, ref = inputs(op, m, k, n, dtype, world, rank, seed + call)
        out = torch.full(tuple(ref.shape), float("nan"), dtype=dtype, device="cuda")
        carveout_before = torch._C._get_sm_carveout_experimental()
        ctx(a, b, out=out)
        torch.cuda.synchronize()
        if torch._C._get_sm_carveout_experimental() != carveout_before:
            return False, "the cuBLAS SM carveout was not restored"
        err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
        errors.append(err)
        if not err < TOLERANCE[dtype]:  # NaN (an unwritten element) fails too
            return False, f"call {call}: relative error {err:.3g} >= {TOLERANCE[dtype]}"
    note = f"rel err {max(errors):.2e}"
    if control == "shaped":
        shapings = list(ctx.triton_gemm.shapings.values())
        if not shapings:
            return False, "no kernel was shaped"
        for s in shapings:
            if s["residency_driver"] != 1 or s["natural_driver"] < 2:
                return (
                    False,
                    f"occupancy: driver says {s['residency_driver']} padded / {s['natural_driver']} unpadded, "
                    f"expected 1 / >= 2 ({s})",
                )
        note += f"; occupancy {shapings[0]['natural_driver']} -> 1 with +{shapings[0]['extra_shared']} B"
    return True, note


def check_priorities():
    """(ok, note): the controls' stream priorities are what they say."""
    from syncopate import _runtime as rt
    from syncopate.kernel_level import comm_group

    least, greatest = rt.stream_priority_range()
    if not greatest < least:
        return False, f"device has a single stream priority ({least}, {greatest}): priority cannot work"
    # PyTorch keeps a few priority pools and clamps a request to the highest of them (-3 on
    # H200, where the device offers down to -5; measured 2026-11-22): a torch stream, and the
    # NCCL stream torch takes from that pool, can only be *higher than default*, not the
    # device's greatest. The runtime's own streams use the device's greatest.
    stream = torch.cuda.Stream(priority=greatest)
    got = rt.stream_priority(stream.cuda_stream)
    if got != stream.priority or not got < least:
        return False, (
            f"a greatest-priority torch stream reports {got} (driver) / {stream.priority} "
            f"(torch), expected one priority above the default {least}"
        )
    for high in (True, False):
        backend = comm_group(None, high)._get_backend(torch.device("cuda"))
        if backend.options.is_high_priority_stream != high:
            return (
                False,
                f"comm group (priority={high}) has is_high_priority_stream={backend.options.is_high_priority_stream}",
            )
    return True, (
        f"priority range least={least} greatest={greatest}; torch streams reach {got}; comm groups' NCCL options match"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--results-file", default=None)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.list:
        for c in cases(world):
            print(c[0], c[1], c[2], str(c[3]).replace("torch.", ""), c[4])
        return 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    torch.backends.cuda.matmul.allow_tf32 = False
    passed = failed = 0
    lines = []
    start = time.time()
    checks = [("priorities", check_priorities)] + [
        (
            " ".join([c[0], c[1], c[2], str(c[3]).replace("torch.", ""), f"{c[4][0]}x{c[4][1]}x{c[4][2]}"]),
            (lambda c=c, i=i: run_case(c, world, rank, seed=i + 1)),
        )
        for i, c in enumerate(cases(world))
    ]
    for name, fn in checks:
        try:
            ok, note = fn()
        except Exception as error:  # reported, then the ranks agree below
            ok, note = False, f"{type(error).__name__}: {str(error)[:400]}"
            if rank == 0:
                traceback.print_exc()
        flag = torch.tensor([0 if ok else 1], device="cuda")
        dist.all_reduce(flag)  # a case passes only if it passed on every rank
        ok = ok and flag.item() == 0
        passed += ok
        failed += not ok
        line = f"{'PASS' if ok else 'FAIL'} {name}: {note} ({time.time() - start:.1f} s)"
        lines.append(line)
        if rank == 0:
            print(line, flush=True)
    summary = f"SUMMARY kernel_level world={world} passed={passed} failed={failed}"
    if rank == 0:
        print(summary, flush=True)
        if args.results_file:
            Path(args.results_file).write_text("\n".join(lines + [summary]) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
