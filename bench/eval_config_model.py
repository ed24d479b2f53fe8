"""How good the config model's picks are on a measured sweep (no GPU needed).

    python bench/eval_config_model.py bench/results/.../sweep_small_m_nvidia-h200_....json

For every row of a sweep JSON (sweep_small_m.py or bench_gemm.py --small-m/--sweep), the config
that `choose_config` picks now for the row's shape on the swept device's multiprocessor count,
its measured time / cuBLAS, the best measured variant's, and whether the pick was measured at
all. Prints a per-row table and the counts within 5% of cuBLAS; exits 1 when a pick was not
among the measured variants (the model then chose something the sweep cannot vouch for).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_import import load_kernels  # noqa: E402

# Shared memory per block on H100 / H200 (opt-in), less the margin select_config keeps.
HOPPER_SMEM = 232448 - 1024


def plain_variants(row: dict) -> dict[str, float]:
    """name -> ms of the row's correct variants launched with the default grid."""
    return {
        name: v["ms"]
        for name, v in row["variants"].items()
        if "ms" in v and not v.get("failed_check") and "/" not in name and name != "cublas"
    }


def evaluate(rows: list[dict], num_sms: int, choose) -> list[dict]:
    out = []
    for row in (r for r in rows if "variants" in r):
        cublas = row["variants"]["cublas"].get("ms")
        if not cublas:
            continue
        measured = plain_variants(row)
        pick = choose(row["m"], row["n"], row["k"], num_sms, 2, HOPPER_SMEM, local=True).name
        every = {n: v["ms"] for n, v in row["variants"].items() if "ms" in v and n != "cublas"}
        best = min(every, key=every.get) if every else None
        out.append(
            {
                "shape": f"{row['m']}x{row['k']}x{row['n']} {row['b_layout']}",
                "pick": pick,
                "pick_ratio": measured[pick] / cublas if pick in measured else math.nan,
                "best": best,
                "best_ratio": every[best] / cublas if best else math.nan,
                "old_ratio": row.get("ratio_model", math.nan),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+")
    args = parser.parse_args()
    kernels, _ = load_kernels()
    rows, num_sms = [], 132
    for path in args.sweeps:
        report = json.loads(Path(path).read_text())
        num_sms = report.get("num_sms", num_sms)
        rows.extend(report["rows"])
    result = evaluate(rows, num_sms, kernels.choose_config)
    for r in result:
        print(
            f"{r['shape']:<22} pick {r['pick_ratio']:.3f} {r['pick']:<32} best {r['best_ratio']:.3f} "
            f"{r['best']:<36} run's model {r['old_ratio']:.3f}"
        )
    picked = [r["pick_ratio"] for r in result if not math.isnan(r["pick_ratio"])]
    missing = [r["shape"] for r in result if math.isnan(r["pick_ratio"])]
    if picked:
        geo = math.exp(sum(map(math.log, picked)) / len(picked))
        print(
            f"model picks: geomean {geo:.3f}, {sum(x <= 1.05 for x in picked)}/{len(picked)} within 5%, "
            f"worst {max(picked):.3f}; best measured: "
            f"{sum(r['best_ratio'] <= 1.05 for r in result)}/{len(result)} within 5%"
        )
    if missing:
        print(f"picks not measured: {missing}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
