"""syncopate.language with hooks, for `syncopate.check` (Triton's interpreter only).

A kernel transformed for checking imports this module as `syl`. Its `wait_tile`,
`wait_for_tile`, `wait_for_tile_row`, `notify_tile` and `notify_tile_row` first tell the run being checked which tile is about to wait or notify (the hook
is plain Python: under TRITON_INTERPRET=1 a kernel is Python code, so it may call it), then do
what syncopate.language does. The run lands a late chunk when its first waiter arrives, and
checks a tile's stores when it notifies.
"""

import triton

from syncopate import language as _sites
from syncopate.language import *  # noqa: F401,F403  (everything else is unchanged)
from syncopate.language import epoch_of, notify_row, tma_store_wait, tma_store_wait_row, wait_row  # noqa: F401

# Runs being checked, by the address of their signal array (each run has its own).
_RUNS: dict = {}


def _scalar(value) -> int:
    """An int from an interpreter tensor (or a plain int)."""
    handle = getattr(value, "handle", None)
    data = getattr(handle, "data", value)
    try:
        return int(data.reshape(-1)[0])
    except AttributeError:
        return int(data)


def _run_of(signals_ptr):
    run = _RUNS.get(_scalar(signals_ptr))
    if run is None:
        raise RuntimeError(
            "syncopate._check_sites: a kernel transformed for checking ran outside "
            "syncopate.check (no run registered for its signals)"
        )
    return run


def _on_wait(signals_ptr, tile):
    _run_of(signals_ptr).on_wait(_scalar(tile))


def _on_notify(signals_ptr, tile):
    _run_of(signals_ptr).on_notify(_scalar(tile))


@triton.jit
def wait_tile(signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch, bound_ns, rank, error_ptr):
    _on_wait(signals_ptr, tile)
    _sites.wait_tile(
        signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch, bound_ns, rank, error_ptr
    )


@triton.jit
def wait_for_tile(
    signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch, bound_ns, rank, error_ptr, seen
):
    _on_wait(signals_ptr, tile)
    return _sites.wait_for_tile(
        signals_ptr, wait_offsets_ptr, wait_slots_ptr, slot_writers_ptr, tile, epoch, bound_ns, rank, error_ptr, seen
    )


@triton.jit
def notify_tile(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile):
    _on_notify(signals_ptr, tile)
    _sites.notify_tile(signals_ptr, notify_offsets_ptr, notify_slots_ptr, tile)


@triton.jit
def notify_tile_row(signals_ptr, notify_slots_ptr, tile, begin, end):
    _on_notify(signals_ptr, tile)
    _sites.notify_tile_row(signals_ptr, notify_slots_ptr, tile, begin, end)


@triton.jit
def wait_for_tile_row(
    signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
):
    _on_wait(signals_ptr, tile)
    return _sites.wait_for_tile_row(
        signals_ptr, wait_slots_ptr, slot_writers_ptr, tile, begin, end, epoch, bound_ns, rank, error_ptr, seen
    )
