"""`python -m syncopate.demo` on the CPU: argument handling, the no-GPU path, the dry run with the
simulator's prediction, and the report's pass/fail verdict. The GPU run itself is in the lead's
device commands (it needs GPUs)."""

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from syncopate import demo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CALIB = REPO / "calib" / "h200.json"


def test_defaults_are_the_cli_demo_shape():
    args = demo.parse_args([])
    assert (args.m, args.k, args.n, args.dtype, args.world) == (8192, 8192, 8192, "bf16", 0)
    assert args.iters >= 1 and args.warmup >= 0 and args.timeout > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--m", "0"], "--m must be at least 1"),
        (["--iters", "0"], "--iters must be at least 1"),
        (["--warmup", "-1"], "--warmup must be at least 0"),
        (["--world", "-2"], "--world must be positive"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--dtype", "fp8"], "invalid choice: 'fp8'"),
        (["--k", "x"], "invalid int value: 'x'"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_world_must_fit_the_gpus_and_divide_m():
    assert (
        demo.check_world(demo.parse_args(["--world", "4"]), gpus=2)
        == "--world 4: only 2 GPU(s) visible (one rank per GPU)"
    )
    assert "split evenly over 3 rank(s)" in demo.check_world(demo.parse_args(["--m", "8192"]), gpus=3)
    assert demo.check_world(demo.parse_args(["--m", "8190", "--world", "2"]), gpus=8) is None


def test_no_gpu_prints_one_line_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    for key in demo.MULTICAST_OFF:
        monkeypatch.delenv(key, raising=False)
    assert demo.main(["--m", "1024"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("GPU: no CUDA GPU visible")
    assert "A 1024x8192" in out
    # NVLink multicast is off for every process the demo would start.
    import os

    assert {key: os.environ[key] for key in demo.MULTICAST_OFF} == demo.MULTICAST_OFF


def test_world_larger_than_the_gpus_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert demo.main(["--world", "3"]) == 2
    assert "only 2 GPU(s) visible" in capsys.readouterr().err


def test_dry_run_prints_the_simulators_prediction(capsys):
    assert demo.main(["--dry-run", "--world", "4", "--calib", str(CALIB)]) == 0
    out = capsys.readouterr().out
    assert "4 rank(s)" in out and "simulator (" in out and "fused" in out


def test_prediction_is_between_the_floor_and_sequential():
    p = demo.predict(8192, 8192, 8192, 4, "bf16", CALIB)
    assert "error" not in p, p
    assert p["floor"] <= p["fused"] + 1e-6
    assert p["fused"] <= p["sequential"] + 1e-6
    assert math.isclose(p["floor"], max(p["gemm"], p["comm"]), rel_tol=1e-6)


def test_prediction_without_calibration_says_why():
    assert demo.predict(1024, 1024, 1024, 2, "bf16", None) == {"error": "no calibration found (pass --calib FILE)"}
    assert "error" in demo.predict(1024, 1024, 1024, 2, "bf16", Path("/nonexistent/calib.json"))


def test_calibration_from_the_environment(monkeypatch, tmp_path):
    # Other test modules set $SYNCOPATE_CALIBRATION for the whole process (test_ops_fused.py).
    g = tmp_path / "ops.json"
    g.write_text("{}")
    monkeypatch.setenv("SYNCOPATE_CALIBRATION", str(g))
    assert demo.find_calibration(None) == g
    old = tmp_path / "old-alias.json"
    old.write_text("{}")
    monkeypatch.delenv("SYNCOPATE_CALIBRATION")
    monkeypatch.setenv("SYNCOPATE_CALIB", str(old))  # the removed alias is not read
    assert demo.find_calibration(None) != old
    assert demo.find_calibration("explicit.json") == Path("explicit.json")


def test_block_shape_from_the_ops_gemm_config():
    assert demo.block_shape(None) == [128, 128]
    assert demo.block_shape("128x256x64_s3_w8") == [128, 256]

    class Config:
        block_m, block_n = 64, 128

    assert demo.block_shape(Config()) == [64, 128]
    assert demo.block_shape("odd-name") == [128, 128]


def _result(err_fused_rank1):
    ranks = [
        {"rank": 0, "err_fused": 2e-3, "err_seq": 1e-3, "us_fused": 900.0, "us_seq": 1000.0},
        {"rank": 1, "err_fused": err_fused_rank1, "err_seq": 1e-3, "us_fused": 950.0, "us_seq": 1100.0},
    ]
    return {"ranks": ranks, "op": {"world": 2, "kernel_origin": "transformer", "backend": "copy-engine"}}


def test_report_passes_within_tolerance_and_shows_the_slowest_rank(capsys):
    args = demo.parse_args([])
    assert demo.report(_result(3e-3), args, {"error": "none here"}) == 0
    out = capsys.readouterr().out
    assert "1100.0 us" in out and "950.0 us" in out  # the slowest rank of each variant
    assert "1.16x" in out  # 1100 / 950
    assert "correctness: PASS" in out


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.5])
def test_report_fails_on_a_wrong_or_poisoned_result(bad, capsys):
    args = demo.parse_args([])
    assert demo.report(_result(bad), args, {"error": "none here"}) == 1
    assert "correctness: FAIL (rank 1 fused)" in capsys.readouterr().out
