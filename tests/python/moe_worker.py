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
