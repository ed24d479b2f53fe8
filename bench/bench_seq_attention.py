"""Sequence-parallel attention at one rank, sequence lengths 8k-128k (issue 20's benchmark rows
that exist today; docs/SEQUENCE_PARALLEL.md says what is missing: the simulator's rows).

Rows per (S, causal): torch SDPA; Syncopate's local attention kernel (kernels/attention.py); its
transformed form with nothing to wait for (every piece in place: the in-loop wait's cost);
ulysses_attention and ring_attention, sequential forms (at world 1 each is one attention call)
and fused forms (mode="fused": at world 1 Ulysses packs q, k, v into the heap, moves its own
piece with one local chunk, runs the transformed kernel waiting on it, and copies the output back
through the return all-to-all's local chunk; the ring copies its K/V piece into the heap and runs
the transformed kernel with nothing to wait for: what the fused wiring costs where nothing
overlaps); the simulator's sequential and fused times for worlds 1-8 (sim/attention_model.hpp).
Timings on a shared GPU mean nothing.

    python bench/bench_seq_attention.py [--heads 16] [--head-dim 128] [--seqs 8192,16384,...]
        [--device-kind nvidia-h200]

The local and transformed kernels run in the fused ops' configuration (128 x 64 blocks, 8 warps,
3 stages). Writes JSON to $OUT/bench_seq_attention[_<kind>_<date>].json (or under bench/results/)
after every (S, causal) and prints a table.
"""

import argparse
import datetime
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, reps, samples):
    """Median ms per call over `samples` samples of `reps` back-to-back calls (device events),
    after two warm-up calls. Calls over 20 ms are timed one per sample, 5 samples (the 128k rows
    would otherwise take minutes each)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    if start.elapsed_time(end) > 20.0:
        reps, samples = 1, min(samples, 5)
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    times.sort()
    return times[len(times) // 2]


def relative_error(out, ref):
    """||out - ref|| / ||ref|| in float64; a NaN (an unwritten element) gives inf."""
    out, ref = out.double(), ref.double()
    err = (out - ref).norm() / ref.norm()
    return float("inf") if torch.isnan(err) else float(err)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqs", default="8192,16384,32768,65536,131072")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--causal", default="false,true", help="which of non-causal / causal to run")
    parser.add_argument("--device-kind", default="", help="the machine's kind, for the JSON and its file name")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_seq_attention.py: needs a CUDA GPU")

    import syncopate.block_tables as block_tables
    import syncopate.launch as launch
    from syncopate.kernels.attention import attention_fwd_kernel, attention_reference_args
    from syncopate import _core
    from syncopate.ops import ring_attention, ulysses_attention
    from syncopate.ops.choice import calibration

    calib = calibration()

    spec = importlib.util.spec_from_file_location(
        "bench_attention_golden", ROOT / "tests" / "golden" / "transform" / "attention.py"
    )
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    dev, h, d, bm, bn = torch.device("cuda"), args.heads, args.head_dim, 128, 64  # the fused ops' blocks
    config = dict(num_warps=8, num_stages=3)  # and their warps and stages (ops/fused_attention.py)
    rows = []
    out_dir = Path(os.environ.get("OUT", ROOT / "bench" / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    meta = {"device": torch.cuda.get_device_name(), "device_kind": args.device_kind, "date": now.isoformat()}
    suffix = f"_{args.device_kind}_{now:%Y-%m-%d_%H%M}" if args.device_kind else ""
    out_file = out_dir / f"bench_seq_attention{suffix}.json"
    causal_cases = [{"false": False, "true": True}[c.strip()] for c in args.causal.split(",")]
    for s in (int(x) for x in args.seqs.split(",")):
        q, k, v = (torch.randn(1, h, s, d, device=dev, dtype=torch.float16) for _ in range(3))
        o = torch.empty_like(q)
        tiles = -(-s // bm) * h
        kernel_args = attention_reference_args(q, k, v, o, d**-0.5, 0)
        tables = launch.TileTables.from_lists(list(range(tiles)), h, [[]] * tiles, [[]] * tiles, [1])
        blocks = block_tables.BlockTables.pieces_table(h, s, bn, 1, 0)
        signals = torch.ones(1, dtype=torch.int32, device=dev)
        arrays = tables.device_arrays(dev)
        bound = dict(
            arrays,
            **blocks.device_arrays(dev),
            sy_signals=signals,
            sy_tiles_n=h,
            sy_epoch=launch.epoch_word(1, dev),
            sy_wait_bound_ns=2_000_000_000,
            sy_rank=0,
            sy_error=launch.new_error_record(dev),
            sy_blocks=blocks.blocks,
            HEAD_DIM=d,
            BLOCK_M=bm,
            BLOCK_N=bn,
        )
        launch.unspecialize(golden.attention_fwd_kernel)
        for causal in causal_cases:
            variants = {
                "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                "local_kernel": lambda: attention_fwd_kernel[(tiles,)](
                    *kernel_args, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, **config
                ),
                # tables bound once, as the fused ops do (launch.launch would rebuild the block tables)
                "transformed_nothing_to_wait": lambda: golden.attention_fwd_kernel[(tiles,)](
                    *kernel_args, **bound, CAUSAL=causal, **config
                ),
                "ulysses_sequential": lambda: ulysses_attention(q, k, v, causal=causal),
                "ring_sequential": lambda: ring_attention(q, k, v, causal=causal),
                "ulysses_fused": lambda: ulysses_attention(q, k, v, causal=causal, mode="fused"),
                "ring_fused": lambda: ring_attention(q, k, v, causal=causal, mode="fused"),
            }
            # fp32 reference (memory-efficient SDPA: no S x S matrix); outputs poisoned first where
            # the variant writes into o.
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            times = {}
            for name, fn in variants.items():
                o.fill_(float("nan"))
                result = fn()
                torch.cuda.synchronize()
                err = relative_error(result if isinstance(result, torch.Tensor) else o, ref)
                times[name] = ms = timed(fn, args.reps, args.samples)
                rows.append(
                    {"seq": s, "heads": h, "head_dim": d, "causal": causal, "variant": name, "ms": ms, "rel_err": err}
                )
                print(
                    f"S={s:>6} causal={causal!s:5} {name:30} {ms:9.3f} ms  x{ms / times['sdpa']:.2f} sdpa  err {err:.1e}",
                    flush=True,
                )
            del ref
            # The in-loop wait's price with nothing to wait for (issue 20's target: within 5%).
            ratio = times["transformed_nothing_to_wait"] / times["local_kernel"]
            print(f"S={s:>6} causal={causal!s:5} transformed / untransformed kernel: {ratio:.3f}", flush=True)
            rows.append({"seq": s, "causal": causal, "variant": "wait_overhead_ratio", "ratio": ratio})
            # The simulator's rows (sim/attention_model.hpp, the shipped calibration): world 1 next to
            # what ran, and worlds 2-8 (this sequence split over them) for the runs on several GPUs.
            for world in (1, 2, 4, 8):
                for kind in ("ulysses", "ring"):
                    p = _core.predict_attention(
                        kind,
                        calib,
                        world=world,
                        batch=1,
                        heads=h,
                        kv_heads=h,
                        seq_local=s // world,
                        head_dim=d,
                        causal=causal,
                        elem_bytes=2,
                    )
                    rows.append(
                        {
                            "seq": s,
                            "causal": causal,
                            "variant": f"sim_{kind}",
                            "world": world,
                            "sequential_ms": p.sequential_us / 1e3,
                            "fused_ms": p.fused_us / 1e3,
                            "decision": p.decision,
                        }
                    )
                    print(
                        f"S={s:>6} causal={causal!s:5} simulator {kind:8} world {world}: sequential "
                        f"{p.sequential_us / 1e3:8.3f} ms, fused {p.fused_us / 1e3:8.3f} ms -> {p.decision}",
                        flush=True,
                    )
            # Written after every (S, causal): a run cut short keeps what it measured.
            out_file.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
