"""bench/sim_accuracy.py on a subset of the recorded nvidia-h200-x2 rows: the report's structure,
its rows and its error handling. The accuracy numbers are not a pass criterion (they are what
the script reports); only their consistency with the recorded measurements is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "sim_accuracy.py"
RECORDED = REPO / "bench/results/h200x2-2026-11-22-session2/bench_ops_all_rows_2234.json"

pytest.importorskip("syncopate._core")


def subset(tmp_path: Path, keep) -> Path:
    """The recorded file with only the rows `keep(row)` accepts."""
    doc = json.loads(RECORDED.read_text())
    doc["rows"] = [r for r in doc["rows"] if keep(r)]
    path = tmp_path / "subset.json"
    path.write_text(json.dumps(doc))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=600)


def picked(row) -> bool:
    # One large and one small row of each op, auto fused and sequential among them.
    return (row["m"], row["k"], row["n"]) in {(8192, 8192, 8192), (1024, 4096, 3072), (1024, 4096, 4096)}


def test_report_rows_and_summary(tmp_path):
    path = subset(tmp_path, picked)
    rows = json.loads(path.read_text())["rows"]
    assert {r["op"] for r in rows} == {"ag_gemm", "gemm_rs", "gemm_ar"}
    out = tmp_path / "report.json"
    done = run(str(path), "--json", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert "subset.json" in report["measurements"] and "nvidia-h200-x2" in report["measurements"]
    assert report["predictions_from_commit"]
    results = report["results"]
    # One result per row and timed variant with a counterpart: the three fused backends, auto
    # and sequential, and the kernel-level variants of AG+GEMM and GEMM+RS, when each was measured.
    kl = ("kl_plain", "kl_priority", "kl_occupancy", "kl_both", "kl_triton", "kl_triton_shaped")
    expected = sum(
        1
        for r in rows
        for v in ("syncopate_ce", "syncopate_sm", "syncopate_nccl", "syncopate_auto", "sequential", *kl)
        if isinstance(r["variants"].get(v), dict)
        and "ms" in r["variants"][v]
        and not (v in kl and r["op"] == "gemm_ar")
    )
    assert len(results) == expected
    assert {r["variant"] for r in results if r["kind"] == "kernel-level"} == {
        "kl_plain",
        "kl_priority",
        "kl_occupancy",
        "kl_both",
    }  # what the recorded run timed
    for res in results:
        row = rows[res["row"]]
        assert res["measured_us"] == pytest.approx(row["variants"][res["variant"]]["ms"] * 1000)
        assert res["predicted_us"] > 0
        assert res["error"] == pytest.approx(res["predicted_us"] / res["measured_us"] - 1)
        assert res["within_target"] == (abs(res["error"]) <= report["target"])
        assert res["m_class"] == ("M>=4096" if row["m"] >= 4096 else "small M")
        if res["variant"].startswith("syncopate_") and res["variant"] != "syncopate_auto":
            recorded = row["syncopate"][res["variant"]]
            assert res["kind"] == "fused"
            assert (res["config"]["backend"], res["config"]["split"], res["config"]["order"]) == (
                recorded["backend"],
                recorded["split"],
                recorded["tile_order"],
            )
            assert recorded["gemm_config"].startswith(f"{res['config']['block_m']}x{res['config']['block_n']}x")
    for res in results:
        if res["kind"] == "kernel-level":  # bench/kernel_level_variants.py's configuration
            c = res["config"]
            assert (c["backend"], c["algorithm"], c["split"]) == ("nccl", "ring", 4)
            assert (c["block_m"], c["block_n"]) == (128, 256)
            assert c.get("sm_carveout", 0) == (16 if res["variant"] in ("kl_occupancy", "kl_both") else 0)
    # The profiled shapes are held in; the others are hold-out. Kernel-level: its small-M rows
    # (chunk latency fit) and its carveout variants (carveout factor) are held in.
    fused_seq = [r for r in results if r["kind"] != "kernel-level"]
    held = {(r["op"], r["m"], r["k"], r["n"]) for r in fused_seq if r["held_in"]}
    assert ("ag_gemm", 1024, 4096, 3072) in held and ("gemm_ar", 8192, 8192, 8192) in held
    assert all(not r["held_in"] for r in fused_seq if (r["m"], r["k"], r["n"]) == (1024, 4096, 4096))
    for r in results:
        if r["kind"] == "kernel-level":
            assert bool(r["held_in"]) == (r["m"] < 4096 or r["variant"] in ("kl_occupancy", "kl_both"))
    # Summaries count every result once per (op, M class, kind).
    per_op = [s for s in report["summary_all"] if s["op"] != "all ops"]
    assert sum(s["n"] for s in per_op) == len(results)
    assert sum(s["n"] for s in report["summary_hold_out"] if s["op"] != "all ops") == sum(
        1 for r in results if not r["held_in"]
    )
    assert "Summary, all rows" in done.stdout and "hold-out" in done.stdout


def test_changing_the_calibration_changes_the_prediction(tmp_path):
    """The predictions are today's simulator on the given calibration, not the recorded ones."""
    path = subset(tmp_path, lambda r: (r["op"], r["m"], r["k"], r["n"]) == ("ag_gemm", 8192, 8192, 8192))
    calib = json.loads((REPO / "calib/h200.json").read_text())
    calib["host"]["fused_call_us"] += 1000
    calib["kernel_level"]["chunk_latency_us"] += 1000  # four NCCL calls in a row on the comm stream
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(calib))
    reports = []
    for c in (REPO / "calib/h200.json", slow):
        out = tmp_path / f"{c.stem}.out.json"
        assert run(str(path), "--calib", str(c), "--json", str(out), "--quiet").returncode == 0
        reports.append({r["variant"]: r["predicted_us"] for r in json.loads(out.read_text())["results"]})
    assert reports[1]["syncopate_ce"] > reports[0]["syncopate_ce"] + 900
    assert reports[1]["kl_plain"] > reports[0]["kl_plain"] + 2500  # 4 x 1000 less what the GEMM hides
    assert reports[1]["sequential"] == pytest.approx(reports[0]["sequential"])


def test_malformed_input_names_file_row_and_field(tmp_path):
    doc = json.loads(RECORDED.read_text())
    doc["rows"] = doc["rows"][:1]
    doc["rows"][0]["syncopate"]["syncopate_ce"]["gemm_config"] = "big tiles"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    done = run(str(bad))
    assert done.returncode == 1
    assert "bad.json: rows[0].syncopate.syncopate_ce: gemm_config" in done.stderr
    del doc["rows"][0]["op"]
    bad.write_text(json.dumps(doc))
    done = run(str(bad))
    assert done.returncode == 1 and "rows[0]: missing field 'op'" in done.stderr
