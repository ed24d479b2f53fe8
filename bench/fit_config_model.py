"""Fits the config model's constants (configs.py) to measured sweeps (no GPU needed).

    python bench/fit_config_model.py SWEEP.json [SWEEP.json ...]

The model (configs.estimated_cost) has one efficiency per candidate block plus its constants
(TILE_FIXED_STEPS, SPLIT_K_COST_PER_MB, SPLIT_TAIL_LAUNCH_STEPS; with --stream-k blocks also
STREAM_K_FIXED_STEPS and their efficiencies, with --one-launch SPLIT_K_FIXUP_COST_PER_MB). For a setting of them, each swept row gets the pick
`choose_config` would make among the configs the sweep measured on that row; the loss is the
sum over rows of log(time of the pick / time of the fastest measured candidate). Coordinate
descent over a multiplicative grid per parameter, a few rounds. Prints the fitted values, the
loss before and after, and every row whose pick is not its fastest candidate; the values are
then written into configs.py by hand (with the sweep they came from cited there).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_import import load_kernels  # noqa: E402

HOPPER_SMEM = 232448 - 1024
STEPS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)


def block_key(cfg) -> tuple:
    return (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages, cfg.num_warps)


def measured_rows(paths: list[str]) -> tuple[list[tuple], int]:
    """[(m, n, k, {config name: ms}, label)], multiprocessor count."""
    rows, num_sms = [], 132
    for path in paths:
        report = json.loads(Path(path).read_text())
        num_sms = report.get("num_sms", num_sms)
        for r in (r for r in report["rows"] if "variants" in r):
            times = {
                n: v["ms"]
                for n, v in r["variants"].items()
                if "ms" in v and not v.get("failed_check") and "/" not in n and n != "cublas"
            }
            if times:
                rows.append((r["m"], r["n"], r["k"], times, f"{r['m']}x{r['k']}x{r['n']} {r['b_layout']}"))
    return rows, num_sms


def loss(configs, pool: list, rows: list[tuple], num_sms: int, report: bool = False) -> float:
    total = 0.0
    for m, n, k, times, label in rows:
        cands = [c for c in pool if c.name in times and c.shared_memory_bytes(2) <= HOPPER_SMEM]
        if not cands:
            continue
        pick = min(cands, key=lambda c: configs.estimated_cost(c, m, n, k, num_sms))
        best = min(cands, key=lambda c: times[c.name])
        total += math.log(times[pick.name] / times[best.name])
        if report and pick is not best:
            print(f"  {label:<22} pick {pick.name:<32} {times[pick.name] / times[best.name]:.3f}x best {best.name}")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="BMxBNxBK:STAGES:WARPS:EPILOGUE:EFFICIENCY",
        help="a block to fit beside configs.CANDIDATES (starting efficiency)",
    )
    parser.add_argument(
        "--no-split", action="append", default=[], metavar="BMxBNxBK:STAGES:WARPS", help="offer this block unsplit only"
    )
    parser.add_argument(
        "--stream-k",
        action="append",
        default=[],
        metavar="BMxBNxBK:STAGES:WARPS:EPILOGUE:EFFICIENCY",
        help="a stream-K block (gemm_one_launch) to fit, efficiency fitted beside STREAM_K_FIXED_STEPS",
    )
    parser.add_argument(
        "--one-launch",
        action="store_true",
        help="offer the split-K and split-tail variants in one launch (split_fixup) beside the two-launch ones",
    )
    args = parser.parse_args()
    kernels, _ = load_kernels()
    configs = sys.modules[kernels.choose_config.__module__]
    rows, num_sms = measured_rows(args.sweeps)
    blocks = list(configs.CANDIDATES) + list(configs.LOCAL_CANDIDATES)
    for spec in args.add:
        dims, stages, warps, epilogue, eff = spec.split(":")
        bm, bn, bk = (int(x) for x in dims.split("x"))
        blocks.append(kernels.GemmConfig(bm, bn, bk, 8, int(stages), int(warps), True, int(epilogue), float(eff)))
    unsplit_only = set()
    for spec in args.no_split:
        dims, stages, warps = spec.split(":")
        unsplit_only.add((*(int(x) for x in dims.split("x")), int(stages), int(warps)))
    stream_k = []
    for spec in args.stream_k:
        dims, stages, warps, epilogue, eff = spec.split(":")
        bm, bn, bk = (int(x) for x in dims.split("x"))
        stream_k.append(
            kernels.GemmConfig(bm, bn, bk, 8, int(stages), int(warps), True, int(epilogue), float(eff), stream_k=True)
        )
    efficiency = {block_key(c): c.efficiency for c in blocks}
    efficiency.update({("sk", *block_key(c)): c.efficiency for c in stream_k})
    consts = {
        "TILE_FIXED_STEPS": configs.TILE_FIXED_STEPS,
        "SPLIT_K_COST_PER_MB": configs.SPLIT_K_COST_PER_MB,
        "SPLIT_TAIL_LAUNCH_STEPS": configs.SPLIT_TAIL_LAUNCH_STEPS,
    }
    if stream_k:
        consts["STREAM_K_FIXED_STEPS"] = configs.STREAM_K_FIXED_STEPS
    if args.one_launch:
        consts["SPLIT_K_FIXUP_COST_PER_MB"] = configs.SPLIT_K_FIXUP_COST_PER_MB

    def pool_for(eff):
        base = [dataclasses.replace(c, efficiency=eff[block_key(c)]) for c in blocks]
        fixups = (False, True) if args.one_launch else (False,)
        return (
            [
                dataclasses.replace(c, split_k=s, split_fixup=f and s > 1)
                for c in base
                for s in configs.SPLIT_K_FACTORS
                for f in fixups
                if (s == 1 or block_key(c) not in unsplit_only) and not (f and s == 1)
            ]
            + [
                dataclasses.replace(c, split_k=s, split_tail=True, split_fixup=f)
                for c in base[:2] + [c for c in base if c.num_stages == 6 and c.block_n == 128]
                for s in configs.SPLIT_K_FACTORS[1:]
                for f in fixups
            ]
            + [dataclasses.replace(c, efficiency=eff[("sk", *block_key(c))]) for c in stream_k]
        )

    def evaluate(eff, const, report=False):
        for name, value in const.items():
            setattr(configs, name, value)
        return loss(configs, pool_for(eff), rows, num_sms, report)

    start = evaluate(efficiency, consts, report=True)
    print(f"loss before: {start:.4f} over {len(rows)} rows")
    for _ in range(args.rounds):
        for key in list(efficiency):
            if efficiency[key] == 1.0:
                continue  # the reference block
            trials = {efficiency[key] * s for s in STEPS} | {efficiency[key]}
            efficiency[key] = min(
                trials, key=lambda v: (evaluate({**efficiency, key: v}, consts), abs(v - efficiency[key]))
            )
        for name in list(consts):
            trials = {consts[name] * s for s in STEPS} | {consts[name]}
            consts[name] = min(trials, key=lambda v: (evaluate(efficiency, {**consts, name: v}), abs(v - consts[name])))
    end = evaluate(efficiency, consts, report=True)
    print(f"loss after: {end:.4f}")
    for key, value in efficiency.items():
        print(f"  efficiency {key}: {value:.3f}")
    for name, value in consts.items():
        print(f"  {name} = {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
