"""Bindings of the staged GEMM+RS access (TileAccess.m_local_shard): the keyword, its repr, lowering
of a hand-written staged plan through sy.lower, and PlanWorkspace's access tuples (4 or 5 items)
through syncopate._runtime.prepare_plan (CPU only: nothing here touches a GPU)."""

import json

import pytest

sy = pytest.importorskip("syncopate")


def staged_plan_json(world=2, m=8, n=4, split=2):
    """c [1, M, N] partials, p [W, M/W, N] staging; chunk (s -> r, sub-chunk k) copies
    c[0, r*Ms + k0 : +rows, :] on s into p[s, k0 : +rows, :] on r, pulled by r (stream per peer)."""
    ms = m // world
    rows = [ms // split + (1 if k < ms % split else 0) for k in range(split)]
    starts = [sum(rows[:k]) for k in range(split)]
    chunks, streams = [], [[[] for _ in range(world - 1)] for _ in range(world)]
    for r in range(world):
        for k in range(split):
            for d in range(1, world):
                s = (r + d) % world
                cid = len(chunks)
                chunks.append(
                    {
                        "id": cid,
                        "tensor": "c",
                        "box": {"offset": [0, r * ms + starts[k], 0], "extent": [1, rows[k], n]},
                        "dst_tensor": "p",
                        "dst_box": {"offset": [s, starts[k], 0], "extent": [1, rows[k], n]},
                        "src": s,
                        "dst": r,
                        "backend": "copy-engine",
                        "op": "copy",
                        "stream": d - 1,
                        "deps": [],
                    }
                )
                streams[r][d - 1].append(cid)
    return json.dumps(
        {
            "version": 1,
            "collective": {
                "kind": "reduce-scatter",
                "tensor": "c",
                "output": "p",
                "dim": 1,
                "algorithm": "direct",
                "split": split,
            },
            "world_size": world,
            "tensors": {
                "c": {"shape": [1, m, n], "dtype": "bf16", "layout": "row-major"},
                "p": {"shape": [world, ms, n], "dtype": "bf16", "layout": "row-major"},
            },
            "ranks": [{"rank": r, "streams": streams[r]} for r in range(world)],
            "chunks": chunks,
        }
    )


def test_tile_access_shard_keyword_positional_and_repr():
    a = sy.TileAccess("p", "consume", 1, 2, m_local_shard=True)
    assert a.m_local_shard is True
    assert repr(a) == "TileAccess(p, consume, m_dim=1, n_dim=2, m_local_shard=True)"
    b = sy.TileAccess(*("p", "consume", 1, 2, True))  # the 5-tuple form the ops unpack
    assert b.m_local_shard is True
    c = sy.TileAccess("c", "produce", 1, 2)
    assert c.m_local_shard is False
    assert repr(c) == "TileAccess(c, produce, m_dim=1, n_dim=2)"  # unchanged without the flag
    c.m_local_shard = True
    assert c.m_local_shard is True
    with pytest.raises(TypeError):
        sy.TileAccess("p", "consume", 1, 2, "yes")


def test_lower_staged_plan_own_box_waits_others_notify():
    plan = sy.parse_plan(staged_plan_json(), "staged.json")
    accesses = sy.default_accesses(plan)
    assert [(a.tensor, a.role, a.m_dim, a.n_dim, a.m_local_shard) for a in accesses] == [
        ("c", "produce", 1, 2, False),
        ("p", "consume", 1, 2, True),
    ]
    tables = sy.lower(plan, sy.TileGrid(8, 4, 2, 4), accesses)
    # Chunks 0, 1: rank 1's partials of rows 0-1 / 2-3 into rank 0; chunks 2, 3: rank 0's of rows 4-5 / 6-7.
    chunks = [[[t.slots[s].chunk for s in w] for w in t.tile_waits] for t in tables]
    assert chunks == [[[0], [1], [], []], [[], [], [2], [3]]]
    notified = [[[(t.slots[s].kind, t.slots[s].chunk) for s in w] for w in t.tile_notifies] for t in tables]
    assert notified[0] == [[], [], [("ready", 2)], [("ready", 3)]]
    assert notified[1] == [[("ready", 0)], [("ready", 1)], [], []]


def test_lower_refuses_a_shard_that_does_not_cover_the_grid():
    plan = sy.parse_plan(staged_plan_json(), "staged.json")
    with pytest.raises(sy.UserError, match="shard-mismatch.*M = 10"):
        sy.lower(plan, sy.TileGrid(10, 4, 2, 4), [sy.TileAccess("p", "consume", 1, 2, m_local_shard=True)])


def test_prepare_plan_takes_four_or_five_item_accesses():
    rt = pytest.importorskip("syncopate._runtime")
    text = staged_plan_json()
    prepared = rt.prepare_plan(text, 8, 4, 2, 4, [("c", "produce", 1, 2), ("p", "consume", 1, 2, True)])
    assert prepared.table(0)["tile_waits"] == [[0], [1], [], []]
    assert prepared.table(1)["tile_waits"] == [[], [], [0], [1]]
    # 0/1 are accepted for the flag; False lowers p as a full-height tensor, which M = 8 refuses.
    assert rt.prepare_plan(text, 8, 4, 2, 4, [("p", "consume", 1, 2, 1)]).table(0)["tile_waits"][0] == [0]
    with pytest.raises(sy.UserError, match="grid-mismatch"):
        rt.prepare_plan(text, 8, 4, 2, 4, [("p", "consume", 1, 2, False)])
    bad = {
        "3 items": [("c", "produce", 1)],
        "6 items": [("c", "produce", 1, 2, True, 0)],
        "wrong item types": [("c", "produce", "1", 2)],
        "not a tuple": ["c"],
    }
    for words, accesses in bad.items():
        with pytest.raises(sy.UserError, match=r"accesses\[0\]: bad-access: " + words):
            rt.prepare_plan(text, 8, 4, 2, 4, accesses)
    for flag in ("yes", 2):
        with pytest.raises(sy.UserError, match="m_local_shard bool"):
            rt.prepare_plan(text, 8, 4, 2, 4, [("p", "consume", 1, 2, flag)])
