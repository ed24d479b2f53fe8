"""Per-row metrics and the targets of issue #7, as pure functions of bench_ops.py's rows.

A row is the dict bench_ops.py stores: op, m, k, n, label, variants {name: {"ms", ...} or
{"skipped"} or {"failed"}}, and syncopate {name: {"decision", "predicted_us", ...}}.

Targets (issue #7; on nvidia-h200-x4, bf16; evaluated here for whatever world ran):
- rows with M >= 4096: the best fused Syncopate variant at most 1.10x the floor
  (max(GEMM alone, collective alone)), faster than sequential and than async-TP, and over
  all such rows a geometric-mean speedup over sequential of at least 1.25x;
- rows with M < 4096: syncopate_auto (the simulator's choice) never more than 1.03x sequential;
- the simulator's predicted fused time within 15% of the measured one, per fused variant.
Each check is met, missed (with by how much), not measured (a variant failed or was
skipped: the reason is kept) or n/a (e.g. no async-TP op exists for GEMM+AR).
"""

from __future__ import annotations

import math
from typing import Optional

# Every fixed fused variant, the staged (reduction-in-the-epilogue) GEMM+RS/AR ones included:
# the best of them is what the fused targets judge.
FUSED = (
    "syncopate_ce",
    "syncopate_sm",
    "syncopate_nccl",
    "syncopate_epilogue_ce",
    "syncopate_epilogue_sm",
    "syncopate_epilogue_nccl",
)
AUTO = "syncopate_auto"
LARGE_M = 4096
FLOOR_LIMIT = 1.10
GEOMEAN_LIMIT = 1.25
SMALL_M_LIMIT = 1.03
SIM_LIMIT = 0.15
REFERENCE = ("gemm", "collective")


def ms_of(row: dict) -> dict[str, float]:
    """{variant: median ms} of the variants that were timed and passed."""
    return {n: v["ms"] for n, v in row.get("variants", {}).items() if "ms" in v}


def why_missing(row: dict, name: str) -> str:
    v = row.get("variants", {}).get(name)
    if v is None:
        return f"{name} not run"
    if "skipped" in v:
        return f"{name} skipped: {v['skipped']}"
    if "failed" in v:
        return f"{name} failed: {v['failed']}"
    return f"{name} has no time"


def decision(row: dict, name: str) -> Optional[str]:
    return row.get("syncopate", {}).get(name, {}).get("decision")


def fused_times(row: dict) -> dict[str, float]:
    """Measured ms of the fused variants (auto too when it chose fused)."""
    v = ms_of(row)
    out = {n: v[n] for n in FUSED if n in v}
    if AUTO in v and decision(row, AUTO) == "fused":
        out[AUTO] = v[AUTO]
    return out


def predictions(row: dict) -> dict[str, dict]:
    """{variant: {predicted_ms, measured_ms, error}} for each Syncopate variant with a
    prediction of what it ran (fused, or auto's decision), plus "sequential": the simulator's
    sequential time (from auto's context, else any) against measured NCCL + cuBLAS."""
    v = ms_of(row)
    out = {}
    sequential_prediction = None
    for name, info in row.get("syncopate", {}).items():
        predicted = info.get("predicted_us") or {}
        if "sequential" in predicted and (sequential_prediction is None or name == AUTO):
            sequential_prediction = predicted["sequential"]
        what = "fused" if name in FUSED else info.get("decision")
        if name in v and what in predicted:
            out[name] = _compare(predicted[what] / 1000.0, v[name])
            out[name]["what"] = what
    if sequential_prediction is not None and "sequential" in v:
        out["sequential"] = _compare(sequential_prediction / 1000.0, v["sequential"])
        out["sequential"]["what"] = "sequential"
    return out


def _compare(predicted_ms: float, measured_ms: float) -> dict:
    return {
        "predicted_ms": predicted_ms,
        "measured_ms": measured_ms,
        "error": predicted_ms / measured_ms - 1.0 if measured_ms > 0 else math.inf,
    }


def row_metrics(row: dict) -> dict:
    """Floor, ratios to floor, speedups over sequential and async-TP, the best fused variant,
    what auto chose, and predicted-vs-measured: the derived fields bench_ops.py stores."""
    v = ms_of(row)
    out: dict = {}
    compared = [n for n in v if n not in REFERENCE]
    if "gemm" in v and "collective" in v:
        out["floor_ms"] = max(v["gemm"], v["collective"])
        out["ratio_to_floor"] = {n: v[n] / out["floor_ms"] for n in compared}
    for base in ("sequential", "async_tp"):
        if base in v:
            out[f"speedup_over_{base}"] = {n: v[base] / v[n] for n in compared if n != base}
    fused = fused_times(row)
    if fused:
        best = min(fused, key=fused.get)
        out["best_fused"] = {"variant": best, "ms": fused[best]}
    if AUTO in row.get("syncopate", {}):
        out["auto_chose"] = {
            k: row["syncopate"][AUTO].get(k)
            for k in ("decision", "backend", "algorithm", "split", "tile_order", "gemm_config")
        }
    out["predicted_vs_measured"] = predictions(row)
    return out


def _check(
    target: str,
    row: Optional[dict],
    value: Optional[float],
    limit: float,
    kind: str,
    note: str = "",
    status: Optional[str] = None,
) -> dict:
    """kind: "max" (value <= limit), "below" (value < limit), "min" (value >= limit) or
    "error" (value <= limit, both fractions). missed_by: how far past the limit, as a fraction
    of the limit; for "error", in the value's own units (0.10 = 10 percentage points)."""
    if status is None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            status = "not measured"
        elif kind in ("max", "error"):
            status = "met" if value <= limit else "missed"
        elif kind == "below":
            status = "met" if value < limit else "missed"
        else:
            status = "met" if value >= limit else "missed"
    missed_by = None
    if status == "missed":
        missed_by = {"min": limit / value - 1.0, "error": value - limit}.get(kind, value / limit - 1.0)
    where = (
        {} if row is None else {"op": row["op"], "label": row["label"], "shape": f"{row['m']}x{row['k']}x{row['n']}"}
    )
    return {
        "target": target,
        **where,
        "value": value,
        "limit": limit,
        "kind": kind,
        "status": status,
        "missed_by": missed_by,
        "note": note,
    }


def evaluate(rows: list[dict]) -> dict:
    """Every target check, row by row, and a summary {target: {status: count}}."""
    checks = []
    speedups = []
    for row in rows:
        v = ms_of(row)
        fused = fused_times(row)
        best = min(fused, key=fused.get) if fused else None
        no_fused = "; ".join(why_missing(row, n) for n in FUSED)
        if row["m"] >= LARGE_M:
            floor = max(v["gemm"], v["collective"]) if "gemm" in v and "collective" in v else None
            if best is None or floor is None:
                note = (
                    no_fused
                    if best is None
                    else "floor: " + "; ".join(why_missing(row, n) for n in REFERENCE if n not in v)
                )
                checks.append(_check("fused <= 1.10x floor", row, None, FLOOR_LIMIT, "max", note))
            else:
                checks.append(_check("fused <= 1.10x floor", row, fused[best] / floor, FLOOR_LIMIT, "max", best))
            for base in ("sequential", "async_tp"):
                target = f"fused faster than {base}"
                if best is None:
                    checks.append(_check(target, row, None, 1.0, "below", no_fused))
                elif base not in v:
                    skipped = "skipped" in row.get("variants", {}).get(base, {})
                    checks.append(
                        _check(
                            target, row, None, 1.0, "below", why_missing(row, base), status="n/a" if skipped else None
                        )
                    )
                else:
                    checks.append(_check(target, row, fused[best] / v[base], 1.0, "below", best))
            if best is not None and "sequential" in v:
                speedups.append(v["sequential"] / fused[best])
        else:
            if AUTO in v and "sequential" in v:
                checks.append(
                    _check(
                        "auto <= 1.03x sequential",
                        row,
                        v[AUTO] / v["sequential"],
                        SMALL_M_LIMIT,
                        "max",
                        f"auto chose {decision(row, AUTO)}",
                    )
                )
            else:
                missing = [n for n in (AUTO, "sequential") if n not in v]
                checks.append(
                    _check(
                        "auto <= 1.03x sequential",
                        row,
                        None,
                        SMALL_M_LIMIT,
                        "max",
                        "; ".join(why_missing(row, n) for n in missing),
                    )
                )
        for name, p in predictions(row).items():
            if p["what"] == "fused":
                checks.append(
                    _check(
                        "simulator within 15%",
                        row,
                        abs(p["error"]),
                        SIM_LIMIT,
                        "error",
                        f"{name}: predicted {p['predicted_ms']:.3f} ms, measured {p['measured_ms']:.3f} ms",
                    )
                )
    large = [r for r in rows if r["m"] >= LARGE_M]
    if large:
        geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None
        note = f"{len(speedups)} of {len(large)} rows with M >= {LARGE_M} measured"
        checks.append(_check("geomean speedup over sequential >= 1.25x", None, geomean, GEOMEAN_LIMIT, "min", note))
    summary: dict[str, dict[str, int]] = {}
    for c in checks:
        summary.setdefault(c["target"], {}).setdefault(c["status"], 0)
        summary[c["target"]][c["status"]] += 1
    return {"checks": checks, "summary": summary}


def format_check(c: dict) -> str:
    where = f"{c['op']} {c['shape']} {c['label']}" if "op" in c else "all rows"
    value = "-" if c["value"] is None else f"{c['value']:.3f}"
    status = c["status"]
    if status == "missed" and c["kind"] == "error":
        status = f"MISSED by {100 * c['missed_by']:.1f} points"
    elif status == "missed":
        status = f"MISSED by {100 * c['missed_by']:.1f}%"
    return f"  {c['target']:42} {where:44} {value:>7} (limit {c['limit']:.2f}) {status}" + (
        f"  [{c['note']}]" if c["note"] else ""
    )


def format_report(report: dict) -> list[str]:
    lines = ["targets (issue #7), every check:"]
    lines += [format_check(c) for c in report["checks"]]
    lines.append("targets summary:")
    for target, counts in report["summary"].items():
        lines.append(f"  {target:42} " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    return lines
