"""NCCL groups through the _core bindings: template NCCL plans carry a group number per chunk (the
same one the JSON form has), other backends carry None, and the verifier still accepts them."""

import syncopate as sy


def test_nccl_ring_chunks_carry_their_group():
    plan = sy.make_plan("all-gather", world_size=4, shape=[16, 8], split=2, backend="nccl")
    assert sy.verify(plan).ok
    raw = plan.to_dict()["chunks"]
    assert [c.group for c in plan.chunks] == [r["group"] for r in raw]
    # One group per ring step and sub-chunk: 3 steps x 2 sub-chunks, 4 chunks (one per rank) each.
    assert sorted({c.group for c in plan.chunks}) == list(range(6))
    assert all(sum(c.group == g for c in plan.chunks) == 4 for g in range(6))


def test_other_backends_have_no_group():
    plan = sy.make_plan("all-gather", world_size=4, shape=[16, 8], backend="copy-engine")
    assert all(c.group is None for c in plan.chunks)
    assert all("group" not in r for r in plan.to_dict()["chunks"])
