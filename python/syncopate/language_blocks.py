"""The device primitives of a wait inside a loop over blocks (`@sy.consume_block`,
docs/ANNOTATIONS.md "Waiting per block"); syncopate.language_sites re-exports them for the
transformer's output.

- `wait_block` waits on the landing slots of one block: row `key * blocks + block` of the block
  tables (CSR, as the tile tables), for the call whose number the epoch word holds.
- `block_in_order` renumbers a loop's variable so that the loop `for v in range(start, stop,
  step)` visits the same values from block `first[key]` (a block number `v // step`) downwards,
  wrapping around to the top. The templates land a rank's K/V pieces in the order own piece,
  rank - 1, rank - 2, ... (ring and all-to-all alike), so with `first` the last block of the own
  piece the loop visits the own piece, then each piece as it lands. A first block past the
  loop's end (causal: the own piece reaches beyond the tile's diagonal) starts at the loop's
  last block; one before its start visits the loop downwards from its last block.
"""

import triton
import triton.language as tl

from syncopate.language import fence_proxy_async, wait


@triton.jit
def wait_block(signals_ptr, block_offsets_ptr, block_slots_ptr, slot_writers_ptr, key, block, blocks,
               tile, epoch_ptr, bound_ns, rank, error_ptr):
    """Waits on every landing slot of `block` in table row `key` (CSR row key * blocks + block)."""
    row = key * blocks + block
    begin = tl.load(block_offsets_ptr + row)
    end = tl.load(block_offsets_ptr + row + 1)
    epoch = tl.load(epoch_ptr)
    for i in range(begin, end):
        slot = tl.load(block_slots_ptr + i)
        expected = epoch * tl.load(slot_writers_ptr + slot)
        wait(signals_ptr + slot, expected, bound_ns, error_ptr, rank, slot, tile)
    fence_proxy_async()


@triton.jit
def block_in_order(v, start, stop, step, first_ptr, key):
    """The value of the loop variable that iteration `v` visits: the loop's values from block
    `first_ptr[key]` (clamped into the loop) downwards, wrapping around to the top."""
    count = (stop - start + step - 1) // step
    top = tl.load(first_ptr + key) - start // step
    top = tl.where((top < 0) | (top >= count), count - 1, top)
    position = top - (v - start) // step
    position = tl.where(position < 0, position + count, position)
    return start + position * step
