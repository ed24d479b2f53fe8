"""bench/bench_tp_block.py's options on the CPU (the timing itself needs GPUs; its layers are
checked across ranks in test_tp_multirank.py)."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_tp_block  # noqa: E402


def test_list_needs_no_gpu(capsys):
    assert bench_tp_block.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b" in out and "llama3-70b" in out and "async_tp_compile" in out


def test_variants():
    assert bench_tp_block.parse_args([]).variant_names == ("torch_tp", "async_tp", "syncopate")
    assert bench_tp_block.parse_args(["--compile", "--variants", "torch_tp,syncopate"]).variant_names == (
        "torch_tp",
        "syncopate",
        "torch_tp_compile",
        "syncopate_compile",
    )
    assert bench_tp_block.parse_args(["--variants", "async_tp_compile"]).variant_names == ("async_tp_compile",)
    with pytest.raises(SystemExit):
        bench_tp_block.parse_args(["--variants", "megatron"])
