"""A markdown table of a bench_call_path.py results file, the profiler-free kernel starts beside
the profiled ones, the split graphs (the default) beside the one-graph and plain-split contexts (for
docs/PERFORMANCE.md).

    python bench/summarize_call_path.py bench/results/call-path-<kind>-w1-<date>.json
"""

from __future__ import annotations

import json
import sys

COLUMNS = (  # (header, row key, format)
    ("host, graph (us)", "host_us_graph", "{:.1f}"),
    ("host, new objects (us)", "host_us_graph_new_objects", "{:.1f}"),
    ("replay alone, host (us)", "replay_only_host_us", "{:.1f}"),
    ("torch.mm host (us)", "torch_mm_host_us", "{:.1f}"),
    ("first node (us)", "stamp_first_node_us", "{:.1f}"),
    ("GEMM start, stamps (us)", None, None),  # [lower, upper]
    ("GEMM stamp, one graph (us)", "stamp_gemm_us_onegraph", "{:.1f}"),
    ("host, one graph (us)", "host_us_onegraph", "{:.1f}"),
    ("GEMM stamp, plain split (us)", "stamp_gemm_us_plainsplit", "{:.1f}"),
    ("host, plain split (us)", "host_us_plainsplit", "{:.1f}"),
    ("floor: bare graph (us)", "floor_graph_us", "{:.1f}"),
    ("floor: eager Triton (us)", "floor_triton_us", "{:.1f}"),
    ("profiler adds, graph (us)", "profiler_adds_graph_us", "{:+.1f}"),
    ("start, profiler (us)", "kernel_start_us_graph", "{:.1f}"),
    ("torch.mm start, profiler (us)", "torch_mm_start_us", "{:.1f}"),
)


def cell(row: dict, key, fmt) -> str:
    if key is None:
        lo, hi = row.get("stamp_gemm_us"), row.get("gemm_start_upper_us")
        if lo is None or hi is None:
            return "-"
        return f"{lo:.1f}-{hi:.1f}"
    value = row.get(key)
    if value is None or value != value:
        return "-"
    return fmt.format(value)


def table(doc: dict) -> str:
    lines = [
        "| op | M x K x N | " + " | ".join(h for h, _, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for row in doc["rows"]:
        shape = f"{row['m']}x{row['k']}x{row['n']}"
        if row.get("correctness_only"):
            lines.append(
                f"| {row['op']} | {shape} | correctness only: rel_err {row['rel_err']:.1e}, "
                f"{'PASS' if row['passed'] else 'FAIL'} |"
            )
            continue
        if "error" in row:
            lines.append(f"| {row['op']} | {shape} | error: {row['error'][:80]} |")
            continue
        lines.append(f"| {row['op']} | {shape} | " + " | ".join(cell(row, k, f) for _, k, f in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv) -> int:
    for path in argv[1:]:
        doc = json.loads(open(path).read())
        print(
            f"{path}: {doc['kind']}, world {doc['world']}{' (shared GPU)' if doc['shared_gpu'] else ''}, {doc['date']}"
        )
        print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
