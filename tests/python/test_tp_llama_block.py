"""examples/tp_llama_block.py on the CPU at world 1 (Triton's interpreter): the tiny LLaMA block's
forward and backward against the plain PyTorch reference, through the contexts' torch path, the
fused kernels and torch.compile. Several ranks: test_tp_multirank.py runs the same block at
world 2 over gloo."""

import os
import sys
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SYNCOPATE_CALIBRATION", str(Path(__file__).resolve().parents[2] / "calib" / "h200.json"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import tp_llama_block as blk  # noqa: E402

from test_gemm_interpret import _interpreter_fixes  # noqa: E402,F401  (autouse fixture)
from test_ops_autograd import fused_contexts, no_process_group  # noqa: E402,F401  (fixtures)

TINY = ["--device", "cpu", "--size", "tiny", "--seq", "16", "--batch", "2"]


def assert_passed(report):
    assert report["passed"], report
    names = set(report["steps"][0]["errors"])
    assert names == {
        "loss",
        "out",
        "x.grad",
        "attn_norm.grad",
        "qkv.grad",
        "o.grad",
        "mlp_norm.grad",
        "gate_up.grad",
        "down.grad",
    }
    assert report["worst"] <= report["tolerance"] == blk.TOLERANCE[torch.bfloat16]


def test_tiny_block_matches_the_reference():
    report = blk.run(TINY + ["--steps", "2"])
    assert_passed(report)
    assert report["world"] == 1 and len(report["steps"]) == 2
    # Four layers and their backward ops; at world 1 auto runs each sequentially (torch.matmul).
    names = {c[0] for c in report["contexts"]}
    assert names == {"AgGemm", "GemmRs"} and all(c[4] == "sequential" for c in report["contexts"])


def test_tiny_block_through_the_fused_kernels(fused_contexts):
    report = blk.run(TINY + ["--steps", "1", "--seq", "32", "--batch", "1"])
    assert_passed(report)
    kinds = {type(ctx).__name__ for ctx in fused_contexts}
    assert kinds == {"AgGemm", "GemmRs"} and all(ctx.decision == "fused" for ctx in fused_contexts)
    assert report["contexts"] and all(c[4] == "fused" for c in report["contexts"])


def test_tiny_block_under_torch_compile():
    """fullgraph (a graph break would raise) with AOT autograd; each layer's op is one node."""
    report = blk.run(TINY + ["--steps", "1", "--compile", "--compile-backend", "aot_eager"])
    assert_passed(report)
    assert report["trace"] == {"graphs": 1, "syncopate_ops": ["syncopate.ag_gemm", "syncopate.gemm_rs"]}


def test_a_wrong_gradient_fails_the_check(monkeypatch):
    """The check is not vacuous: a block whose down projection's gradient is scaled fails."""
    real = blk.Runner.step

    def step(self):
        loss, out = real(self)
        self.block.down.weight.grad.mul_(1.1)
        return loss, out

    monkeypatch.setattr(blk.Runner, "step", step)
    report = blk.run(TINY + ["--steps", "1"])
    assert not report["passed"]
    assert report["steps"][0]["errors"]["down.grad"] > report["tolerance"]


def test_sizes_that_do_not_split_are_refused():
    blk.check_divisible(blk.SIZES["tiny"], 1, 15)  # at world 1 everything splits
    with pytest.raises(ValueError, match=r"tp_llama_block: heads=8 is not divisible by the world size 3"):
        blk.check_divisible(blk.SIZES["tiny"], 3, 12)
    with pytest.raises(ValueError, match=r"tp_llama_block: kv_heads=4 is not divisible by the world size 8"):
        blk.check_divisible(blk.SIZES["tiny"], 8, 16)
    with pytest.raises(ValueError, match=r"tp_llama_block: seq=10 is not divisible by the world size 4"):
        blk.check_divisible(blk.SIZES["tiny"], 4, 10)


def test_llama_sizes():
    assert blk.SIZES["llama3-8b"] == blk.BlockConfig(4096, 32, 8, 128, 14336)
    assert blk.SIZES["llama3-70b"] == blk.BlockConfig(8192, 64, 8, 128, 28672)
    assert blk.SIZES["llama3-8b"].qkv_features == 6144
