"""Launching a transformed kernel: grid, Syncopate's extra arguments, and the timeout check.

    tables = TileTables.from_lists(order, tiles_n, tile_waits, tile_notifies, slot_writers,
                                   slot_chunks, rank=rank)
    launch(kernel, None, tables, a, b, c, M, N, K, ..., BLOCK_M=64, ...,
           signals=signals, epoch=epoch_word, wait_bound_ns=10_000_000)

`kernel` is the `@triton.jit` function of a module written by `syncopate transform`; its
module-level `__syncopate__` dict names the parameters the transformer added. The user's
arguments are passed as the untransformed kernel takes them; the added ones are passed by
keyword. After the launch (and a synchronize, unless sync=False) a timed-out wait raises
WaitTimeoutError naming rank, slot, expected and seen values, the tile, and the chunk that never
arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from syncopate.errors import UserError, WaitTimeoutError
from syncopate.language import ERROR_FIELDS, ERROR_WORDS

OUTPUT_VERSION = 2  # the transformer's kOutputVersion (include/syncopate/transform/transform.hpp)
DEFAULT_WAIT_BOUND_NS = 2_000_000_000
# Parameters whose value (or a pointer's alignment) changes between contexts or calls: a new
# value must not make Triton compile and load a new module while another kernel spins (see
# docs/ANNOTATIONS.md, launch notes).
_UNSPECIALIZED = ("sy_tiles_n", "sy_epoch", "sy_wait_bound_ns", "sy_rank", "sy_blocks")


def epoch_word(value: int = 0, device="cpu") -> torch.Tensor:
    """An int32[1] epoch word holding `value`, for kernels launched outside a PlanWorkspace
    (tests, the warm-up: value 0 makes every wait hold at once). A workspace's own word is
    `PlanWorkspace.epoch_word`, advanced on the device by each call."""
    return torch.tensor([int(value)], dtype=torch.int32, device=device)


def _csr(lists: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    offsets, items = [0], []
    for row in lists:
        items.extend(int(x) for x in row)
        offsets.append(len(items))
    return offsets, items


@dataclass
class TileTables:
    """A rank's TileOrder and SignalTable as the flat int32 arrays a transformed kernel reads."""

    tile_order: list[int]
    tiles_n: int
    wait_offsets: list[int]
    wait_slots: list[int]
    notify_offsets: list[int]
    notify_slots: list[int]
    slot_writers: list[int]
    slot_chunks: list[int]
    rank: int = 0

    @classmethod
    def from_lists(
        cls,
        tile_order: Sequence[int],
        tiles_n: int,
        tile_waits: Sequence[Sequence[int]],
        tile_notifies: Sequence[Sequence[int]],
        slot_writers: Sequence[int],
        slot_chunks: Optional[Sequence[int]] = None,
        rank: int = 0,
    ) -> "TileTables":
        """From per-tile slot lists (SignalTable.tile_waits / tile_notifies) and a tile order."""
        num_tiles = len(tile_order)
        if sorted(int(t) for t in tile_order) != list(range(num_tiles)):
            raise UserError(f"tile order: expected a permutation of 0..{num_tiles - 1}")
        for name, lists in (("tile_waits", tile_waits), ("tile_notifies", tile_notifies)):
            if len(lists) != num_tiles:
                raise UserError(f"{name}: {len(lists)} rows for {num_tiles} tiles")
            for tile, row in enumerate(lists):
                for slot in row:
                    if not 0 <= int(slot) < len(slot_writers):
                        raise UserError(f"{name}[{tile}]: slot {slot} is not one of the {len(slot_writers)} slots")
        if tiles_n < 1 or num_tiles % tiles_n != 0:
            raise UserError(f"tiles_n={tiles_n} does not divide the {num_tiles} tiles")
        wo, ws = _csr(tile_waits)
        no, ns = _csr(tile_notifies)
        chunks = list(slot_chunks) if slot_chunks is not None else [-1] * len(slot_writers)
        return cls(
            [int(t) for t in tile_order],
            int(tiles_n),
            wo,
            ws,
            no,
            ns,
            [int(w) for w in slot_writers],
            [int(c) for c in chunks],
            int(rank),
        )

    @classmethod
    def from_signal_table(cls, table: Any, tile_order: Sequence[int], tiles_n: int) -> "TileTables":
        """From the bindings' SignalTable (slots, tile_waits, tile_notifies, rank) and TileOrder."""
        order = getattr(tile_order, "tiles", tile_order)
        return cls.from_lists(
            order,
            tiles_n,
            table.tile_waits,
            table.tile_notifies,
            [s.writers for s in table.slots],
            [s.chunk for s in table.slots],
            rank=table.rank,
        )

    @classmethod
    def from_arrays(cls, arrays: Any, tile_order: Sequence[int], tiles_n: int) -> "TileTables":
        """From the bindings' SignalTableArrays (SignalTable.arrays(): CSR wait/notify tables,
        slot_writers, slot_chunk, rank) and a TileOrder (or its list of tiles)."""
        order = [int(t) for t in getattr(tile_order, "tiles", tile_order)]
        num_tiles = len(order)
        waits = [int(x) for x in arrays.wait_offsets]
        notifies = [int(x) for x in arrays.notify_offsets]
        for name, offsets in (("wait_offsets", waits), ("notify_offsets", notifies)):
            if len(offsets) != num_tiles + 1:
                raise UserError(
                    f"{name}: {len(offsets)} entries for {num_tiles} tiles (expected "
                    f"{num_tiles + 1}): the signal table and the tile order disagree"
                )
        wait_slots = [int(x) for x in arrays.wait_slots]
        notify_slots = [int(x) for x in arrays.notify_slots]
        return cls.from_lists(
            order,
            tiles_n,
            [wait_slots[waits[t] : waits[t + 1]] for t in range(num_tiles)],
            [notify_slots[notifies[t] : notifies[t + 1]] for t in range(num_tiles)],
            [int(w) for w in arrays.slot_writers],
            [int(c) for c in arrays.slot_chunk],
            rank=int(arrays.rank),
        )

    @property
    def num_tiles(self) -> int:
        return len(self.tile_order)

    def device_arrays(self, device: torch.device) -> dict[str, torch.Tensor]:
        def arr(values: list[int]) -> torch.Tensor:
            # A zero-length row list still needs a valid pointer.
            return torch.tensor(values if values else [0], dtype=torch.int32, device=device)

        return {
            "sy_tile_order": arr(self.tile_order),
            "sy_wait_offsets": arr(self.wait_offsets),
            "sy_wait_slots": arr(self.wait_slots),
            "sy_notify_offsets": arr(self.notify_offsets),
            "sy_notify_slots": arr(self.notify_slots),
            "sy_slot_writers": arr(self.slot_writers),
        }


def transformed_info(kernel: Any) -> dict:
    """The `__syncopate__` dict of the module that defines `kernel` (a JITFunction, or an
    autotuner/heuristics wrapper around one)."""
    fn = kernel
    while not hasattr(fn, "__globals__") and hasattr(fn, "fn"):
        fn = fn.fn
    info = getattr(fn, "__globals__", {}).get("__syncopate__")
    name = getattr(fn, "__name__", str(kernel))
    if info is None:
        raise UserError(
            f"{name!r} was not written by `syncopate transform`: its module has no __syncopate__ description"
        )
    if info.get("version") != OUTPUT_VERSION:
        raise UserError(
            f"kernel {info.get('kernel', name)!r} was transformed with output version "
            f"{info.get('version')}, this launcher reads version {OUTPUT_VERSION}"
        )
    if "kernels" in info:  # a file whose kernels were transformed together (--kernel a,b)
        if name not in info["kernels"]:
            raise UserError(
                f"{name!r} is not one of the kernels transformed in its module ({', '.join(info['kernels'])})"
            )
        return dict(info["kernels"][name], version=info["version"], kernel=name)
    return info


def unspecialize(kernel: Any) -> None:
    """Stops Triton from compiling a new variant when an epoch/rank/bound value changes. Once
    per kernel object (a launch calls it each time; the walk over the parameters is host time)."""
    fn = kernel
    while not hasattr(fn, "params") and hasattr(fn, "fn"):
        fn = fn.fn
    if getattr(fn, "_syncopate_unspecialized", False):
        return
    try:
        fn._syncopate_unspecialized = True
    except AttributeError:  # an object that takes no attributes: walk every time
        pass
    for p in getattr(fn, "params", []):
        if getattr(p, "name", None) in _UNSPECIALIZED:
            p.do_not_specialize = True
            p.do_not_specialize_on_alignment = True


def new_error_record(device: torch.device) -> torch.Tensor:
    return torch.zeros(ERROR_WORDS, dtype=torch.int64, device=device)


def check_error(error: torch.Tensor, tables: TileTables, kernel_name: str = "kernel") -> None:
    """Raises WaitTimeoutError if a wait of the launch ran past its bound."""
    record = dict(zip(ERROR_FIELDS, (int(v) for v in error[: len(ERROR_FIELDS)].tolist())))
    if record["flag"] == 0:
        return
    slot = record["slot"]
    chunk = tables.slot_chunks[slot] if 0 <= slot < len(tables.slot_chunks) else -1
    chunk_text = f"chunk {chunk}" if chunk >= 0 else "an unknown chunk"
    raise WaitTimeoutError(
        f"{kernel_name}: rank {record['rank']}: tile {record['tile']} waited on slot {slot} "
        f"({chunk_text}) for value >= {record['expected']} but saw {record['seen']}: "
        f"{chunk_text} never arrived within the wait bound"
    )


def launch(
    kernel: Any,
    grid: Any,
    tables: TileTables,
    *args: Any,
    signals: torch.Tensor,
    epoch: "int | torch.Tensor" = 1,
    wait_bound_ns: int = DEFAULT_WAIT_BOUND_NS,
    error: Optional[torch.Tensor] = None,
    sync: bool = True,
    device_arrays: Optional[dict[str, torch.Tensor]] = None,
    blocks: Any = None,
    clear_error: bool = True,
    **kwargs: Any,
):
    """Launches a transformed kernel over `tables` and checks its waits.

    grid: None for one tile per program (one program per tile), else a Triton grid (tuple or
    callable of the meta-parameters), e.g. (NUM_SMS,) for a persistent kernel.
    signals: this rank's int32 signal slots. epoch: the int32[1] epoch word on signals' device
    (the call number, from 1), or an int from which one is made.
    device_arrays: tables.device_arrays(device) made once and reused, to save copies per call.
    blocks: the syncopate.block_tables.BlockTables of a kernel that waits per block
    (`@sy.consume_block`); required by such a kernel, refused by others.
    Returns the error record (int64[8]); with sync=False the caller checks it with check_error.
    clear_error=False leaves a given record as it is (the first timeout since the caller last
    cleared it stays, for a caller that looks at the record some calls later).
    """
    info = transformed_info(kernel)
    if signals.dtype != torch.int32:
        raise UserError(f"signals: expected an int32 tensor, got {signals.dtype}")
    device = signals.device
    if not isinstance(epoch, torch.Tensor):
        if epoch < 1:
            raise UserError(f"epoch: calls count from 1, got {epoch}")
        epoch = epoch_word(epoch, device)
    elif epoch.dtype != torch.int32 or epoch.numel() != 1 or epoch.device != device:
        raise UserError(
            f"epoch: expected an int32[1] tensor on {device}, got {epoch.dtype} {list(epoch.shape)} on {epoch.device}"
        )
    arrays = device_arrays if device_arrays is not None else tables.device_arrays(device)
    if error is None:
        error = new_error_record(device)
    elif clear_error:
        error.zero_()
    extra = dict(arrays)
    extra.update(
        sy_signals=signals,
        sy_tiles_n=tables.tiles_n,
        sy_epoch=epoch,
        sy_wait_bound_ns=int(wait_bound_ns),
        sy_rank=tables.rank,
        sy_error=error,
    )
    wants_blocks = "sy_blocks" in info["params"]
    if blocks is not None and not wants_blocks:
        raise UserError(f"kernel {info['kernel']!r} has no '@sy.consume_block': it takes no block tables")
    if blocks is None and wants_blocks:
        raise UserError(
            f"kernel {info['kernel']!r} waits per block ('@sy.consume_block'): pass its "
            "block tables (blocks=syncopate.block_tables.BlockTables...)"
        )
    if blocks is not None:
        extra.update(blocks.device_arrays(device), sy_blocks=blocks.blocks)
        if blocks.slots and max(blocks.slots) >= len(tables.slot_writers):
            raise UserError(
                f"block tables: slot {max(blocks.slots)} is not one of the "
                f"{len(tables.slot_writers)} slots of the tile tables"
            )
    missing = [p for p in info["params"] if p not in extra]
    if missing:
        raise UserError(f"kernel {info['kernel']!r} expects parameters this launcher does not provide: {missing}")
    if grid is None:
        grid = (tables.num_tiles,)
    unspecialize(kernel)
    kernel[grid](*args, **kwargs, **{p: extra[p] for p in info["params"]})
    if sync:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        check_error(error, tables, info["kernel"])
    return error
