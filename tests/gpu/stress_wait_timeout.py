"""The timeout path of a Triton-side bounded wait under stress, on one GPU (no ranks, no runtime).

    python tests/gpu/stress_wait_timeout.py [--old] [--launches 400] [--bound-us 40]

Every program of a launch waits on a slot that never reaches its value, so all time out within
microseconds of each other; the first claims the error record and the others see its flag. The
threads of one program can then disagree: a warp that timed out just before the flag was set
writes the record, its neighbour that saw the flag does not. With `--old` the record is written
by the pre-fix code (Triton's scalar tl.atomic_cas, which broadcasts its result behind a CTA
barrier that only some warps reach); without it, by syncopate.language.wait as shipped. After
the wait each program runs work with CTA barriers (a reduction), as a GEMM tile would.
Prints `SUMMARY stress-wait variant=... launches=N ok=N` once every launch finished with a
complete record; a launch that never finishes hangs this process (run it under `timeout`).
"""

import argparse
import sys
import time

import torch
import triton
import triton.language as tl

import syncopate.language as syl


@triton.jit
def _old_record_timeout(error_ptr, rank, slot, expected, seen, tile):
    old = tl.atomic_cas(error_ptr, tl.full([], 0, tl.int64), tl.full([], 1, tl.int64), sem="acq_rel", scope="sys")
    if old == 0:
        tl.store(error_ptr + 1, rank)
        tl.store(error_ptr + 2, slot)
        tl.store(error_ptr + 3, expected)
        tl.store(error_ptr + 4, seen)
        tl.store(error_ptr + 5, tile)


@triton.jit
def _old_wait(signal_ptr, expected, bound_ns, error_ptr, rank, slot, tile):
    seen = syl.load_acquire(signal_ptr)
    aborted = tl.load(error_ptr, volatile=True)
    start = syl.now_ns()
    elapsed = start - start
    while ((seen - expected) < 0) & (elapsed < bound_ns) & (aborted == 0):
        seen = syl.load_acquire(signal_ptr)
        aborted = tl.load(error_ptr, volatile=True)
        elapsed = syl.now_ns() - start
    if (seen - expected) < 0:
        if aborted == 0:
            _old_record_timeout(error_ptr, rank, slot, expected, seen, tile)


@triton.jit
def _stress_kernel(signals_ptr, error_ptr, bound_ns, data_ptr, out_ptr, OLD: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    slot = pid % 4
    if OLD:
        _old_wait(signals_ptr + slot, 1, bound_ns, error_ptr, 0, slot, pid)
    else:
        syl.wait(signals_ptr + slot, 1, bound_ns, error_ptr, 0, slot, pid)
    rows = tl.arange(0, BLOCK)
    x = tl.load(data_ptr + rows[:, None] * BLOCK + rows[None, :])
    total = tl.sum(tl.sum(x, axis=1), axis=0)  # cross-warp reductions: shared memory and barriers
    tl.debug_barrier()
    tl.store(out_ptr + pid, total)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", action="store_true", help="the pre-fix timeout record (CAS behind a barrier)")
    parser.add_argument("--launches", type=int, default=400)
    parser.add_argument("--bound-us", type=float, default=40.0)
    parser.add_argument("--warps", type=int, default=8)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    programs = torch.cuda.get_device_properties(device).multi_processor_count
    signals = torch.zeros(4, dtype=torch.int32, device=device)  # never reach 1
    error = torch.zeros(8, dtype=torch.int64, device=device)
    block = 64
    data = torch.ones(block * block, dtype=torch.float32, device=device)
    out = torch.zeros(programs, dtype=torch.float32, device=device)
    variant = "old" if args.old else "shipped"
    ok, bad = 0, []
    t0 = time.perf_counter()
    for i in range(args.launches):
        error.zero_()
        out.zero_()
        _stress_kernel[(programs,)](
            signals, error, int(args.bound_us * 1000), data, out, OLD=args.old, BLOCK=block, num_warps=args.warps
        )
        torch.cuda.synchronize()
        rec = error.tolist()
        sums_ok = bool((out == float(block * block)).all())
        if (
            rec[0] == 1
            and rec[2] in (0, 1, 2, 3)
            and rec[3] == 1
            and rec[4] == 0
            and 0 <= rec[5] < programs
            and sums_ok
        ):
            ok += 1
        else:
            bad.append((i, rec[:6], sums_ok))
        if (i + 1) % 100 == 0:
            print(f"{variant}: {i + 1} launches done ({time.perf_counter() - t0:.1f} s)", flush=True)
    for b in bad[:5]:
        print(f"BAD launch {b[0]}: record {b[1]} sums_ok={b[2]}", flush=True)
    print(
        f"SUMMARY stress-wait variant={variant} programs={programs} warps={args.warps} "
        f"launches={args.launches} ok={ok} bad={len(bad)}",
        flush=True,
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
