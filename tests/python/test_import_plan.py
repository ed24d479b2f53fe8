"""sy.import_plan / sy.export_msccl_xml through the bindings, and a plan given to an op
(ops/user_plan.py): checked against the op, timed beside the templates. CPU only."""

from pathlib import Path

import pytest

import syncopate as sy

GOOD = Path(__file__).resolve().parents[1] / "unit" / "plan" / "import_good"


def test_import_each_format_from_a_path():
    ring = sy.import_plan(GOOD / "msccl-xml" / "ring_allgather.xml", format="msccl-xml", shape=[8, 4], tensor="a")
    assert isinstance(ring, sy.ImportedPlan)
    assert ring.plan.collective.kind == "all-gather" and ring.plan.collective.tensor == "a"
    assert ring.plan.num_chunks == 12 and len(ring.origins) == 12
    assert ring.origins[0].startswith("algo/gpu[0]/tb[0]/step[0] (line 6) -> algo/gpu[1]")
    assert sy.verify(ring.plan).ok
    ar = sy.import_plan(
        GOOD / "mscclpp-json" / "two_step_allreduce.json", format="mscclpp_json", shape=[2, 4], backend="sm-copy"
    )
    assert {c.backend for c in ar.plan.chunks} == {"sm-copy"}
    a2a = sy.import_plan(GOOD / "sendrecv" / "alltoall.json", format="sendrecv")
    assert a2a.plan.collective.output == "y"
    hier = sy.import_plan(GOOD / "msccl-xml" / "hierarchical_allgather.xml", format="msccl-xml", shape=[4, 2])
    assert len(hier.notes) == 4 and "ordering point" in hier.notes[0]


def test_import_from_text_and_its_errors():
    text = (GOOD / "sendrecv" / "ring_allgather.json").read_text()
    assert sy.import_plan(text=text, format="sendrecv").plan.num_chunks == 12
    with pytest.raises(sy.PlanParseError, match=r"^mine\.json: ranks\[0\]\.streams\[0\]\[0\]: peer 9"):
        sy.import_plan(text=text.replace('{"send": 1,', '{"send": 9,', 1), format="sendrecv", source="mine.json")
    with pytest.raises(sy.UserError, match="either a path or text="):
        sy.import_plan(format="sendrecv")
    with pytest.raises(sy.UserError, match="argument 'format': unknown import format 'nccl-xml'"):
        sy.import_plan(text=text, format="nccl-xml")
    with pytest.raises(sy.ShapeError, match="backend nccl"):
        sy.import_plan(text=text, format="sendrecv", backend="nccl")
    with pytest.raises(sy.ShapeError, match="names its tensors, shapes, dtypes and dim itself"):
        sy.import_plan(text=text, format="sendrecv", dtype="f16")


def test_a_wrong_source_plan_names_its_steps():
    text = (GOOD / "sendrecv" / "ring_allgather.json").read_text()
    # Rank 1's first receive from rank 0 lands two rows where one was sent.
    bad = text.replace('{"recv": 0, "box": [[0, 1], [0, 2]]}', '{"recv": 0, "box": [[0, 1], [0, 1]]}', 1)
    with pytest.raises(sy.PlanParseError, match=r"moves a box of extents \[1, 2\] into one of extents \[1, 1\]"):
        sy.import_plan(text=bad, format="sendrecv", source="bad.json")


def test_export_then_import_gives_the_same_chunks():
    plan = sy.make_plan("reduce-scatter", world_size=4, shape=[16, 4], algorithm="bidir", split=2, tensor="c")
    xml = sy.export_msccl_xml(plan, "rs")
    assert xml.startswith('<algo name="rs"')
    back = sy.import_plan(text=xml, format="msccl-xml", shape=[16, 4], tensor="c").plan

    def key(c):
        return (c.src, c.dst, tuple(c.box.offset), tuple(c.dst_box.offset), c.op)

    assert sorted(map(key, back.chunks)) == sorted(map(key, plan.chunks))
    with pytest.raises(sy.UserError, match="NCCL chunk"):
        sy.export_msccl_xml(sy.make_plan("all-gather", world_size=2, shape=[4, 2], backend="nccl"))


# --- a plan given to an op ------------------------------------------------------------------------

user_plan = pytest.importorskip("syncopate.ops.user_plan")


def ag_plan(world=4, m=1024, k=256, **kw):
    return sy.make_plan("all-gather", world_size=world, shape=[m, k], tensor="a", **kw)


def check(plan, collective="all-gather", m=1024, k=256, n=512, world=4, dtype="bf16", backend="auto", reduce=None):
    return user_plan.check_user_plan(
        "AgGemm", plan, collective=collective, m=m, k=k, n=n, world=world, dtype=dtype, backend=backend, reduce=reduce
    )


def test_a_matching_plan_is_taken_with_its_backend():
    plan, backend = check(ag_plan(backend="sm-copy"))
    assert backend == "sm-copy"
    ported = sy.import_plan(
        GOOD / "msccl-xml" / "ring_allgather.xml", format="msccl-xml", shape=[1024, 256], tensor="a"
    )
    plan, backend = check(ported)  # an ImportedPlan is taken as its plan
    assert backend == "copy-engine" and plan == ported.plan


def test_copy_engine_and_sm_copy_plans_run_on_each_other():
    plan, backend = check(ag_plan(), backend="sm-copy")
    assert backend == "sm-copy" and {c.backend for c in plan.chunks} == {"sm-copy"}
    with pytest.raises(sy.UserError, match="backend='nccl' but the plan's chunks are copy-engine"):
        check(ag_plan(), backend="nccl")


@pytest.mark.parametrize(
    "plan, kwargs, message",
    [
        (
            lambda: sy.make_plan("reduce-scatter", world_size=4, shape=[1024, 256], tensor="a"),
            {},
            "the plan is a reduce-scatter; this op runs a all-gather of tensor 'a'",
        ),
        (lambda: ag_plan(world=2), {}, "world size 2, the op's group has 4 ranks"),
        (
            lambda: sy.make_plan("all-gather", world_size=4, shape=[1024, 256]),
            {},
            "the plan's tensor is 'x'; this op's is 'a' \\(make or import the plan with tensor='a'\\)",
        ),
        (lambda: ag_plan(m=512), {}, "the plan's 'a' is \\[512, 256\\] along dim 0; this op needs \\[1024, 256\\]"),
        (lambda: ag_plan(dtype="f16"), {}, "the plan's 'a' is f16; this op's dtype is bf16"),
        (lambda: ag_plan(), {"reduce": "epilogue"}, "reduce='epilogue' runs the staged template plan"),
        (lambda: "plan.json", {}, "plan must be a syncopate CommPlan"),
    ],
)
def test_a_plan_that_does_not_match_is_refused(plan, kwargs, message):
    with pytest.raises(sy.UserError, match=message):
        check(plan(), **kwargs)


def test_mixed_backends_and_staged_plans_are_refused():
    data = ag_plan().to_dict()
    data["chunks"][0]["backend"] = "sm-copy"
    with pytest.raises(sy.UserError, match="mixes backends"):
        check(sy.CommPlan.from_dict(data))
    staged = sy.make_plan(
        "reduce-scatter", world_size=4, shape=[1, 1024, 512], dim=1, algorithm="direct", tensor="c", staging="p"
    )
    with pytest.raises(sy.UserError, match="staged reduce-scatter"):
        check(staged, collective="reduce-scatter")


def test_an_unsafe_plan_is_refused_by_the_verifier():
    data = ag_plan().to_dict()
    data["ranks"][0]["streams"][0].pop()  # a chunk nobody issues
    with pytest.raises(sy.PlanVerifyError, match="AgGemm plan"):
        check(sy.CommPlan.from_dict(data))


def test_the_simulator_times_a_given_plan_beside_the_templates():
    from syncopate.ops.choice import calibration

    m, n, k, world = 8192, 8192, 8192, 4
    ported = sy.import_plan(GOOD / "msccl-xml" / "ring_allgather.xml", format="msccl-xml", shape=[m, k], tensor="a")
    choice = user_plan.choice_for_plan(
        "AgGemm",
        ported.plan,
        collective="all-gather",
        m=m,
        n=n,
        k=k,
        world=world,
        dtype="bf16",
        block_m=128,
        block_n=256,
        backend="copy-engine",
        tile_order="auto",
        mode="auto",
    )
    assert choice.decision == "fused" and choice.algorithm == "given" and choice.tile_order == "arrival"
    p = choice.predicted_us
    assert p["floor"] <= p["fused"] and p["template_fused"] > 0
    # The ring imported is the ring template: the simulator gives it the template's time.
    template = sy.simulate(
        sy.make_plan("all-gather", world_size=world, shape=[m, k], tensor="a"),
        sy.GemmShape(m, n, k, 128, 256),
        calibration(),
        order="arrival",
    )
    assert p["fused"] == pytest.approx(template.fused_us, rel=1e-3)
    # The best template (as the op makes its plans: gathering from its input, the own shard as
    # local chunks that start with the side streams) is at least as fast as the ring made so.
    # Not necessarily as fast as the imported ring, which copies the own shard before the
    # kernel: since the side streams fork after the kernel's launch (calib host.
    # chunks_after_launch_us) that can be the faster plan.
    ring_from_input = sy.simulate(
        sy.make_plan("all-gather", world_size=world, shape=[m, k], tensor="a", input="a_in"),
        sy.GemmShape(m, n, k, 128, 256),
        calibration(),
        order="arrival",
    )
    assert p["template_fused"] <= ring_from_input.fused_us + 1e-6
    assert "plan given: simulated fused" in choice.reason and "the best template's" in choice.reason
    seq = user_plan.choice_for_plan(
        "AgGemm",
        ported.plan,
        collective="all-gather",
        m=m,
        n=n,
        k=k,
        world=world,
        dtype="bf16",
        block_m=128,
        block_n=256,
        backend="copy-engine",
        tile_order="row-major",
        mode="sequential",
    )
    assert seq.decision == "sequential" and seq.tile_order == "row-major"
