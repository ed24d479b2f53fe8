"""The block tables of a kernel that waits inside its loop over blocks (`@sy.consume_block`,
docs/ANNOTATIONS.md "Waiting per block").

Row `key * blocks + block` lists the landing slots block `block` waits on for table row `key`
(the tile's `n=` coordinate; 0 when the annotation gives none); `first[key]` is the block the
loop visits first with `order=arrival` (it then visits downwards, wrapping around). Slots are
those of the kernel's TileTables (one signal array, one `slot_writers`).

`pieces_table` builds them for K/V made of `pieces` equal pieces along the sequence, one landing
slot per piece (and table row), the own piece needing no wait: the layout of the ring pass and of
Ulysses' all-to-all (plan/sequence_parallel.hpp), whose pieces land own first, then rank - 1,
rank - 2, ...

`from_plan` reads them off a plan whose chunks land K/V along one dimension of a tensor (e.g. the
ring all-gather template over the sequence dim of `[Z, H_kv, S, D]`, which the attention kernel
reads as one piece): block j waits on the rank's landing slots (its SignalTable's) of the chunks
whose destination box meets positions [j * block, (j + 1) * block), and `first` follows the plan's
estimated arrival (`estimate_arrival`): the last block of the first run of blocks that land
earliest, so the descending visit starts with what is there first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from syncopate.errors import UserError


@dataclass
class BlockTables:
    blocks: int  # blocks per row
    offsets: list[int]  # CSR, rows * blocks + 1 entries
    slots: list[int]
    first: list[int]  # by row

    @classmethod
    def from_lists(
        cls, blocks: int, waits: Sequence[Sequence[Sequence[int]]], first: Sequence[int], num_slots: int
    ) -> "BlockTables":
        """waits[key][block]: the slots that block waits on; first[key]: see the module."""
        if blocks < 1:
            raise UserError(f"block tables: blocks={blocks}, expected at least 1")
        if len(first) != len(waits):
            raise UserError(f"block tables: {len(first)} first blocks for {len(waits)} rows")
        offsets, slots = [0], []
        for key, row in enumerate(waits):
            if len(row) != blocks:
                raise UserError(f"block tables: row {key} has {len(row)} blocks, expected {blocks}")
            for block, listed in enumerate(row):
                for slot in listed:
                    if not 0 <= int(slot) < num_slots:
                        raise UserError(
                            f"block tables: row {key}, block {block}: slot {slot} is not one of the {num_slots} slots"
                        )
                    slots.append(int(slot))
                offsets.append(len(slots))
        return cls(int(blocks), offsets, slots, [int(f) for f in first])

    @classmethod
    def pieces_table(
        cls, rows: int, length: int, block: int, pieces: int, rank: int, slot_of_piece: Optional[Sequence[int]] = None
    ) -> "BlockTables":
        """K/V of `length` positions in `pieces` equal pieces (piece p: positions p * length /
        pieces ...), blocks of `block` positions; block j waits on the slot of every piece it
        overlaps except `rank`'s own (slot_of_piece[p], default p, -1 for none). Every row
        alike; `first` is the own piece's last block."""
        if length % pieces != 0:
            raise UserError(f"block tables: {length} positions do not split into {pieces} equal pieces")
        piece_len = length // pieces
        slot_of = list(slot_of_piece) if slot_of_piece is not None else list(range(pieces))
        blocks = -(-length // block)
        row = []
        for j in range(blocks):
            lo, hi = j * block, min(length, (j + 1) * block)
            row.append(
                [slot_of[p] for p in range(lo // piece_len, (hi - 1) // piece_len + 1) if p != rank and slot_of[p] >= 0]
            )
        last_own = ((rank + 1) * piece_len - 1) // block
        num_slots = max([s for s in slot_of if s >= 0], default=-1) + 1
        return cls.from_lists(blocks, [row] * rows, [last_own] * rows, num_slots)

    @classmethod
    def from_plan(
        cls, plan, table, tensor: str, dim: int, block: int, rows: int = 1, arrival: Optional[Sequence[float]] = None
    ) -> "BlockTables":
        """From a plan (bindings' CommPlan), this rank's SignalTable of it (`syncopate.lower`),
        the consumed tensor and its position dimension; `arrival` per chunk defaults to
        `syncopate.estimate_arrival(plan)`. Every row alike."""
        if tensor not in plan.tensors:
            raise UserError(f"block tables: tensor {tensor!r} is not in the plan (tensors: {', '.join(plan.tensors)})")
        shape = list(plan.tensors[tensor].shape)
        if not 0 <= dim < len(shape):
            raise UserError(f"block tables: dim {dim} is out of range for {tensor!r} of shape {shape}")
        if arrival is None:
            import syncopate

            arrival = syncopate.estimate_arrival(plan)
        length = shape[dim]
        blocks = -(-length // block)
        waits = [[] for _ in range(blocks)]
        lands = [0.0] * blocks  # when the block's last chunk lands (0: nothing to wait for)
        for c in plan.chunks:
            slot = table.landing_slot_of_chunk[c.id]
            if c.dst != table.rank or c.dst_tensor != tensor or slot < 0:
                continue
            lo = c.dst_box.offset[dim]
            hi = lo + c.dst_box.extent[dim]
            for j in range(lo // block, (hi - 1) // block + 1):
                waits[j].append(int(slot))
                lands[j] = max(lands[j], float(arrival[c.id]))
        earliest = min(lands)
        first = lands.index(earliest)
        while first + 1 < blocks and lands[first + 1] == earliest:
            first += 1
        return cls.from_lists(blocks, [[sorted(set(w)) for w in waits]] * rows, [first] * rows, len(table.slots))

    @property
    def waits(self) -> bool:
        """Whether any block has a slot to wait on (the kernel's constexpr `sy_block_waits`)."""
        return bool(self.slots)

    def device_arrays(self, device: torch.device) -> dict:
        """The kernel's block-table arguments but `sy_blocks`: the three tables on `device` and
        `sy_block_waits` (a constexpr: tables without a slot compile the kernel's order=arrival
        loops as written, with no renumbering and no wait)."""

        def arr(values: list[int]) -> torch.Tensor:
            return torch.tensor(values if values else [0], dtype=torch.int32, device=device)

        return {
            "sy_block_wait_offsets": arr(self.offsets),
            "sy_block_wait_slots": arr(self.slots),
            "sy_block_first": arr(self.first),
            "sy_block_waits": int(self.waits),
        }
