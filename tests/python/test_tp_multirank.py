"""Tensor parallelism across processes on the CPU: W ranks over gloo run the fused ops (public
functions and their backward formulas), syncopate.nn's layers and the example's LLaMA block,
forward and backward, against float64 torch on the whole tensors (tp_worker.py says how).

This is where a wrong collective or a wrong slice in a backward shows: at world 1 every
collective is the identity."""

import json
import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tp_worker  # noqa: E402

# bf16 operands with float32 accumulation against float64 (the block: a whole layer, forward
# and backward).
TOLERANCE = {"block": 3e-2, "block-torch-tp": 3e-2}
DEFAULT_TOLERANCE = 2e-2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, out_dir):
    tp_worker.run(rank, world, port, out_dir)


@pytest.mark.parametrize("world", [2, 3])
def test_tensor_parallel_forward_and_backward(world, tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(_entry, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True, start_method="spawn")
    for rank in range(world):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        errors = {k: v for k, v in results.items() if isinstance(v, str)}
        assert not errors, f"rank {rank}: " + "\n".join(f"{k}: {v}" for k, v in errors.items())
        # The gather by all-reduce 1 (its count of mismatched elements); per B layout: ag_gemm 3, ag_gemm_gathered 4, gemm_rs 3, gemm_ar 3; the MLP 6 with and 6
        # without sequence parallelism; the block (tiny: 4 KV heads, so not at world 3) 9 tensors,
        # on syncopate.nn and on the benchmark's PyTorch TP layers.
        assert len(results) == 1 + 26 + 12 + (18 if world == 2 else 0), sorted(results)
        bad = {k: v for k, v in results.items() if v > TOLERANCE.get(k.split(" ")[0], DEFAULT_TOLERANCE)}
        assert not bad, f"rank {rank}: {bad}"
