"""Where the transformed attention kernel's cost goes with nothing to wait for (issue 20's
target: within 5% of the untransformed kernel, causal and not, head dim 64 and 128). One GPU,
world 1: every piece in place, every signal raised. Variants are text edits of the transformer's
output (tests/golden/transform/attention.py), each timed against the untransformed kernel in the
same configuration and run (medians of device-event samples taken in turns), outputs poisoned and
checked against the untransformed output, with each launch's registers per thread:
  transformed        the transformer's output as shipped: with tables that have no slot the
                     constexpr `sy_block_waits` is 0 and the loop compiles as written; otherwise
                     the arrival-order remap (`block_at`, from the start block loaded before the
                     loop by `block_row`) and one loop-free wait per iteration at the top of the
                     loop (`wait_for_block`, returning the loop variable)
  always wait        the remap and the wait compiled in whatever the tables (`if sy_block_waits:`
                     read as `if True:`): the form shipped before `sy_block_waits`
  loop wait          always wait, the wait as a statement through `wait_block` (a loop: Triton
                     does not pipeline a loop with a loop inside)
  ascending          always wait without the remap: blocks visited 0, 1, ...
  no block wait      always wait without the in-loop wait (the remap stays)
  tile wait only     neither the in-loop wait nor the remap: what the tile-level code alone costs
Each variant runs with two sets of tables: "no slots" (K/V one piece, the own: no block has a
slot to wait on) and "4 pieces landed" (four pieces, every signal raised: the blocks outside the
own piece check one raised slot each).
Configurations: BLOCK_M x BLOCK_N, warps, stages (`--configs 128x64w8s3,64x64w4s3`; the fused ops
launch 128 x 64 with 8 warps and 3 stages where S_loc is a multiple of 128). `--maxnreg N` adds
every variant (and the untransformed kernel) under Triton's register limit N.

    python bench/bench_attention_wait_variants.py [--seqs 8192] [--head-dims 64,128]
        [--configs 128x64w8s3,64x64w4s3] [--variants transformed,always wait,...] [--samples 15]
        [--maxnreg 128] [--device-kind K]

Writes $OUT/bench_attention_wait_variants[_<kind>_<date>].json (or under bench/results/).
"""

import argparse
import datetime
import importlib.util
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "transform" / "attention.py"
REMAP = "start_n = syl.block_at("
WAIT = "start_n, sy_block_seen = syl.wait_for_block("
GATE = "if sy_block_waits:"
VARIANTS = ("transformed", "always wait", "loop wait", "ascending", "no block wait", "tile wait only")


def variant_sources(text: str) -> dict:
    lines = text.splitlines(keepends=True)
    waits = [i for i, line in enumerate(lines) if WAIT in line]
    remap = [i for i, line in enumerate(lines) if REMAP in line]
    gates = [i for i, line in enumerate(lines) if GATE in line]
    assert len(waits) == 1 and len(remap) == 1 and len(gates) == 2, "the golden attention kernel changed shape"

    def edited(drop=(), gate="True", wait_line=None):
        out = []
        for i, line in enumerate(lines):
            if i in drop:
                continue
            if i in gates:
                line = line.replace(GATE, f"if {gate}:")
            if i == waits[0] and wait_line is not None:
                line = wait_line
            out.append(line)
        return "".join(out)

    # `start_n, sy_block_seen = syl.wait_for_block(args..., start_n, ...)` -> `syl.wait_block(args...)`
    loop_wait = re.sub(
        r"start_n, sy_block_seen = syl\.wait_for_block\((.*), start_n, sy_block_row_waits, sy_block_seen\)",
        r"syl.wait_block(\1)",
        lines[waits[0]],
        count=1,
    )
    assert loop_wait != lines[waits[0]]
    return {
        "transformed": text,
        "always wait": edited(),
        "loop wait": edited(wait_line=loop_wait),
        "ascending": edited(drop={remap[0]}),
        "no block wait": edited(drop={waits[0]}),
        "tile wait only": edited(gate="False"),
    }


def parse_config(text: str):
    m = re.fullmatch(r"(\d+)x(\d+)w(\d+)s(\d+)", text.strip())
    if not m:
        sys.exit(f"bench_attention_wait_variants.py: --configs entry {text!r} is not like 128x64w8s3")
    return tuple(int(g) for g in m.groups())


def load(name: str, source: str, tmp: Path):
    path = tmp / f"attention_{name.replace(' ', '_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"bench_attn_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed_interleaved(fns: dict, samples=9, reps=3) -> dict:
    """Median ms per call of each of `fns`, sampled in turns (one sample of every function per
    round, the order rotated each round), so a clock or thermal drift during the run weighs on
    every variant alike instead of on whichever ran last."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    names = list(fns)
    for name in names:
        for _ in range(2):
            fns[name]()
    torch.cuda.synchronize()
    times = {name: [] for name in names}
    for r in range(samples):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start.record()
            for _ in range(reps):
                fns[name]()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / reps)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def registers(handle) -> tuple:
    """(registers per thread, spilled bytes) of a launch's compiled kernel, when Triton says."""
    return getattr(handle, "n_regs", None), getattr(handle, "n_spills", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqs", default="8192")
    parser.add_argument("--configs", default="128x64w8s3,64x64w4s3")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument(
        "--maxnreg",
        type=int,
        default=0,
        help="also time each variant with Triton's maxnreg at this value (0: not)",
    )
    parser.add_argument("--device-kind", default="", help="the machine's kind, for the JSON and its file name")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_attention_wait_variants.py: needs a CUDA GPU")
    import syncopate.block_tables as block_tables
    import syncopate.launch as launch
    from syncopate.kernels.attention import attention_fwd_kernel, attention_reference_args

    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in VARIANTS]
    if unknown:
        sys.exit(f"bench_attention_wait_variants.py: unknown variants {unknown}; known: {VARIANTS}")
    tmp = Path(tempfile.mkdtemp(prefix="sy-attn-variants-"))
    sources = variant_sources(GOLDEN.read_text())
    modules = {name: load(name, sources[name], tmp) for name in wanted}
    configs = [parse_config(c) for c in args.configs.split(",")]
    dev, h = torch.device("cuda"), args.heads
    now = datetime.datetime.now(datetime.timezone.utc)
    meta = {"device": torch.cuda.get_device_name(), "device_kind": args.device_kind, "date": now.isoformat()}
    out_dir = Path(os.environ.get("OUT", ROOT / "bench" / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"_{args.device_kind}_{now:%Y-%m-%d_%H%M}" if args.device_kind else ""
    out_file = out_dir / f"bench_attention_wait_variants{suffix}.json"
    rows = []
    for s in (int(x) for x in args.seqs.split(",")):
        for d in (int(x) for x in args.head_dims.split(",")):
            q, k, v = (torch.randn(1, h, s, d, device=dev, dtype=torch.float16) for _ in range(3))
            o = torch.empty_like(q)
            kernel_args = attention_reference_args(q, k, v, o, d**-0.5, 0)
            for bm, bn, warps, stages in configs:
                tiles = -(-s // bm) * h

                def bound_for(pieces):
                    """The kernel's tables: K/V as `pieces` pieces, rank 0's own, every one landed
                    (1: no block has a slot to wait on; 4: blocks outside the own piece check one
                    raised slot each, what a wait costs once its chunk is in)."""
                    tables = launch.TileTables.from_lists(
                        list(range(tiles)), h, [[]] * tiles, [[]] * tiles, [1] * pieces
                    )
                    blocks = block_tables.BlockTables.pieces_table(h, s, bn, pieces, 0)
                    return dict(
                        tables.device_arrays(dev),
                        **blocks.device_arrays(dev),
                        sy_signals=torch.ones(pieces, dtype=torch.int32, device=dev),
                        sy_tiles_n=h,
                        sy_epoch=launch.epoch_word(1, dev),
                        sy_wait_bound_ns=2_000_000_000,
                        sy_rank=0,
                        sy_error=launch.new_error_record(dev),
                        sy_blocks=blocks.blocks,
                        HEAD_DIM=d,
                        BLOCK_M=bm,
                        BLOCK_N=bn,
                        num_warps=warps,
                        num_stages=stages,
                    )

                tables_by_name = {"no slots": bound_for(1), "4 pieces landed": bound_for(4)}
                config = f"{bm}x{bn} w{warps} s{stages}"
                for causal in (False, True):
                    fns = {
                        "untransformed": lambda bm=bm, bn=bn, warps=warps, stages=stages, tiles=tiles: (
                            attention_fwd_kernel[(tiles,)](
                                *kernel_args,
                                HEAD_DIM=d,
                                BLOCK_M=bm,
                                BLOCK_N=bn,
                                CAUSAL=causal,
                                num_warps=warps,
                                num_stages=stages,
                            )
                        )
                    }
                    if args.maxnreg:
                        fns[f"untransformed, maxnreg {args.maxnreg}"] = (
                            lambda bm=bm, bn=bn, warps=warps, stages=stages, tiles=tiles: (
                                attention_fwd_kernel[(tiles,)](
                                    *kernel_args,
                                    HEAD_DIM=d,
                                    BLOCK_M=bm,
                                    BLOCK_N=bn,
                                    CAUSAL=causal,
                                    num_warps=warps,
                                    num_stages=stages,
                                    maxnreg=args.maxnreg,
                                )
                            )
                        )
                    for name, module in modules.items():
                        launch.unspecialize(module.attention_fwd_kernel)
                        for tables_name, bound in tables_by_name.items():
                            limits = [{}] + ([{"maxnreg": args.maxnreg}] if args.maxnreg else [])
                            for limit in limits:
                                label = f"{name}, {tables_name}" + (f", maxnreg {args.maxnreg}" if limit else "")
                                fns[label] = (
                                    lambda m=module, tiles=tiles, bound=bound, limit=limit: m.attention_fwd_kernel[
                                        (tiles,)
                                    ](*kernel_args, **bound, **limit, CAUSAL=causal)
                                )
                    o.fill_(float("nan"))
                    fns["untransformed"]()
                    ref = o.clone()
                    same, regs = {}, {}
                    for name, fn in fns.items():
                        o.fill_(float("nan"))
                        regs[name] = registers(fn())
                        torch.cuda.synchronize()
                        same[name] = bool(torch.allclose(o.float(), ref.float(), rtol=1e-2, atol=1e-2))
                    times = timed_interleaved(fns, samples=args.samples)
                    for name in fns:
                        ratio = times[name] / times["untransformed"]
                        rows.append(
                            {
                                "seq": s,
                                "head_dim": d,
                                "heads": h,
                                "config": config,
                                "causal": causal,
                                "variant": name,
                                "ms": times[name],
                                "ratio": ratio,
                                "matches": same[name],
                                "registers": regs[name][0],
                                "spills": regs[name][1],
                            }
                        )
                        print(
                            f"S={s:>6} d={d:>3} {config:15} causal={causal!s:5} {name:44} {times[name]:9.3f} ms  "
                            f"x{ratio:.3f}  regs {regs[name][0]} spills {regs[name][1]}  "
                            f"{'ok' if same[name] else 'MISMATCH'}",
                            flush=True,
                        )
                    # Written after every case: a run cut short keeps what it measured.
                    out_file.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
