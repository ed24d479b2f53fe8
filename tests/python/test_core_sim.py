"""The simulator and auto-choice through the bindings, on the calibration shipped with the
package: predictions are self-consistent, timelines match the plan and grid, errors are typed."""

import json
import pickle

import pytest

import syncopate as sy


@pytest.fixture(scope="module")
def h200():
    return sy.calibration("h200")


@pytest.fixture(scope="module")
def ag_case():
    plan = sy.make_plan("all-gather", world_size=4, shape=[4096, 1024], split=2, tensor="x")
    return plan, sy.GemmShape(m=4096, n=2048, k=1024)


def test_shipped_calibration(h200):
    assert h200.sms > 0 and h200.version == 1
    assert h200.tile_time_us(128, 256, 1024) > 0
    assert h200.link_bandwidth_gbps(0, 1, "copy-engine") > 0
    again = sy.parse_calibration(h200.to_json(), "copy.json")
    assert again.to_json() == h200.to_json()
    assert pickle.loads(pickle.dumps(h200)).to_json() == h200.to_json()
    assert sy.load_calibration(sy.__path__[0] + "/calib/h200.json").to_json() == h200.to_json()


def test_calibration_errors(h200, tmp_path):
    with pytest.raises(sy.CalibrationError, match=r"^mine\.json: ") as info:
        sy.parse_calibration("{}", "mine.json")
    assert isinstance(info.value, sy.UserError) and isinstance(info.value, ValueError)
    data = json.loads(h200.to_json())
    data["sms"] = -4
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(sy.CalibrationError, match=r"bad\.json: sms"):
        sy.calibration(path)
    with pytest.raises(sy.UserError, match="no such shipped calibration; shipped: .*h200"):
        sy.calibration("no-such-gpu")


def test_kernel_level_carveout_and_costs(h200, tmp_path):
    """sm_carveout reaches kernel-level mode only; the shipped kernel_level section costs time."""
    plan = sy.make_plan("all-gather", world_size=2, shape=[8192, 8192], split=4, backend="nccl")
    gemm = sy.GemmShape(m=8192, n=8192, k=8192)
    plain = sy.simulate(plan, gemm, h200)
    carved = sy.simulate(plan, gemm, h200, sm_carveout=16)
    assert carved.kernel_level_us > plain.kernel_level_us  # carveout_slowdown 1.04 per tile
    assert carved.fused_us == plain.fused_us and carved.sequential_us == plain.sequential_us
    assert [e.host_return for e in plain.kernel_level.rank_ends] == [
        pytest.approx(130.0)
    ] * 2  # 4 calls x 20 + 5 GEMMs x 10
    with pytest.raises(sy.UserError, match="sm_carveout"):
        sy.simulate(plan, gemm, h200, sm_carveout=h200.sms)
    data = json.loads(h200.to_json())
    del data["kernel_level"]  # a calibration without the section: no kernel-level costs
    path = tmp_path / "no-kl.json"
    path.write_text(json.dumps(data))
    assert sy.simulate(plan, gemm, sy.calibration(path)).kernel_level_us < plain.kernel_level_us


def test_prediction_is_self_consistent(h200, ag_case):
    plan, gemm = ag_case
    p = sy.simulate(plan, gemm, h200)
    assert p.floor_us == pytest.approx(max(p.gemm_alone_us, p.comm_alone_us))
    assert p.fused_us >= p.floor_us * (1 - 1e-9)
    assert p.fused_us == pytest.approx(p.fused.total_us)
    assert p.sequential_us == pytest.approx(p.sequential.total_us)
    assert p.kernel_level_us == pytest.approx(p.kernel_level.total_us)
    timeline = p.fused
    assert timeline.world_size == plan.world_size
    assert sorted(c.chunk for c in timeline.chunks) == list(range(plan.num_chunks))
    for c in timeline.chunks:
        chunk = plan.chunk(c.chunk)
        assert (c.src, c.dst, c.backend) == (chunk.src, chunk.dst, chunk.backend)
        assert 0 <= c.ready <= c.start <= c.transfer_end <= c.arrival <= timeline.total_us + 1e-9
    grid = gemm.grid()
    assert len(timeline.tiles) == plan.world_size * grid.count
    for rank in range(plan.world_size):
        assert sorted(t.tile for t in timeline.tiles if t.rank == rank) == list(range(grid.count))
    assert all(t.claimed <= t.start < t.end <= timeline.total_us + 1e-9 for t in timeline.tiles)


def schedule_only(calib):
    """`calib` without the call path of a fused call (no `host`: the kernel and the chunks start
    at the call's start, no local shard copy, no per-chunk dispatch): what is tested here is the
    schedule."""
    data = json.loads(calib.to_json())
    del data["host"]
    return sy.parse_calibration(json.dumps(data), "h200-schedule-only.json")


def test_arrival_order_beats_row_major_here(h200, ag_case):
    # The effect the tile scheduler exists for (tiles whose rows landed first run first), on an
    # AG+GEMM shape.
    plan, gemm = ag_case
    calib = schedule_only(h200)
    arrival = sy.simulate(plan, gemm, calib, order="arrival")
    row_major = sy.simulate(plan, gemm, calib, order="row-major")
    assert arrival.fused_us < row_major.fused_us
    assert arrival.gemm_alone_us == pytest.approx(row_major.gemm_alone_us)


def test_the_call_path_starts_the_gemm_at_once(h200, ag_case):
    # The call path of issue 14: each rank's kernel is launched host.fused_call_us after the call
    # plus the copy of its own shard into the heap, whatever the number of chunks (before, the
    # host issued every chunk first, 31 us each, and at this small shape the kernel started after
    # the last chunk had landed, so the tile order could not matter). Now it does, as without the
    # call path, and the call path costs less than a launch per chunk would.
    plan, gemm = ag_case
    doc = json.loads(h200.to_json())
    shard_bytes = 4096 // 4 * 1024 * 2  # x [4096, 1024] bf16 over 4 ranks
    launch = doc["host"]["fused_call_us"] + shard_bytes / (doc["gpu"]["local_copy_gbps"] * 1e3)
    for split in (1, 2, 4):
        p = sy.simulate(
            sy.make_plan("all-gather", world_size=4, shape=[4096, 1024], split=split, tensor="x"), gemm, h200
        )
        assert [e.kernel_launch for e in p.fused.rank_ends] == [pytest.approx(launch)] * 4, split
        first_tile = min(t.start for t in p.fused.tiles if t.rank == 0)
        assert first_tile == pytest.approx(launch + doc["overheads"]["launch_us"]), split
    arrival = sy.simulate(plan, gemm, h200, order="arrival")
    row_major = sy.simulate(plan, gemm, h200, order="row-major")
    assert arrival.fused_us < row_major.fused_us
    schedule = sy.simulate(plan, gemm, schedule_only(h200), order="arrival").fused_us
    assert schedule < arrival.fused_us < schedule + launch + 6 * doc["backends"]["copy-engine"]["issue_us"] + 1


def test_explicit_accesses_equal_defaults(h200, ag_case):
    plan, gemm = ag_case
    accesses = sy.default_accesses(plan)
    assert [(a.tensor, a.role, a.m_dim, a.n_dim) for a in accesses] == [("x", "consume", 0, -1)]
    default = sy.simulate(plan, gemm, h200)
    explicit = sy.simulate(plan, gemm, h200, accesses=accesses)
    assert explicit.fused_us == default.fused_us


def test_trace_and_svg(h200, ag_case):
    plan, gemm = ag_case
    timeline = sy.simulate(plan, gemm, h200).fused
    trace = json.loads(timeline.chrome_trace_json())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(events) >= plan.num_chunks
    svg = timeline.svg(width=800, title="ag")
    assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_bad_gemm_for_plan(h200, ag_case):
    plan, _ = ag_case
    with pytest.raises(sy.UserError):
        sy.simulate(plan, sy.GemmShape(m=1000, n=2048, k=1024), h200)


def test_tune(h200):
    gemm = sy.GemmShape(m=4096, n=2048, k=1024)
    result = sy.tune("all-gather", gemm, 4, h200, splits=[1, 2], orders=["arrival", "row_major"])
    assert result.decision in ("fused", "kernel-level", "sequential")
    assert result.reason
    assert result.candidates
    fused_times = [c.fused_us for c in result.candidates]
    assert fused_times == sorted(fused_times), "candidates come fastest fused first"
    assert result.best_fused.fused_us == fused_times[0]
    assert {c.split for c in result.candidates} <= {1, 2}
    assert {c.order for c in result.candidates} <= {"arrival", "row-major"}
    assert result.best_sequential.sequential_us == min(c.sequential_us for c in result.candidates)


def test_tune_bad_arguments(h200):
    gemm = sy.GemmShape(m=4096, n=2048, k=1024)
    with pytest.raises(sy.UserError, match="argument 'backends': unknown backend 'pcie'"):
        sy.tune("all-gather", gemm, 4, h200, backends=["pcie"])
    with pytest.raises(sy.UserError, match="argument 'collective'"):
        sy.tune("gather", gemm, 4, h200)


def test_predict_attention_decides_as_the_attention_ops_auto():
    """_core.predict_attention (sim/attention_model.hpp) through the binding: today's kernel
    never pays at world 1; a calibration whose kernel is as fast as SDPA makes the ring fuse at
    world 8; the attention ops' auto on CPU tensors stays sequential; bad input is named."""
    import json

    import torch

    from syncopate import _core
    from syncopate.errors import CalibrationError, UserError
    from syncopate.ops.choice import calibration
    from syncopate.ops.seq_attention import choose_mode

    shape = dict(batch=1, heads=16, kv_heads=16, head_dim=128, causal=True)
    calib = calibration()
    p = _core.predict_attention("ring", calib, world=1, seq_local=8192, **shape)
    assert p.decision == "sequential" and p.fused_us > p.sequential_us > 0
    doc = json.loads(calib.to_json())
    doc["attention"].update(kernel_tflops=doc["attention"]["library_tflops"], wait_overhead=1.0)
    doc["attention"].update(kernel_causal_tflops=doc["attention"]["library_causal_tflops"], wait_overhead_causal=1.0)
    fast = _core.parse_calibration(json.dumps(doc))
    p = _core.predict_attention("ring", fast, world=8, seq_local=1024, **shape)
    assert p.decision == "fused", p.reason
    q = torch.zeros(1, 16, 64, 128, dtype=torch.float16)
    assert choose_mode("ring", q, q, 8, True) == "sequential"  # not on a GPU
    with pytest.raises(UserError, match="must divide the head counts"):
        _core.predict_attention("ulysses", calib, world=3, seq_local=64, **shape)
    with pytest.raises(UserError, match="expected 'ulysses' or 'ring'"):
        _core.predict_attention("zigzag", calib, world=2, seq_local=64, **shape)
    del doc["attention"]
    with pytest.raises(CalibrationError, match="no 'attention' section"):
        _core.predict_attention("ring", _core.parse_calibration(json.dumps(doc)), world=2, seq_local=64, **shape)
