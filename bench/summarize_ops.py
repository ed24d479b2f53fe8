"""Markdown tables from bench_ops JSON files (for docs/PERFORMANCE.md and issue notes).

    python3 bench/summarize_ops.py bench/results/<dir>/bench_ops_*.json [--min-m 4096]

Per row: the floor (max of cuBLAS alone and the collective alone) in ms, then every variant's
time / floor, the Syncopate variant auto ran, and the best Syncopate variant's speed-up over
sequential and over async-TP. Later files override earlier ones for the same (op, M, K, N, B).
A second table compares the kernel-level controls (issue #8) with sequential and plain two-stream.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

SHOWN = (
    "sequential",
    "async_tp",
    "two_stream",
    "kl_plain",
    "kl_priority",
    "kl_occupancy",
    "kl_both",
    "syncopate_ce",
    "syncopate_sm",
    "syncopate_nccl",
    "syncopate_auto",
)
SHORT = {
    "sequential": "seq",
    "async_tp": "asyncTP",
    "two_stream": "2-stream",
    "kl_plain": "kl",
    "kl_priority": "kl+prio",
    "kl_occupancy": "kl+occ",
    "kl_both": "kl+both",
    "syncopate_ce": "sy-ce",
    "syncopate_sm": "sy-sm",
    "syncopate_nccl": "sy-nccl",
    "syncopate_auto": "sy-auto",
}
KL = ("kl_plain", "kl_priority", "kl_occupancy", "kl_both")


def ms(row, name):
    return row["variants"].get(name, {}).get("ms")


def load(paths):
    rows = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            if "variants" in row:
                rows[(row["op"], row["m"], row["k"], row["n"], row["b_layout"])] = row
    return list(rows.values())


def fmt(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def ops_table(rows, min_m):
    head = (
        ["op", "M x K x N", "B", "floor ms"]
        + [SHORT[n] for n in SHOWN]
        + ["auto ran", "best sy / seq", "best sy / asyncTP"]
    )
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["m"] < min_m:
            continue
        floor = r.get("floor_ms")
        cells = [fmt(ms(r, n) / floor) if ms(r, n) and floor else "-" for n in SHOWN]
        auto = r.get("syncopate", {}).get("syncopate_auto", {})
        ran = auto.get("decision", "-") + ("" if auto.get("decision") != "fused" else f" {auto.get('backend')}")
        sy = [ms(r, n) for n in SHOWN if n.startswith("syncopate") and ms(r, n)]
        best = min(sy) if sy else None
        seq, atp = ms(r, "sequential"), ms(r, "async_tp")
        out.append(
            "| "
            + " | ".join(
                [r["op"], f"{r['m']}x{r['k']}x{r['n']}", r["b_layout"], fmt(floor)]
                + cells
                + [ran, fmt(seq / best) if best and seq else "-", fmt(atp / best) if best and atp else "-"]
            )
            + " |"
        )
    return "\n".join(out)


def kl_table(rows, min_m):
    head = (
        ["op", "M x K x N", "seq ms", "2-stream / seq"]
        + [f"{SHORT[n]} / seq" for n in KL]
        + ["best kl / 2-stream", "best control"]
    )
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["m"] < min_m or ms(r, "kl_plain") is None:
            continue
        seq, two = ms(r, "sequential"), ms(r, "two_stream")
        kl = {n: ms(r, n) for n in KL if ms(r, n)}
        best = min(kl, key=kl.get)
        out.append(
            "| "
            + " | ".join(
                [r["op"], f"{r['m']}x{r['k']}x{r['n']}", fmt(seq), fmt(two / seq)]
                + [fmt(kl[n] / seq) if n in kl else "-" for n in KL]
                + [fmt(kl[best] / two) if two else "-", SHORT[best]]
            )
            + " |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--min-m", type=int, default=0)
    args = parser.parse_args()
    rows = load(args.files)
    print(ops_table(rows, args.min_m))
    print()
    print(kl_table(rows, args.min_m))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
