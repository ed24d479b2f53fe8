"""Topology detection of the ops (syncopate.ops.topology) with mocked environments: the ctx
keyword, SYNCOPATE_NODES, torchrun's LOCAL_WORLD_SIZE, and the op contexts' refusal of a group
spanning several nodes; plus multi-node plans and tune through the bindings."""

import pytest

torch = pytest.importorskip("torch")

import syncopate
from syncopate.errors import UserError
from syncopate.ops import topology
from syncopate.ops.topology import check_single_node, detect_nodes

TORCHRUN_2x4 = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "RANK": "5", "LOCAL_RANK": "1"}


def test_one_node_without_any_hint():
    assert detect_nodes(range(4), environ={}) == []


def test_torchrun_local_world_size_gives_consecutive_nodes():
    assert detect_nodes(range(8), environ=TORCHRUN_2x4) == [0, 0, 0, 0, 1, 1, 1, 1]
    # A subgroup: its ranks keep the nodes of their global ranks.
    assert detect_nodes([1, 5], environ=TORCHRUN_2x4) == [0, 1]
    # All on one node: the single-node form.
    assert detect_nodes([0, 1, 2], environ=TORCHRUN_2x4) == []
    assert detect_nodes(range(4), environ={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}) == []


def test_syncopate_nodes_overrides_torchrun():
    env = dict(TORCHRUN_2x4, SYNCOPATE_NODES="4")
    assert detect_nodes(range(8), environ=env) == [0, 0, 1, 1, 2, 2, 3, 3]
    env = dict(TORCHRUN_2x4, SYNCOPATE_NODES="0,0,0,1,1,2,2,2")  # uneven nodes, per global rank
    assert detect_nodes(range(8), environ=env) == [0, 0, 0, 1, 1, 2, 2, 2]
    assert detect_nodes([2, 3], environ=env) == [0, 1]


def test_keyword_overrides_the_environment():
    env = dict(TORCHRUN_2x4, SYNCOPATE_NODES="4")
    assert detect_nodes(range(8), nodes=2, environ=env) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert detect_nodes(range(4), nodes=[3, 3, 7, 7], environ=env) == [3, 3, 7, 7]
    assert detect_nodes(range(4), nodes=1, environ=env) == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": 3}, "nodes=3: 3 nodes cannot hold 4 ranks in equal parts"),
        ({"nodes": 0}, "nodes=0: a node count must be an integer >= 1"),
        ({"nodes": [0, 1]}, "2 node ids for 4 ranks: give one per rank"),
        ({"nodes": [0, -1, 1, 1]}, "rank 1 has node -1; node ids are integers >= 0"),
        ({"environ": {"SYNCOPATE_NODES": "two"}}, "SYNCOPATE_NODES='two': expected a node count"),
        ({"environ": {"SYNCOPATE_NODES": "0,1"}}, "SYNCOPATE_NODES='0,1': 2 node ids for 4 ranks"),
        ({"environ": {"LOCAL_WORLD_SIZE": "x"}}, "LOCAL_WORLD_SIZE='x': expected a positive integer"),
        ({"environ": {"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"}}, "LOCAL_WORLD_SIZE=4 does not divide WORLD_SIZE=6"),
    ],
)
def test_bad_topologies_are_named(kwargs, message):
    kwargs.setdefault("environ", {})
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        detect_nodes(range(4), **kwargs)


def test_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("SYNCOPATE_NODES", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert detect_nodes(range(4)) == [0, 0, 1, 1]


def test_check_single_node():
    check_single_node("AgGemm", [])
    check_single_node("AgGemm", [0, 0])
    with pytest.raises(UserError, match=r"AgGemm: the group spans 2 nodes \(node 0: 3 ranks, node 1: 1 ranks\)"):
        check_single_node("AgGemm", [0, 0, 0, 1])


def test_op_context_refuses_a_group_across_nodes(monkeypatch):
    """The context asks its group for its global ranks and reads torchrun's variables; a group
    spanning two nodes is refused before any GPU work."""
    import importlib

    import torch.distributed as dist

    ag = importlib.import_module("syncopate.ops.ag_gemm")  # the module (syncopate.ops.ag_gemm is the op)
    context = importlib.import_module("syncopate.ops.context")  # where OpContext looks it up
    from syncopate.ops.gemm_rs import GemmRs

    monkeypatch.setattr(context, "group_rank_world", lambda group: (group, 0, 4))
    monkeypatch.setattr(dist, "get_process_group_ranks", lambda group: [0, 1, 2, 3], raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("SYNCOPATE_NODES", raising=False)
    with pytest.raises(UserError, match="AgGemm: the group spans 2 nodes"):
        ag.AgGemm(object(), m=256, k=64, n=64, dtype=torch.bfloat16)
    with pytest.raises(UserError, match="GemmRs: the group spans 4 nodes"):
        GemmRs(object(), m=256, k=64, n=64, dtype=torch.bfloat16, nodes=4)


# --- multi-node plans and tune through the bindings ---------------------------------------------


def test_make_plan_with_nodes_is_hierarchical():
    plan = syncopate.make_plan("all-gather", world_size=4, shape=[16, 8], nodes=[0, 0, 1, 1], split=2)
    assert list(plan.nodes) == [0, 0, 1, 1]
    crossing = [c for c in plan.chunks if (c.src < 2) != (c.dst < 2)]
    assert crossing and all(c.backend == "nccl" and c.src % 2 == c.dst % 2 for c in crossing)
    assert all(c.backend == "copy-engine" for c in plan.chunks if (c.src < 2) == (c.dst < 2))
    assert syncopate.verify(plan).ok


def test_flat_copy_engine_plan_across_nodes_is_refused():
    with pytest.raises(syncopate.ShapeError, match="a flat plan across 2 nodes needs backend nccl"):
        syncopate.make_plan("all-gather", world_size=4, shape=[16, 8], nodes=[0, 0, 1, 1], flat=True)


def test_tune_offers_hierarchical_and_flat_candidates():
    gemm = syncopate.GemmShape(4096, 1024, 1024, 128, 256)
    result = syncopate.tune(
        "all-gather", gemm, 4, syncopate.calibration("h200"), nodes=[0, 0, 1, 1], splits=[1], orders=["arrival"]
    )
    assert {c.hierarchical for c in result.candidates} == {True, False}
    assert all(c.backend == "nccl" for c in result.candidates if not c.hierarchical)
