"""Why stream-K's K-step is slow (issue 18): one probe of the L2-reuse explanation.

    python bench/probe_stream_k.py --out $OUT/gemm18

The sm_90 SASS of gemm_stream_k_flat_kernel keeps the persistent kernel's pipelined K loop (TMA
loads three steps ahead, wgmma.wait_group 1, no spills; see docs/PERFORMANCE.md), so the
explanation left is memory: in stream-K the programs that share a B column block (the M-tiles of
one N column) are at different K offsets, so each B block is fetched from DRAM once per M-tile
instead of once. Two shapes with the same tile count (96 tiles of 128x128), the same K (4096)
and the same flops: 512 x 3072 (four M-tiles share each B column: 25 MB of B read four times
from L2) and 128 x 12288 (no sharing: 100 MB of B read once). If stream-K's time on the first is
about its time on the second while the data-parallel kernel's is not, stream-K loses the B reuse.
Both kernels checked against fp32 with NaN-poisoned outputs (bench_gemm.bench_shape).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gemm  # noqa: E402
import shapes  # noqa: E402

GemmConfig = bench_gemm.GemmConfig
DATA_PARALLEL = GemmConfig(128, 128, 64, 8, 6, 4, True, 1, 1.0)
STREAM_K = GemmConfig(128, 128, 64, 8, 4, 4, True, 1, 1.0, stream_k=True)
SHAPES = ((512, 4096, 3072), (128, 4096, 12288))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args()
    import torch

    props = torch.cuda.get_device_properties(0)
    kind = bench_gemm.device_kind(props.name)
    rows = []
    for m, k, n in SHAPES:
        shape = shapes.GemmShape(m, k, n, "nk", labels=("probe",))
        configs = {DATA_PARALLEL.name: DATA_PARALLEL, STREAM_K.name: STREAM_K}
        row = bench_gemm.bench_shape(shape, configs, DATA_PARALLEL.name, torch.bfloat16, args.samples)
        rows.append(row)
        times = " ".join(f"{name} {v.get('ms', float('nan')) * 1e3:.1f} us" for name, v in row["variants"].items())
        bad = [name for name, v in row["variants"].items() if v["failed_check"]]
        print(f"{m}x{k}x{n} nk: {times}; failed checks: {bad or 'none'}", flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"probe_stream_k_{kind}_{now:%Y-%m-%d_%H%M}.json"
    path.write_text(
        json.dumps(
            {
                "benchmark": "probe_stream_k",
                "device": props.name,
                "device_kind": kind,
                "date": now.isoformat(timespec="seconds"),
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
