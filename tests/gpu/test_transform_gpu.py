"""Transformed kernels on one GPU, with chunks that really arrive late and out of order.

Consumers: the communicated tensor starts poisoned (NaN); while the transformed kernel spins, the
host, after random delays, has a second stream copy each row shard in (cudaMemcpyAsync, a copy
engine) and then raise its signal with cuStreamWriteValue32, shards in a random order. No SM
is needed to raise a signal, so spinning tiles cannot starve the "communication". The output
must equal the untransformed kernel's, bit for bit, over two epochs without a reset.
Producer (GEMM+RS): a second stream waits on each ready slot (cuStreamWaitValue32 >= epoch *
writers) and then copies that shard of C out, as the chunk leaving would; the copies must
equal the reference, so a notify that came before the tile's stores were visible fails.
A chunk that never arrives must end the kernel within about the wait bound with an error
naming that chunk. Everything that runs while a waiter spins is warmed up first (module loads
wait for the device: docs/RUNTIME.md, "Warm-up").
"""

import random
import sys
import time
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
driver = pytest.importorskip("cuda.bindings.driver")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "syncopate" / "kernels" / "examples"
GOLDEN = ROOT / "tests" / "golden" / "transform"
WORLD = 4
CHUNK_BASE = 40  # chunk ids differ from slot ids, so a message naming the chunk is checked


@pytest.fixture(scope="module")
def sy():
    try:
        import syncopate  # noqa: F401
    except ImportError:  # the bindings are not built here: the Python side does not need them
        for k in list(sys.modules):
            if k == "syncopate" or k.startswith("syncopate."):
                del sys.modules[k]
        package = types.ModuleType("syncopate")
        package.__path__ = [str(ROOT / "python" / "syncopate")]
        sys.modules["syncopate"] = package
    import importlib

    import triton

    # Tensor descriptors made on the device (ag_gemm_tma) need scratch memory from an allocator.
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    return types.SimpleNamespace(
        launch=importlib.import_module("syncopate.launch"),
        cases=importlib.import_module("syncopate.kernels.examples.cases"),
    )


def _check(result):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return result


def _write_value(stream, tensor, index, value):
    addr = tensor.data_ptr() + index * tensor.element_size()
    _check(
        driver.cuStreamWriteValue32(
            driver.CUstream(stream.cuda_stream),
            driver.CUdeviceptr(addr),
            value,
            driver.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT,
        )
    )


def _wait_value(stream, tensor, index, value):
    addr = tensor.data_ptr() + index * tensor.element_size()
    _check(
        driver.cuStreamWaitValue32(
            driver.CUstream(stream.cuda_stream),
            driver.CUdeviceptr(addr),
            value,
            driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ,
        )
    )


def _setup(sy, name, seed):
    case = next(c for c in sy.cases.CASES if c.file == name + ".py")
    stem = case.file[:-3]
    original = getattr(sy.cases.load_module(EXAMPLES / case.file, f"gpu_original_{stem}"), case.kernel)
    transformed = getattr(sy.cases.load_module(GOLDEN / case.file, f"gpu_golden_{stem}"), case.kernel)
    device = torch.device("cuda")
    ref = case.make(device, torch.Generator().manual_seed(seed))
    original[ref.grid_original](*ref.args, **ref.meta)
    torch.cuda.synchronize()
    assert not torch.isnan(ref.tensors[ref.output]).any()
    prob = case.make(device, torch.Generator().manual_seed(seed))
    lists = sy.cases.row_shard_slots(prob, case.role, WORLD)
    order = sy.cases.shuffled_order(prob.tiles_m * prob.tiles_n, seed + 101)
    tables = sy.launch.TileTables.from_lists(
        order,
        prob.tiles_n,
        lists.tile_waits,
        lists.tile_notifies,
        lists.slot_writers,
        [CHUNK_BASE + s for s in range(WORLD)],
        rank=0,
    )
    return case, transformed, ref, prob, tables


def _even(size, parts, index):
    base, rem = divmod(size, parts)
    begin = index * base + min(index, rem)
    return begin, base + (1 if index < rem else 0)


def _run_consumer(
    sy, case, transformed, prob, tables, epoch, signals, source, rng, skip_slot=None, bound_ns=2_000_000_000
):
    """One call: poison the input, launch, deliver shards late and shuffled, then sync."""
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    dst = prob.tensors[case.tensor]
    dst.fill_(float("nan"))
    prob.tensors[prob.output].fill_(float("nan"))
    poisoned = torch.cuda.Event()
    poisoned.record(main)
    side.wait_event(poisoned)
    arrays = tables.device_arrays(dst.device)
    error = sy.launch.new_error_record(dst.device)
    torch.cuda.synchronize()
    start = time.monotonic()
    sy.launch.launch(
        transformed,
        prob.grid_transformed,
        tables,
        *prob.args,
        signals=signals,
        epoch=epoch,
        wait_bound_ns=bound_ns,
        error=error,
        sync=False,
        device_arrays=arrays,
        **prob.meta,
    )
    slots = list(range(WORLD))
    rng.shuffle(slots)
    for slot in slots:
        time.sleep(rng.uniform(0.0, 0.003))
        if slot == skip_slot:
            continue
        b, n = _even(prob.rows, WORLD, slot)
        with torch.cuda.stream(side):
            dst[b : b + n].copy_(source[b : b + n], non_blocking=True)
        _write_value(side, signals, slot, epoch * tables.slot_writers[slot])
    torch.cuda.synchronize()
    elapsed = time.monotonic() - start
    return error, elapsed


@pytest.mark.parametrize("name", ["ag_gemm_one_tile", "ag_gemm_tma", "persistent_gemm", "rmsnorm_rows"])
def test_consumer_with_late_shuffled_chunks(sy, name):
    case, transformed, ref, prob, tables = _setup(sy, name, seed=7)
    source = prob.tensors[case.tensor].clone()
    signals = torch.zeros(WORLD, dtype=torch.int32, device="cuda")
    rng = random.Random(11)
    # Epoch 1 compiles and loads the kernel inside launch(), before anything spins; the copies
    # and value writes need no module. Epochs 2 and 3 reuse it (launch() turns off Triton's
    # specialisation on sy_epoch, so a new epoch value compiles nothing).
    for epoch in (1, 2, 3):
        error, _ = _run_consumer(sy, case, transformed, prob, tables, epoch, signals, source, rng)
        sy.launch.check_error(error, tables, case.kernel)
        torch.testing.assert_close(prob.tensors[prob.output], ref.tensors[ref.output], rtol=0, atol=0)
        assert signals.tolist() == [epoch] * WORLD


@pytest.mark.parametrize("name", ["ag_gemm_one_tile", "rmsnorm_rows"])
def test_chunk_that_never_arrives_ends_the_kernel(sy, name):
    case, transformed, ref, prob, tables = _setup(sy, name, seed=3)
    source = prob.tensors[case.tensor].clone()
    signals = torch.zeros(WORLD, dtype=torch.int32, device="cuda")
    rng = random.Random(5)
    error, _ = _run_consumer(sy, case, transformed, prob, tables, 1, signals, source, rng)  # warm-up
    sy.launch.check_error(error, tables, case.kernel)
    bound_ns = 200_000_000
    error, elapsed = _run_consumer(
        sy, case, transformed, prob, tables, 2, signals, source, rng, skip_slot=2, bound_ns=bound_ns
    )
    with pytest.raises(sy.launch.WaitTimeoutError) as info:
        sy.launch.check_error(error, tables, case.kernel)
    message = str(info.value)
    assert f"slot 2 (chunk {CHUNK_BASE + 2})" in message, message
    assert f"chunk {CHUNK_BASE + 2} never arrived" in message, message
    assert "saw 1" in message and ">= 2" in message, message
    # One bound plus launch and host delays; far from a hang.
    assert elapsed < bound_ns / 1e9 + 1.5, f"the kernel took {elapsed:.3f} s to give up"


def test_producer_chunks_leave_after_their_tiles(sy):
    case, transformed, ref, prob, tables = _setup(sy, "gemm_rs_producer", seed=9)
    writers = tables.slot_writers
    signals = torch.zeros(WORLD, dtype=torch.int32, device="cuda")
    out = torch.empty_like(prob.tensors["c"])
    side = torch.cuda.Stream()
    rng = random.Random(2)
    arrays = tables.device_arrays(signals.device)
    error = sy.launch.new_error_record(signals.device)
    # Warm-up (epoch 1) with no stream waiting: a stream blocked in cuStreamWaitValue32 while the
    # first launch loads its module would deadlock the load (it waits for the device).
    sy.launch.launch(
        transformed,
        prob.grid_transformed,
        tables,
        *prob.args,
        signals=signals,
        epoch=1,
        error=error,
        device_arrays=arrays,
        **prob.meta,
    )
    assert signals.tolist() == writers
    for epoch in (2, 3):
        c = prob.tensors["c"]
        c.fill_(float("nan"))
        out.fill_(float("nan"))
        sy.launch.launch(
            transformed,
            prob.grid_transformed,
            tables,
            *prob.args,
            signals=signals,
            epoch=epoch,
            error=error,
            sync=False,
            device_arrays=arrays,
            **prob.meta,
        )
        slots = list(range(WORLD))
        rng.shuffle(slots)
        for slot in slots:  # each shard leaves once its tiles are written and announced
            b, n = _even(prob.rows, WORLD, slot)
            _wait_value(side, signals, slot, epoch * writers[slot])
            with torch.cuda.stream(side):
                out[b : b + n].copy_(c[b : b + n], non_blocking=True)
        torch.cuda.synchronize()
        sy.launch.check_error(error, tables, case.kernel)
        assert signals.tolist() == [epoch * w for w in writers]
        torch.testing.assert_close(out, ref.tensors["c"], rtol=0, atol=0)


# The fused GEMM as the ops run it (kernels/gemm.py's gemm_tma_kernel through the transformer;
# C stored with plain stores, as a GEMM+RS producer). (BLOCK_M, BLOCK_N, EPILOGUE_SPLIT,
# num_warps, warp_specialize): the 128x256 block with 8 warps and the 128x128 one with 4.
FUSED_CONFIGS = [(128, 256, 2, 8, True), (128, 256, 2, 8, False), (128, 128, 1, 4, False)]


@pytest.mark.parametrize("config", FUSED_CONFIGS, ids=lambda c: f"{c[0]}x{c[1]}_w{c[3]}_ws{int(c[4])}")
def test_each_tile_of_the_fused_gemm_raises_its_own_slots(sy, config):
    """Every tile notifies a slot of its own, and a persistent program runs several tiles with a
    K loop of several steps (flattened and pipelined by Triton): after each call every slot must
    hold the epoch exactly. A notify that read another tile's row (the next tile's: what a
    notify row carried from the previous iteration gave under Triton's loop fusion, see
    src/transform/placement.cpp) leaves slots at 0 and raises others twice."""
    import importlib

    block_m, block_n, split, warps, ws = config
    fused = importlib.import_module("syncopate.ops.fused_gemm")
    kernel = fused.transformed_kernel("gemm_tma_kernel")
    m, n, k = 1024, 1024, 512  # 8 K-steps of 64 per tile
    tiles_m, tiles_n = m // block_m, n // block_n
    tiles = tiles_m * tiles_n
    programs = 5  # several tiles per program, not evenly
    gen = torch.Generator().manual_seed(21)
    a = torch.randn(m, k, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    ref = (a.float() @ b.float()).to(torch.bfloat16)
    order = sy.cases.shuffled_order(tiles, 31)
    tables = sy.launch.TileTables.from_lists(
        order, tiles_n, [[] for _ in range(tiles)], [[t] for t in range(tiles)], [1] * tiles
    )
    signals = torch.zeros(tiles, dtype=torch.int32, device="cuda")
    arrays = tables.device_arrays(signals.device)
    error = sy.launch.new_error_record(signals.device)
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    for epoch in (1, 2):
        c.fill_(float("nan"))
        sy.launch.launch(
            kernel,
            (programs,),
            tables,
            a,
            b,
            c,
            m,
            n,
            k,
            k,
            n,
            n,
            programs,
            signals=signals,
            epoch=epoch,
            error=error,
            device_arrays=arrays,
            B_IS_NK=False,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            BLOCK_K=64,
            GROUP_M=8,
            EPILOGUE_SPLIT=split,
            WARP_SPECIALIZE=ws,
            FLATTEN=True,
            C_STORE_POINTERS=True,
            num_warps=warps,
            num_stages=3,
        )
        sy.launch.check_error(error, tables, "gemm_tma_kernel")
        wrong = {t: v for t, v in enumerate(signals.tolist()) if v != epoch}
        assert not wrong, f"epoch {epoch}: slots (one per tile) not at {epoch}: {wrong}"
        torch.testing.assert_close(c.float(), ref.float(), rtol=2e-2, atol=2e-1)
