"""One rank of test_moe.py: examples/moe_layer.py's layer at world size W over gloo on the CPU,
against its float64 reference, for each size x routing in CASES.

    run(rank, world, port, out_dir)   # writes out_dir/rank<r>.json: {case: relative error | "error: ..."}
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = [(size, how) for size in ("tiny-top2", "tiny-top8") for how in ("random", "skewed")]


def run(rank: int, world: int, port: int, out_dir: str) -> None:
    # The installed package, as in the parent (see tp_worker.py).
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "python"]
    sys.path.insert(0, str(REPO / "examples"))
    import torch.distributed as dist

    import moe_layer

    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    results = {}
    try:
        for size, how in CASES:
            args = moe_layer.parse_args(["--size", size, "--routing", how, "--device", "cpu", "--tokens", "24"])
            try:
                report = moe_layer.run_layer(
                    moe_layer.SIZES[size], args, rank, world, dist.group.WORLD, moe_layer.torch.device("cpu")
                )
                results[f"{size} {how}"] = report["worst"]
                if how == "skewed":  # expert 1 takes a row from every token of every rank
                    results[f"{size} {how} expert 1 rows"] = report["steps"][0]["rows_per_expert"]
            except Exception:
                results[f"{size} {how}"] = "error: " + traceback.format_exc()[-2000:]
        # NCCL for the fused ops where ranks share a device (here: the CPU): refused by name.
        from syncopate.ops.moe_fused import check_backend

        try:
            check_backend("MoeFusedDispatch", "nccl", dist.group.WORLD, moe_layer.torch.device("cpu"))
            results["nccl refusal"] = "error: backend='nccl' accepted on ranks sharing a device"
        except Exception as exc:  # the message is checked by test_moe.py
            results["nccl refusal"] = [f"{type(exc).__name__}: {exc}"]
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
        dist.barrier()
        dist.destroy_process_group()
    # As tp_worker.py: skip the interpreter's teardown, where torch's exit path can abort.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def refusals(rank: int, world: int, port: int, out_dir: str) -> None:
    """A bad routing seen by one rank only (rank 0 over capacity for its own expert, then an
    expert id out of range on rank 1), then a good call: out_dir/rank<r>.json holds, per case,
    ["ok", rows per expert] or [the error's type, its message]."""
    import datetime

    # The installed package, as in the parent (see run).
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "python"]
    import torch
    import torch.distributed as dist

    from syncopate.errors import ShapeError
    from syncopate.ops.moe import MoeDispatchCombine

    # A short timeout: a rank left alone in a collective fails the test instead of hanging it.
    timeout = datetime.timedelta(seconds=30)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}", timeout=timeout)
    results = {}
    try:
        layer = MoeDispatchCombine(dist.group.WORLD, num_experts=4, top_k=1, capacity=4, mode="sequential")
        x, w = torch.randn(6, 8), torch.randn(2, 8, 3)
        good = torch.tensor([[0], [1], [2], [3], [0], [2]])  # at most 2 rows per expert and rank
        bad_id = good.clone()
        bad_id[0, 0] = 9
        cases = {
            "over capacity on rank 0": torch.zeros(6, 1, dtype=torch.int64) if rank == 0 else good,
            "bad id on rank 1": bad_id if rank == 1 else good,
            "good": good,
        }
        for name, ids in cases.items():
            try:
                _, layout = layer.dispatch_gemm(x, ids, w)
                results[name] = ["ok", layout.rows_per_expert]
            except ShapeError as exc:
                results[name] = ["ShapeError", str(exc)]
            except Exception as exc:
                results[name] = [type(exc).__name__, str(exc)[-1000:]]
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
