"""The op benchmark's logic on the CPU: target evaluation on made-up rows, row selection and
options, and one bench_ops row end to end on gloo (world 1) with stand-in Syncopate contexts.
Nothing here is timed for its own sake: the smoke row's times are whatever the CPU takes."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import shapes  # noqa: E402
import targets  # noqa: E402


def make_row(op="ag_gemm", m=8192, label="baseline", ms=None, auto="fused", predicted=None):
    """A row as bench_ops.py stores it; ms: {variant: time}, a string value = skipped."""
    variants = {}
    for name, value in (ms or {}).items():
        variants[name] = {"skipped": value} if isinstance(value, str) else {"ms": value, "rel_error": 1e-3}
    syncopate = {}
    for name in ("syncopate_ce", "syncopate_sm", "syncopate_nccl", "syncopate_auto"):
        if name in variants:
            decision = auto if name == "syncopate_auto" else "fused"
            syncopate[name] = {"decision": decision, "predicted_us": (predicted or {}).get(name, {})}
    return {
        "op": op,
        "world": 2,
        "m": m,
        "k": 8192,
        "n": 8192,
        "b_layout": "kn",
        "label": label,
        "variants": variants,
        "syncopate": syncopate,
    }


def checks_of(report, target):
    return [c for c in report["checks"] if c["target"] == target]


def test_large_row_all_targets_met():
    row = make_row(
        ms={
            "gemm": 1.0,
            "collective": 0.4,
            "sequential": 1.4,
            "async_tp": 1.3,
            "syncopate_ce": 1.05,
            "syncopate_sm": 1.2,
            "syncopate_auto": 1.06,
        },
        predicted={
            "syncopate_ce": {"fused": 1000.0},
            "syncopate_sm": {"fused": 1150.0},
            "syncopate_auto": {"fused": 1000.0, "sequential": 1400.0},
        },
    )
    report = targets.evaluate([row])
    floor = checks_of(report, "fused <= 1.10x floor")[0]
    assert floor["status"] == "met" and floor["value"] == pytest.approx(1.05)
    assert floor["note"] == "syncopate_ce"  # the best fused variant is the one judged
    assert checks_of(report, "fused faster than sequential")[0]["status"] == "met"
    assert checks_of(report, "fused faster than async_tp")[0]["status"] == "met"
    sims = checks_of(report, "simulator within 15%")
    assert len(sims) == 3 and all(c["status"] == "met" for c in sims)  # ce, sm, auto (fused)
    geo = checks_of(report, "geomean speedup over sequential >= 1.25x")[0]
    assert geo["value"] == pytest.approx(1.4 / 1.05) and geo["status"] == "met"
    assert not checks_of(report, "auto <= 1.03x sequential")  # only for M < 4096


def test_the_epilogue_variant_is_judged_when_it_is_the_best_fused():
    row = make_row(
        op="gemm_rs",
        ms={
            "gemm": 1.0,
            "collective": 0.4,
            "sequential": 1.3,
            "async_tp": 1.4,
            "syncopate_ce": 1.5,
            "syncopate_epilogue_ce": 1.08,
        },
        predicted={"syncopate_ce": {"fused": 1450.0}},
    )
    report = targets.evaluate([row])
    floor = checks_of(report, "fused <= 1.10x floor")[0]
    assert floor["status"] == "met" and floor["note"] == "syncopate_epilogue_ce"
    assert floor["value"] == pytest.approx(1.08)
    assert checks_of(report, "fused faster than sequential")[0]["status"] == "met"


def test_misses_say_by_how_much():
    row = make_row(
        ms={"gemm": 1.0, "collective": 0.4, "sequential": 1.2, "async_tp": 1.1, "syncopate_ce": 1.32},
        predicted={"syncopate_ce": {"fused": 1000.0}},
    )
    report = targets.evaluate([row])
    floor = checks_of(report, "fused <= 1.10x floor")[0]
    assert floor["status"] == "missed" and floor["missed_by"] == pytest.approx(1.32 / 1.10 - 1)
    seq = checks_of(report, "fused faster than sequential")[0]
    assert seq["status"] == "missed" and seq["missed_by"] == pytest.approx(1.32 / 1.2 - 1)
    sim = checks_of(report, "simulator within 15%")[0]
    assert sim["status"] == "missed" and sim["value"] == pytest.approx(1 - 1.0 / 1.32)
    assert sim["missed_by"] == pytest.approx(1 - 1.0 / 1.32 - 0.15)  # percentage points
    geo = checks_of(report, "geomean speedup over sequential >= 1.25x")[0]
    # an "at least" target: short by limit / value - 1
    assert geo["status"] == "missed" and geo["missed_by"] == pytest.approx(1.25 / (1.2 / 1.32) - 1)
    text = "\n".join(targets.format_report(report))
    assert "MISSED by 20.0%" in text  # 1.32 / 1.10
    assert "MISSED by 9.2 points" in text  # |1/1.32 - 1| = 24.2% against 15%


def test_missing_variants_are_not_measured_or_not_applicable():
    row = make_row(
        op="gemm_ar",
        ms={
            "gemm": 1.0,
            "collective": 0.5,
            "sequential": 1.5,
            "async_tp": "no fused matmul + all-reduce op",
            "syncopate_ce": 1.1,
        },
    )
    report = targets.evaluate([row])
    assert checks_of(report, "fused faster than async_tp")[0]["status"] == "n/a"
    row = make_row(ms={"gemm": 1.0, "collective": 0.5, "sequential": 1.5, "syncopate_ce": "context failed: X"})
    row["variants"]["syncopate_sm"] = {"failed": "relative error 0.5", "rel_error": 0.5}
    report = targets.evaluate([row])
    floor = checks_of(report, "fused <= 1.10x floor")[0]
    assert floor["status"] == "not measured"
    assert "syncopate_ce skipped: context failed: X" in floor["note"]
    assert "syncopate_sm failed: relative error 0.5" in floor["note"]
    assert checks_of(report, "geomean speedup over sequential >= 1.25x")[0]["status"] == "not measured"


def test_small_m_judges_auto_against_sequential():
    met = make_row(
        m=1024,
        label="small-M",
        auto="sequential",
        ms={"gemm": 0.2, "collective": 0.08, "sequential": 0.3, "syncopate_auto": 0.305},
    )
    missed = make_row(
        m=512,
        label="decode",
        auto="fused",
        ms={"gemm": 0.1, "collective": 0.05, "sequential": 0.2, "syncopate_auto": 0.25},
    )
    report = targets.evaluate([met, missed])
    small = checks_of(report, "auto <= 1.03x sequential")
    assert [c["status"] for c in small] == ["met", "missed"]
    assert small[1]["missed_by"] == pytest.approx(1.25 / 1.03 - 1)
    assert not checks_of(report, "fused <= 1.10x floor")
    assert not checks_of(report, "geomean speedup over sequential >= 1.25x")  # no large rows
    # auto ran sequential: its prediction is compared as sequential, not judged as fused
    assert not checks_of(report, "simulator within 15%")


def test_row_metrics():
    row = make_row(
        ms={
            "gemm": 1.0,
            "collective": 0.5,
            "sequential": 1.5,
            "async_tp": 1.2,
            "syncopate_ce": 1.1,
            "syncopate_auto": 1.0,
        },
        predicted={"syncopate_auto": {"fused": 900.0, "sequential": 1800.0}},
    )
    m = targets.row_metrics(row)
    assert m["floor_ms"] == 1.0
    assert m["ratio_to_floor"]["syncopate_ce"] == pytest.approx(1.1)
    assert "gemm" not in m["ratio_to_floor"]
    assert m["speedup_over_sequential"]["syncopate_auto"] == pytest.approx(1.5)
    assert m["speedup_over_async_tp"]["syncopate_ce"] == pytest.approx(1.2 / 1.1)
    assert m["best_fused"] == {"variant": "syncopate_auto", "ms": 1.0}
    assert m["auto_chose"]["decision"] == "fused"
    assert m["predicted_vs_measured"]["syncopate_auto"]["error"] == pytest.approx(-0.1)
    assert m["predicted_vs_measured"]["sequential"]["error"] == pytest.approx(0.2)


def test_row_selection():
    rows = shapes.op_rows(2)
    assert len(rows) == 90 and rows[0][1] == "ag_gemm" and rows[2][1] == "gemm_ar"
    assert all((op == "ag_gemm") == (p.op == "ag_gemm") for p, op in rows)
    quick = shapes.select_rows(rows, quick=True)
    assert len(quick) == 12 and {p.label for p, _ in quick} == {"baseline"}
    picked = shapes.select_rows(rows, labels=("70b", "8b w2 M4096"), row_slice=slice(1, None), max_rows=3)
    assert len(picked) == 3
    assert all("70b" in p.label or "8b w2 M4096" in p.label for p, _ in picked)
    assert picked[0] == shapes.select_rows(rows, labels=("70b", "8b w2 M4096"))[1]
    assert shapes.select_rows(rows, row_slice=shapes.parse_slice(":2")) == rows[:2]
    assert shapes.select_rows(rows, row_slice=shapes.parse_slice("88:")) == rows[88:]
    for bad in ("3", "a:b", "1:2:3"):
        with pytest.raises(ValueError, match="--rows"):
            shapes.parse_slice(bad)


def test_options(capsys):
    import bench_ops

    args = bench_ops.parse_args(["--variants", "syncopate_auto,sequential,kl_other"])
    assert args.variants == ("gemm", "collective", "sequential", "syncopate_auto", "kl_other")
    assert args.samples == 20 and args.budget_s == 480
    args = bench_ops.parse_args(["--quick"])
    assert args.samples == 10 and args.budget_s == 200
    for bad, message in (
        (["--variants", "nope"], "--variants: unknown ['nope']"),
        (["--ops", "gemm_xx"], "--ops: unknown ['gemm_xx']"),
        (["--rows", "5"], "--rows '5': expected i:j"),
        (["--max-rows", "0"], "--max-rows must be at least 1"),
    ):
        with pytest.raises(SystemExit):
            bench_ops.parse_args(bad)
        assert message in capsys.readouterr().err
    assert bench_ops.main(["--dry-run", "--world", "2", "--quick", "--ops", "gemm_rs"]) == 0
    out = capsys.readouterr().out
    assert "world 2: 4 rows x 16 variants" in out and "estimated" in out


def test_ablation_dry_run(capsys):
    import bench_ablation

    assert bench_ablation.main(["--dry-run", "--world", "2"]) == 0
    out = capsys.readouterr().out
    assert "4 shapes x 19 variants (12 fused contexts each)" in out
    with pytest.raises(SystemExit):
        bench_ablation.main(["--dry-run", "--shapes", "8x8"])


class FakeContext:
    """Stands in for AgGemm / GemmRs / GemmAr: the right result through torch ops, the
    attributes the benchmark reads, and a check() that can be made to fail."""

    fail_check = set()

    def __init__(
        self,
        group,
        *,
        m,
        k,
        n,
        dtype,
        device,
        b_layout,
        backend="auto",
        mode="auto",
        algorithm="auto",
        split=None,
        tile_order="auto",
        reduce=None,
    ):
        import torch.distributed as dist

        self.world = dist.get_world_size(group)
        self.m, self.k, self.n = m, k, n
        self.backend = "copy-engine" if backend == "auto" else backend
        self.decision = "fused" if mode in ("auto", "fused") else "sequential"
        self.algorithm, self.split, self.tile_order = "direct", split or 1, "arrival"
        self.gemm_config = "128x256x64_fake"
        self.kernel_origin = "transformer"
        self.predicted_us = {"fused": 1.0, "sequential": 2.0, "floor": 1.0, "gemm": 1.0, "comm": 0.5}

    def check(self):
        if self.backend in self.fail_check:
            raise RuntimeError(f"WaitTimeoutError: rank 0 slot 3 ({self.backend})")


class FakeAg(FakeContext):
    def __call__(self, a_shard, b, *, out, check):
        import torch.distributed as dist

        gathered = a_shard.new_empty((self.m, self.k))
        dist.all_gather_into_tensor(gathered, a_shard)
        out.copy_(gathered @ b)


class FakeRs(FakeContext):
    def __call__(self, a, b, *, out, check):
        import torch.distributed as dist

        dist.reduce_scatter_tensor(out, a @ b)


class FakeAr(FakeContext):
    def __call__(self, a, b, *, out, check):
        import torch.distributed as dist

        out.copy_(a @ b)
        dist.all_reduce(out)


@pytest.fixture
def gloo_world1(monkeypatch):
    import torch
    import torch.distributed as dist
    import dist_timing
    import op_variants
    import timing

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def all_gather_into_tensor(out, inp, group=None):
        dist.all_gather(list(out.chunk(dist.get_world_size())), inp)

    def reduce_scatter_tensor(out, inp, group=None):
        total = inp.clone()
        dist.all_reduce(total)
        out.copy_(total.chunk(dist.get_world_size())[dist.get_rank()])

    monkeypatch.setattr(dist, "all_gather_into_tensor", all_gather_into_tensor)
    monkeypatch.setattr(dist, "reduce_scatter_tensor", reduce_scatter_tensor)
    monkeypatch.setattr(op_variants, "_symm_ops", lambda: (None, "needs CUDA"))
    monkeypatch.setattr(dist_timing, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(timing, "time_once_ms", lambda fn: (fn(), 1.0)[1])
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_bench_row_end_to_end_on_cpu(gloo_world1, op, tmp_path, capsys):
    import bench_ops
    import dist_timing

    FakeContext.fail_check = {"sm-copy"}  # a timed-out wait found after timing must fail it
    args = bench_ops.parse_args(["--samples", "2", "--warmup", "1", "--chunks", "2"])
    problem = shapes.Problem("ag_gemm" if op == "ag_gemm" else "gemm_rs", 1, 64, 32, 48, "nk", "smoke")
    classes = {"ag_gemm": FakeAg, "gemm_rs": FakeRs, "gemm_ar": FakeAr}
    row = bench_ops.bench_row(problem, op, args, args.variants, classes, None, 0, 1)
    v = row["variants"]
    for name in ("gemm", "collective", "sequential", "two_stream", "syncopate_ce", "syncopate_nccl", "syncopate_auto"):
        assert "ms" in v[name], (name, v[name])
    assert "skipped" in v["async_tp"]
    assert "WaitTimeoutError" in v["syncopate_sm"]["failed"]
    assert all(("skipped" in v[n]) or ("failed" in v[n]) or ("ms" in v[n]) for n in bench_ops.KERNEL_LEVEL)
    assert row["syncopate"]["syncopate_auto"]["gemm_config"] == "128x256x64_fake"
    assert row["floor_ms"] == 1.0 and row["best_fused"]["ms"] == 1.0
    assert row["predicted_vs_measured"]["syncopate_ce"]["predicted_ms"] == pytest.approx(0.001)
    line = bench_ops.row_line(0, 1, row)
    assert line.startswith(f"[1/1] {op} 64x32x48 nk smoke: floor 1.000 ms")
    report = {"rows": [row], "targets": targets.evaluate([row])}
    path = tmp_path / "r.json"
    dist_timing.write_json(path, report)
    assert path.read_text().startswith("{") and not (tmp_path / "r.json.tmp").exists()
    bench_ops.print_table([row])
    out = capsys.readouterr().out
    assert "FAILED" in out and "syncopate_sm" in out
    plot_problem = bench_ops.plot([row], tmp_path / "r.png")
    assert plot_problem is None or plot_problem.startswith("no plot")
    assert math.isfinite(row["seconds"])


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_variants_pass_reduce_to_the_ops_that_have_it(gloo_world1, op):
    """GEMM+RS and GEMM+AR: fixed variants keep the reduce-add chunks, the epilogue variants
    ask for the staged epilogue, auto chooses; AG+GEMM has no reduce keyword (skip reason)."""
    import torch
    import syncopate_variants

    asked = []

    class Recording(FakeContext):
        def __init__(self, group, **kwargs):
            asked.append(kwargs.get("reduce", "<none>"))
            super().__init__(group, **kwargs)

    names = ("syncopate_ce", "syncopate_auto", "syncopate_epilogue_ce")
    a, b = torch.zeros(64, 32), torch.zeros(32, 48)
    built = syncopate_variants.build(op, a, b, 64, "kn", None, names, {op: Recording}, None)
    if op == "ag_gemm":
        assert asked == ["<none>", "<none>"]
        assert built.variants["syncopate_epilogue_ce"] == "the reduction epilogue is GEMM+RS/AR only, not ag_gemm"
    else:
        assert asked == ["chunks", "<none>", "epilogue"]
        assert not any(isinstance(v, str) for v in built.variants.values()), built.variants
    built.close()


class FakeLauncher:
    """Stands in for ops/fused_gemm.py FusedGemm: launch(a, b, c, signals, epoch)."""

    def __init__(self):
        self.epochs = []

    def launch(self, a, b, c, signals, epoch):
        self.epochs.append(epoch)
        c.copy_(a @ b)


class FakeAblationAg(FakeAg):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        import torch

        self.gemm = FakeLauncher()
        self.signals = torch.ones(4, dtype=torch.int32)
        self.config = None


class FakeAblationRs(FakeRs):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        import torch

        self.gemm = FakeLauncher()
        self.signals = torch.ones(4, dtype=torch.int32)
        self.config = None


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs"])
def test_ablation_shape_end_to_end_on_cpu(gloo_world1, op, capsys):
    import bench_ablation

    FakeContext.fail_check = set()
    args = argparse_namespace(samples=2, warmup=1, chunks=2)
    classes = {"ag_gemm": FakeAblationAg, "gemm_rs": FakeAblationRs}
    result = bench_ablation.bench_shape(op, 64, 32, 48, args, classes, None, 0, 1, print)
    v = result["variants"]
    for name in (
        "gemm",
        "collective",
        "sequential",
        "arrival/s1",
        "grouped/s4",
        "no_waits/arrival",
        "no_waits/row-major",
        "no_waits/grouped",
    ):
        assert "ms" in v[name], (name, v[name])
    assert "local_gemm" in v  # Triton on the CPU: measured or failed, never missing
    assert set(result["syncopate"]) == set(bench_ablation.fused_names())
    assert result["syncopate"]["row-major/s2"]["tile_order"] == "arrival"  # what the fake reports
    assert result["wait_cost"]["grouped/s2"] == 1.0 and result["best"]["ms"] == 1.0
    bench_ablation.print_table([result])
    out = capsys.readouterr().out
    assert "no_waits" in out and "best: arrival/s1" in out


def argparse_namespace(**kwargs):
    import argparse

    return argparse.Namespace(**kwargs)
