"""The zig-zag (load-balanced causal) layout as a plan (plan/sequence_parallel.hpp,
make_zigzag_gather_plan): rank r's piece is global half-pieces r and 2W - 1 - r; the plan gathers
them in global order. Its block tables (BlockTables.from_plan over the gathered tensor's sequence
dim) make each block of the gathered sequence wait for exactly the chunk that lands its half-piece
on this rank, the own halves included (local copies), so a kernel reading K/V in global order
waits per block as with the contiguous layout."""

import pytest

sy = pytest.importorskip("syncopate")
pytest.importorskip("torch")


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_zigzag_plan_verifies_and_its_block_tables_follow_the_halves(world):
    from syncopate.block_tables import BlockTables

    s_loc, half = 32, 16
    plan = sy.make_zigzag_gather_plan(world_size=world, shape=[1, 2, s_loc, 8], dtype="f16")
    assert sy.verify(plan).ok, sy.verify(plan).format("zigzag")
    assert list(plan.tensors["kv_all"].shape) == [1, 2, world * s_loc, 8]
    for rank in range(world):
        table = sy.lower(plan, sy.TileGrid(1, 1, 1, 1), [])[rank]
        blocks = BlockTables.from_plan(plan, table, "kv_all", 2, half, rows=2)
        assert blocks.blocks == 2 * world
        slot_chunk = {i: s.chunk for i, s in enumerate(table.slots)}
        for j in range(2 * world):  # block j is global half-piece j
            row = blocks.slots[blocks.offsets[j] : blocks.offsets[j + 1]]
            assert len(row) == 1, (rank, j, row)
            chunk = plan.chunks[slot_chunk[row[0]]]
            assert chunk.dst == rank and chunk.dst_box.offset[2] == j * half, (rank, j, chunk.id)
            owner = j if j < world else 2 * world - 1 - j
            assert chunk.src == (rank if owner == rank else (rank - 1) % world), (rank, j, chunk.src)
        # Every row alike (one per head); the visit starts at a block of the own halves.
        assert blocks.offsets[2 * world :] == [o + blocks.offsets[2 * world] for o in blocks.offsets[: 2 * world + 1]]
        assert blocks.first[0] in (rank, 2 * world - 1 - rank)


def test_zigzag_plan_refuses_an_odd_piece_by_name():
    from syncopate.errors import ShapeError

    with pytest.raises(ShapeError, match=r"zig-zag gather: shape 1x2x5x8 is not \[Z, H, S_loc, D\] with S_loc even"):
        sy.make_zigzag_gather_plan(world_size=2, shape=[1, 2, 5, 8])
