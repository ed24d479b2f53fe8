"""bench_call_path.py's targets on the CPU (nothing timed): every row is judged against the
absolute targets and the relative kernel-start targets (over the bare replay of the op's own
graph, over torch.mm's start), an unmeasured value is reported as such rather than met, and the
printed line and the summary say which targets are missed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_call_path as bench  # noqa: E402


def _row(host=12.0, base=1.0, start=30.0, over_replay=2.0, over_mm=4.0, stamp_lower=9.0, stamp_upper=11.0):
    row = {
        "host_us_graph": host,
        "host_graph_over_baseline": base,
        "kernel_start_us_graph": start,
        "start_graph_minus_replay_start_us": over_replay,
        "start_graph_minus_mm_start_us": over_mm,
        "stamp_gemm_us": stamp_lower,
        "gemm_start_upper_us": stamp_upper,
    }
    row["targets"] = bench.targets_met(row)
    return row


def test_each_target_is_judged_on_its_own_value():
    row = _row()
    assert list(row["targets"].values()) == [True, True, False, True, True, True, True]
    assert bench.TARGET_START_OVER_REPLAY_US == 5.0 and bench.TARGET_START_OVER_MM_US == 10.0
    missed = _row(host=20.5, base=1.6, start=14.0, over_replay=5.1, over_mm=10.2, stamp_lower=14.0, stamp_upper=16.0)
    assert list(missed["targets"].values()) == [False, False, True, False, False, False, True]
    on_the_bound = _row(
        host=20.0, base=1.5, start=15.0, over_replay=5.0, over_mm=10.0, stamp_lower=15.0, stamp_upper=15.0
    )
    assert all(on_the_bound["targets"].values())


def test_an_unmeasured_value_is_neither_met_nor_missed():
    row = _row(over_replay=float("nan"))
    row.pop("start_graph_minus_mm_start_us")
    row["targets"] = bench.targets_met(row)
    assert row["targets"]["start_minus_replay_start_le_5us"] is None
    assert row["targets"]["start_minus_mm_start_le_10us"] is None
    line = bench.describe_targets(row)
    assert "start - replay start <= 5 us (+nan us): not measured" in line


def test_the_line_and_the_summary_name_what_is_missed():
    rows = [_row(), _row(over_replay=7.5, start=40.0)]
    line = bench.describe_targets(rows[1])
    assert "start <= 15 us (profiler) (40.0 us): NOT met" in line
    assert "start <= 15 us (stamps, upper) (11.0 us): met" in line
    assert "start - replay start <= 5 us (+7.5 us): NOT met" in line
    assert "start - mm start <= 10 us (+4.0 us): met" in line
    summary = bench.summarize_targets(rows)
    assert "start_minus_replay_start_le_5us: met on 1 of 2 rows" in summary
    assert "kernel_start_graph_le_15us: met on 0 of 2 rows" in summary
    assert "host_graph_le_20us: met on 2 of 2 rows" in summary
    assert "gemm_start_no_profiler_upper_le_15us: met on 2 of 2 rows" in summary


def test_rows_without_the_stamped_instrument_leave_its_targets_unmeasured():
    row = _row()
    del row["stamp_gemm_us"], row["gemm_start_upper_us"]
    row["targets"] = bench.targets_met(row)
    assert row["targets"]["gemm_start_no_profiler_upper_le_15us"] is None
    assert row["targets"]["gemm_start_no_profiler_lower_le_15us"] is None
