"""The simulator against recorded GPU measurements: predicted vs measured per row and variant.

    python3 bench/sim_accuracy.py                                  # the session-2 all-rows file
    python3 bench/sim_accuracy.py FILE.json [...] --calib calib/h200.json --json [PATH]

CPU only: for every row of a `bench_ops.py` JSON and every timed variant with a simulator
counterpart, it re-runs *today's* simulator with the configuration recorded in that row and
prints predicted vs measured, the error and whether it is within TARGET (issue #7: 15%):

  syncopate_ce / _sm / _nccl  fused, with the row's recorded backend, algorithm, split, tile
                              order and block sizes (gemm_config)
  syncopate_auto              what auto ran: fused as above, or, when it chose sequential, the
                              torch path (NCCL collective then cuBLAS), simulated as below
  kl_plain / _priority        kernel-level overlap (syncopate.kernel_level via bench/kernel_level_
  kl_occupancy / _both        variants.py): the simulator's kernel-level mode on the NCCL ring plan
  kl_triton / _triton_shaped  split into the run's `chunks`, cuBLAS's 128x256 tiles (the Triton
                              variants: 64x128, natural residency 2, shaped to 1), an SM carveout
                              of CARVEOUT_SMS for _occupancy / _both; priority is not modelled
                              (measured ~0), so _priority is predicted as _plain
  sequential                  NCCL + cuBLAS, against the simulator's sequential mode with auto's
                              recorded configuration (what bench_ops.py compared it with). The
                              simulator has no model of NCCL's own collective kernels: its NCCL
                              backend moves the plan's chunks, which predicts the torch path 15-80%
                              too slow, so auto's backend (mostly the copy engine) stands in.

Then a summary per op x M class (M >= 4096 / small) x kind (fused / sequential), over all rows
and over the hold-out rows (rows whose shape was not used to derive a calibration parameter;
HELD_IN lists the others; of kernel-level, the small-M rows and the carveout variants are held
in: KL_HELD_IN_*). --json writes bench/results/sim-accuracy-<date>.json (or PATH).
A report, not a test: exit 0 unless an input is malformed (1, naming file, row and field) or
the compiled `syncopate` package cannot be imported (2).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = REPO / "bench/results/h200x2-2026-11-22-session2/bench_ops_all_rows_2234.json"
DEFAULT_CALIB = REPO / "calib/h200.json"
TARGET = 0.15
SMALL_M = 4096  # rows with M below this are "small" (bench/targets.py's split)
COLLECTIVE = {"ag_gemm": "all-gather", "gemm_rs": "reduce-scatter", "gemm_ar": "all-reduce"}
FUSED_VARIANTS = ("syncopate_ce", "syncopate_sm", "syncopate_nccl")
# bench/kernel_level_variants.py's settings, as simulator options (CARVEOUT_SMS: its default).
CARVEOUT_SMS = 16
_CUBLAS = dict(block_m=128, block_n=256, group_m=8)
_TRITON = dict(block_m=64, block_n=128, group_m=8)
KL_VARIANTS = {
    "kl_plain": dict(_CUBLAS),
    "kl_priority": dict(_CUBLAS),
    "kl_occupancy": dict(_CUBLAS, sm_carveout=CARVEOUT_SMS),
    "kl_both": dict(_CUBLAS, sm_carveout=CARVEOUT_SMS),
    "kl_triton": dict(_TRITON, natural_residency=2),
    "kl_triton_shaped": dict(_TRITON, natural_residency=2, residency=1),
}
KL_OPS = ("ag_gemm", "gemm_rs")
# Rows whose shapes the calibration's new parameters were measured on (the two profiles of
# bench/results/h200x2-2026-11-22-session2/); every other row is hold-out.
HELD_IN = {
    ("ag_gemm", 1024, 4096, 3072): "profile_ag_gemm_1024x4096x3072_nk.txt",
    ("gemm_rs", 8192, 8192, 8192): "profile_gemm_rs_8192x8192x8192_split4.txt",
}
# Kernel-level rows that derived its calibration (calib/h200.json, kernel_level): the rows with M
# below SMALL_M (chunk_latency_us) and, at M >= SMALL_M, the carveout variants (carveout_slowdown).
KL_HELD_IN_SMALL_M = "kernel_level.chunk_latency_us fit (kernel-level rows with small M)"
KL_HELD_IN_CARVEOUT = "kernel_level.carveout_slowdown (kl_occupancy / kl_plain, kl_both / kl_priority)"
_CONFIG = re.compile(r"^(\d+)x(\d+)x(\d+)(?:_.*?_g(\d+))?")


class InputError(Exception):
    """A recorded file that does not hold what bench_ops.py writes."""


def repo_relative(path: Path) -> str:
    """`path` relative to the repository when it lies inside it (results never record a
    machine's directories), else as given."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def parse_config(text, where: str) -> tuple[int, int, int]:
    """(block_m, block_n, group_m) from a gemm_config like "128x256x64_s3_w8_g8_ws_e2"."""
    match = _CONFIG.match(text) if isinstance(text, str) else None
    if not match:
        raise InputError(f"{where}: gemm_config: expected 'BMxBNxBK_..._g<G>_...', got {text!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(4) or 8)


def field(obj: dict, key: str, where: str, kind=None):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{where}: missing field {key!r}")
    value = obj[key]
    if kind is not None and not isinstance(value, kind):
        raise InputError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def measured_ms(row: dict, variant: str):
    """The variant's recorded time, or None (skipped / failed: the reason is elsewhere)."""
    v = row.get("variants", {}).get(variant)
    ms = v.get("ms") if isinstance(v, dict) else None
    return ms if isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0 else None


def cases(row: dict, where: str, chunks: int = 4) -> list[dict]:
    """The (variant, configuration) pairs of one row that have a simulator counterpart."""
    out = []
    if row.get("op") in KL_OPS:
        for name, settings in KL_VARIANTS.items():
            if measured_ms(row, name) is not None:
                config = dict(backend="nccl", algorithm="ring", split=chunks, order="arrival", **settings)
                out.append(dict(variant=name, kind="kernel-level", config=config, recorded_prediction_us=None))
    recorded = row.get("syncopate", {})
    for name in (*FUSED_VARIANTS, "syncopate_auto"):
        info = recorded.get(name)
        if not isinstance(info, dict) or measured_ms(row, name) is None:
            continue
        here = f"{where}.syncopate.{name}"
        decision = field(info, "decision", here, str)
        if decision not in ("fused", "sequential"):
            raise InputError(f"{here}.decision: expected 'fused' or 'sequential', got {decision!r}")
        then = (info.get("predicted_us") or {}).get(decision)
        out.append(dict(variant=name, kind=decision, config=recorded_config(info, here), recorded_prediction_us=then))
    auto = recorded.get("syncopate_auto")
    if measured_ms(row, "sequential") is not None and isinstance(auto, dict):
        here = f"{where}.syncopate.syncopate_auto"
        then = (auto.get("predicted_us") or {}).get("sequential")
        out.append(
            dict(
                variant="sequential", kind="sequential", config=recorded_config(auto, here), recorded_prediction_us=then
            )
        )
    return out


def recorded_config(info: dict, where: str) -> dict:
    """The plan and kernel configuration a context recorded."""
    block_m, block_n, group_m = parse_config(field(info, "gemm_config", where), where)
    return dict(
        backend=field(info, "backend", where, str),
        algorithm=field(info, "algorithm", where, str),
        split=field(info, "split", where, int),
        order=field(info, "tile_order", where, str),
        block_m=block_m,
        block_n=block_n,
        group_m=group_m,
    )


def simulate(
    sy, calib, op: str, m: int, k: int, n: int, world: int, dtype: str, config: dict, kind: str, cache: dict
) -> float:
    """Today's prediction (us) of one configuration: fused, kernel-level or sequential."""
    collective = COLLECTIVE[op]
    k_local = k if op == "ag_gemm" else k // world
    key = (collective, m, k_local, n, world, dtype, tuple(sorted(config.items())))
    if key not in cache:
        shape = [m, k_local] if collective == "all-gather" else [m, n]
        plan = sy.make_plan(
            collective,
            world_size=world,
            shape=shape,
            algorithm=config["algorithm"],
            split=config["split"],
            dtype=dtype,
            dim=0,
            backend=config["backend"],
        )
        gemm = sy.GemmShape(m, n, k_local, config["block_m"], config["block_n"])
        cache[key] = sy.simulate(
            plan,
            gemm,
            calib,
            order=config["order"],
            group_m=config["group_m"],
            kernel_level_residency=config.get("residency", 0),
            natural_residency=config.get("natural_residency", 1),
            sm_carveout=config.get("sm_carveout", 0),
        )
    p = cache[key]
    return {"fused": p.fused_us, "kernel-level": p.kernel_level_us, "sequential": p.sequential_us}[kind]


def evaluate(paths: list[Path], calib_path: Path, sy) -> tuple[list[dict], list[dict]]:
    """(one result per row x variant, one provenance entry per input file)."""
    calib = sy.calibration(str(calib_path))
    results, sources, cache = [], [], {}
    for path in paths:
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise InputError(f"{path}: cannot read a bench_ops JSON ({error})") from None
        rows = field(report, "rows", str(path.name), list)
        world = field(report, "world", str(path.name), int)
        sources.append(
            dict(
                file=str(path.relative_to(REPO) if path.is_relative_to(REPO) else path),
                device=report.get("device_kind"),
                date=report.get("date"),
                world=world,
                rows=len(rows),
            )
        )
        dtype = report.get("dtype", "bf16")
        chunks = (report.get("args") or {}).get("chunks", 4)  # bench_ops.py --chunks (kernel-level pieces)
        if not isinstance(chunks, int) or chunks < 1:
            raise InputError(f"{path.name}: args.chunks: expected an integer >= 1, got {chunks!r}")
        for i, row in enumerate(rows):
            where = f"{path.name}: rows[{i}]"
            op = field(row, "op", where, str)
            if op not in COLLECTIVE:
                raise InputError(f"{where}.op: expected one of {sorted(COLLECTIVE)}, got {op!r}")
            m, k, n = (field(row, d, where, int) for d in ("m", "k", "n"))
            row_world = row.get("world", world)
            shape_key = (op.replace("gemm_ar", "gemm_rs"), m, k, n)
            for case in cases(row, where, chunks):
                predicted = simulate(sy, calib, op, m, k, n, row_world, dtype, case["config"], case["kind"], cache)
                measured = measured_ms(row, case["variant"]) * 1000.0
                error = predicted / measured - 1.0
                results.append(
                    dict(
                        file=path.name,
                        row=i,
                        op=op,
                        m=m,
                        k=k,
                        n=n,
                        b_layout=row.get("b_layout"),
                        label=row.get("label"),
                        world=row_world,
                        variant=case["variant"],
                        kind=case["kind"],
                        config=case["config"],
                        predicted_us=predicted,
                        recorded_prediction_us=case["recorded_prediction_us"],
                        measured_us=measured,
                        error=error,
                        within_target=abs(error) <= TARGET,
                        m_class="M>=4096" if m >= SMALL_M else "small M",
                        held_in=held_in(case, shape_key, m),
                    )
                )
    return results, sources


def held_in(case: dict, shape_key: tuple, m: int):
    """Why a result's row derived a calibration parameter of its kind, or None (hold-out)."""
    if case["kind"] == "kernel-level":
        if m < SMALL_M:
            return KL_HELD_IN_SMALL_M
        return KL_HELD_IN_CARVEOUT if case["config"].get("sm_carveout") else None
    return HELD_IN.get(shape_key)


def summarize(results: list[dict]) -> list[dict]:
    """Per (op, M class, kind): count, within target, median and worst |error|, median error."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        for key in (
            (r["op"], r["m_class"], r["kind"]),
            ("all ops", r["m_class"], r["kind"]),
            ("all ops", "all M", r["kind"]),
        ):
            groups.setdefault(key, []).append(r)
    out = []
    for (op, m_class, kind), rs in sorted(groups.items()):
        errors = [r["error"] for r in rs]
        out.append(
            dict(
                op=op,
                m_class=m_class,
                kind=kind,
                n=len(rs),
                within=sum(r["within_target"] for r in rs),
                median_error=statistics.median(errors),
                median_abs_error=statistics.median(abs(e) for e in errors),
                worst_error=max(errors, key=abs),
            )
        )
    return out


def git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src/sim", "include/syncopate/sim", "calib"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        files = sorted({line[3:] for line in dirty.splitlines() if line.strip()})
        return rev + (f" + uncommitted changes to {', '.join(files)}" if files else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def print_report(results: list[dict], summary_all: list[dict], summary_out: list[dict]) -> None:
    print(
        f"{'op':8} {'M x K x N':>19} {'B':2} {'variant':15} {'config':34} {'then':>8} "
        f"{'today':>8} {'measured':>9} {'error':>7}  within {100 * TARGET:.0f}%"
    )
    for r in results:
        c = r["config"]
        config = (
            f"{r['kind'][:3]} {c['backend']} {c['algorithm']} s{c['split']} {c['order']} {c['block_m']}x{c['block_n']}"
        )
        if c.get("sm_carveout"):
            config += f" co{c['sm_carveout']}"
        if c.get("residency"):
            config += f" r{c['residency']}"
        then = r["recorded_prediction_us"]
        print(
            f"{r['op']:8} {r['m']:>6}x{r['k']:>5}x{r['n']:>6} {r['b_layout'] or '':2} {r['variant']:15} "
            f"{config:34} {'-' if then is None else f'{then:8.1f}':>8} {r['predicted_us']:8.1f} "
            f"{r['measured_us']:9.1f} {_pct(r['error']):>7}  {'yes' if r['within_target'] else 'NO'}"
            f"{'  (held in)' if r['held_in'] else ''}"
        )
    for title, summary in (
        ("all rows", summary_all),
        ("hold-out rows (shapes not used to derive a parameter)", summary_out),
    ):
        print(f"\nSummary, {title}: |predicted / measured - 1| <= {100 * TARGET:.0f}%")
        print(f"{'op':8} {'M class':8} {'kind':10} {'within':>9} {'median':>8} {'median|e|':>9} {'worst':>8}")
        for s in summary:
            print(
                f"{s['op']:8} {s['m_class']:8} {s['kind']:10} {s['within']:>4}/{s['n']:<4} "
                f"{_pct(s['median_error']):>8} {100 * s['median_abs_error']:8.1f}% {_pct(s['worst_error']):>8}"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "inputs",
        nargs="*",
        type=Path,
        default=[DEFAULT_INPUT],
        help="bench_ops.py JSON files (default: the session-2 all-rows run)",
    )
    parser.add_argument("--calib", type=Path, default=DEFAULT_CALIB, help="calibration JSON")
    parser.add_argument(
        "--json",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="write the report as JSON (default path bench/results/sim-accuracy-<date>.json)",
    )
    parser.add_argument("--quiet", action="store_true", help="print the summaries only")
    args = parser.parse_args(argv)
    try:
        import syncopate as sy

        sy.make_plan, sy.simulate  # noqa: B018 (the compiled bindings)
    except (ImportError, AttributeError) as error:
        print(
            f"sim_accuracy: needs the compiled syncopate package (import failed: {error}); "
            "build it (scripts/setup.sh) or put a staged copy on PYTHONPATH",
            file=sys.stderr,
        )
        return 2
    try:
        results, sources = evaluate([p.resolve() for p in args.inputs], args.calib.resolve(), sy)
    except (InputError, sy.UserError) as error:  # a malformed row, plan or calibration
        print(f"sim_accuracy: {error}", file=sys.stderr)
        return 1
    summary_all = summarize(results)
    summary_out = summarize([r for r in results if not r["held_in"]])
    if args.quiet:
        print_report([], summary_all, summary_out)
    else:
        print_report(results, summary_all, summary_out)
    if args.json is not None:
        today = _dt.date.today().isoformat()
        path = Path(args.json) if args.json else REPO / "bench/results" / f"sim-accuracy-{today}.json"
        revision = git_revision()
        doc = dict(
            what="simulator predicted vs recorded measured time, per row and variant (bench/sim_accuracy.py)",
            measurements=(
                "the recorded ones of "
                + ", ".join(s["file"] for s in sources)
                + f", device {', '.join(sorted({str(s['device']) for s in sources}))}"
            ),
            sources=sources,
            predictions_from_commit=revision,
            calibration=repo_relative(args.calib),
            date=today,
            target=TARGET,
            held_in={
                **{f"{op} {m}x{k}x{n}": why for (op, m, k, n), why in HELD_IN.items()},
                f"kernel-level, M < {SMALL_M}": KL_HELD_IN_SMALL_M,
                f"kernel-level kl_occupancy / kl_both, M >= {SMALL_M}": KL_HELD_IN_CARVEOUT,
            },
            counterparts=dict(
                fused="the variant's recorded configuration, fused mode",
                sequential="syncopate_auto's recorded configuration, sequential mode "
                "(measured: NCCL collective + cuBLAS)",
                **{
                    "kernel-level": "kernel-level mode, NCCL ring plan split into the run's "
                    "chunks, the kl_* variant's GEMM and SM carveout"
                },
            ),
            summary_all=summary_all,
            summary_hold_out=summary_out,
            results=results,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
