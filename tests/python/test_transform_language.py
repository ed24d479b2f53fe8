"""syncopate.language primitives under Triton's CPU interpreter: put, symm_at, wait, notify.

symm_at is checked with two host tensors standing for two ranks' symmetric heaps: a pointer
into "rank 0"'s heap, translated to "rank 1", must address the same offset there.
"""

import os
import sys
import types
from pathlib import Path

import pytest

os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
pytest.importorskip("numpy")
import triton.language as tl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _interpreter_index_fix(monkeypatch):
    """Triton 3.6's interpreter calls int() on 1-element arrays, which NumPy >= 2.4 refuses."""
    from triton.runtime import interpreter

    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


syl = None  # syncopate.language, set by the fixture: jitted kernels resolve it as a global


@pytest.fixture(scope="module")
def language():
    saved = {k: v for k, v in sys.modules.items() if k == "syncopate" or k.startswith("syncopate.")}
    try:
        import syncopate  # noqa: F401
    except ImportError:
        for k in list(sys.modules):
            if k == "syncopate" or k.startswith("syncopate."):
                del sys.modules[k]
        package = types.ModuleType("syncopate")
        package.__path__ = [str(ROOT / "python" / "syncopate")]
        sys.modules["syncopate"] = package
    import importlib

    global syl
    syl = importlib.import_module("syncopate.language")
    yield syl
    for k in list(sys.modules):
        if (k == "syncopate" or k.startswith("syncopate.")) and k not in saved:
            del sys.modules[k]
    sys.modules.update(saved)


def test_put_copies_a_ragged_length(language):
    @triton.jit
    def copy_kernel(dst, src, n, BLOCK: tl.constexpr):
        syl.put(dst, src, n, BLOCK)

    src = torch.arange(37, dtype=torch.float32)
    dst = torch.full((40,), -1.0)
    copy_kernel[(1,)](dst, src, 37, BLOCK=16)
    assert torch.equal(dst[:37], src)
    assert torch.equal(dst[37:], torch.full((3,), -1.0))


def test_symm_at_translates_between_heaps(language):
    @triton.jit
    def poke(local_heap, bases, offset, value, peer):
        remote = syl.symm_at(local_heap + offset, bases, 0, peer)
        tl.store(remote, value)

    heap0 = torch.zeros(16, dtype=torch.int32)
    heap1 = torch.zeros(16, dtype=torch.int32)
    bases = torch.tensor([heap0.data_ptr(), heap1.data_ptr()], dtype=torch.int64)
    poke[(1,)](heap0, bases, 5, 42, 1)
    assert heap1.tolist()[5] == 42 and heap0.sum() == 0
    poke[(1,)](heap0, bases, 2, 7, 0)  # to itself: the same address
    assert heap0.tolist()[2] == 7


def test_wait_returns_when_raised_and_notify_adds(language):
    @triton.jit
    def wait_then_notify(signals, error, out):
        ok = syl.wait(signals + 0, 3, 1_000_000, error, 0, 0, 0)
        tl.store(out, ok)
        syl.notify(signals + 1, 2)

    signals = torch.tensor([3, 10], dtype=torch.int32)
    error = torch.zeros(syl.ERROR_WORDS, dtype=torch.int64)
    out = torch.zeros(1, dtype=torch.int32)
    wait_then_notify[(4,)](signals, error, out)
    assert out.item() == 1
    assert signals.tolist() == [3, 18]  # four programs, +2 each
    assert error.tolist() == [0] * syl.ERROR_WORDS


def test_wait_times_out_and_records_once(language):
    @triton.jit
    def waiter(signals, error, out):
        pid = tl.program_id(0)
        ok = syl.wait(signals + 1, 5, 30_000, error, 6, 1, pid + 100)
        tl.store(out + pid, ok)

    signals = torch.tensor([0, 4], dtype=torch.int32)
    error = torch.zeros(syl.ERROR_WORDS, dtype=torch.int64)
    out = torch.full((3,), 9, dtype=torch.int32)
    waiter[(3,)](signals, error, out)
    assert out.tolist() == [0, 0, 0]
    record = dict(zip(syl.ERROR_FIELDS, error.tolist()))
    # The first program timed out and wrote the record; the others saw the flag and gave up.
    assert record == {"flag": 1, "rank": 6, "slot": 1, "expected": 5, "seen": 4, "tile": 100}


def test_wait_for_tile_returns_the_tile_and_notify_tile_adds_once_per_program(language):
    """The interpreter form of the tile-lookup wait (the GPU's is one PTX block with the same
    contract, checked on the GPU by tests/gpu/test_transform_gpu.py): it returns the tile it is
    given (and `seen` as given: the slot cache is the GPU form's) once the tile's slots (CSR row `tile`) reach epoch * writers, and records a timeout
    naming the tile; notify_tile adds 1 to each slot of the tile's notify row."""

    @triton.jit
    def consume_then_produce(
        signals, wait_offsets, wait_slots, writers, epoch, error, out, notify_offsets, notify_slots
    ):
        pid = tl.program_id(0)
        tile, seen = syl.wait_for_tile(
            signals, wait_offsets, wait_slots, writers, pid, epoch, 30_000, 3, error, syl.no_slot_seen()
        )
        tl.store(out + pid, tile * 10 + seen)
        syl.notify_tile(signals, notify_offsets, notify_slots, tile)

    # Tile 0 waits on slots 0 and 1, tile 1 on nothing, tile 2 on slot 2 (which stays short).
    wait_offsets = torch.tensor([0, 2, 2, 3], dtype=torch.int32)
    wait_slots = torch.tensor([0, 1, 2], dtype=torch.int32)
    writers = torch.tensor([1, 2, 1, 1], dtype=torch.int32)
    epoch = torch.tensor([2], dtype=torch.int32)
    notify_offsets = torch.tensor([0, 1, 1, 2], dtype=torch.int32)
    notify_slots = torch.tensor([3, 3], dtype=torch.int32)
    signals = torch.tensor([2, 4, 1, 0], dtype=torch.int32)
    error = torch.zeros(syl.ERROR_WORDS, dtype=torch.int64)
    out = torch.full((3,), -1, dtype=torch.int32)
    consume_then_produce[(3,)](
        signals, wait_offsets, wait_slots, writers, epoch, error, out, notify_offsets, notify_slots
    )
    assert out.tolist() == [-1, 9, 19]  # the interpreter's form keeps `seen` as given (-1)
    assert signals.tolist() == [2, 4, 1, 2]  # tiles 0 and 2 each notify slot 3 once
    record = dict(zip(syl.ERROR_FIELDS, error.tolist()))
    assert record == {"flag": 1, "rank": 3, "slot": 2, "expected": 2, "seen": 1, "tile": 2}


def test_the_row_forms_read_the_rows_they_are_given(language):
    """notify_row / wait_row load a tile's CSR rows; wait_for_tile_row, notify_tile_row and
    tma_store_wait_row act on the rows given (loaded earlier: at the tile lookup, or one tile
    ahead), so each must behave exactly as wait_for_tile / notify_tile on the tile's own row."""

    @triton.jit
    def by_rows(signals, wait_offsets, wait_slots, writers, epoch_ptr, error, out, notify_offsets, notify_slots):
        pid = tl.program_id(0)
        epoch = syl.epoch_of(epoch_ptr)
        wb, we = syl.wait_row(wait_offsets, pid)
        nb, ne = syl.notify_row(notify_offsets, pid)
        tile, seen = syl.wait_for_tile_row(signals, wait_slots, writers, pid, wb, we, epoch, 30_000, 3, error, -1)
        tl.store(out + pid * 4, tile)
        tl.store(out + pid * 4 + 1, (tl.load(wait_offsets + pid) == wb) & (tl.load(notify_offsets + pid + 1) == ne))
        tl.store(out + pid * 4 + 2, we - wb)
        tl.store(out + pid * 4 + 3, ne - nb)
        syl.tma_store_wait_row(nb, ne)  # a no-op under the interpreter (stores are synchronous)
        syl.notify_tile_row(signals, notify_slots, tile, nb, ne)

    # As the wait_for_tile test: tile 0 waits on slots 0 and 1, tile 1 on nothing, tile 2 on slot
    # 2 (which stays short); tiles 0 and 2 notify slot 3.
    wait_offsets = torch.tensor([0, 2, 2, 3], dtype=torch.int32)
    wait_slots = torch.tensor([0, 1, 2], dtype=torch.int32)
    writers = torch.tensor([1, 2, 1, 1], dtype=torch.int32)
    epoch = torch.tensor([2], dtype=torch.int32)
    notify_offsets = torch.tensor([0, 1, 1, 2], dtype=torch.int32)
    notify_slots = torch.tensor([3, 3], dtype=torch.int32)
    signals = torch.tensor([2, 4, 1, 0], dtype=torch.int32)
    error = torch.zeros(syl.ERROR_WORDS, dtype=torch.int64)
    out = torch.full((12,), -1, dtype=torch.int32)
    by_rows[(3,)](signals, wait_offsets, wait_slots, writers, epoch, error, out, notify_offsets, notify_slots)
    assert out.view(3, 4).tolist() == [[0, 1, 2, 1], [1, 1, 0, 0], [2, 1, 1, 1]]
    assert signals.tolist() == [2, 4, 1, 2]  # tiles 0 and 2 each notify slot 3 once
    record = dict(zip(syl.ERROR_FIELDS, error.tolist()))
    assert record == {"flag": 1, "rank": 3, "slot": 2, "expected": 2, "seen": 1, "tile": 2}
