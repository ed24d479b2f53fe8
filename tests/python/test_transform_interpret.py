"""Transformed kernels run by Triton's CPU interpreter match the untransformed ones.

For each golden pair (python/syncopate/kernels/examples/<f> -> tests/golden/transform/<f>):
the transformed kernel runs in a shuffled tile order with its signals already raised (for
epoch 2, so the epoch arithmetic is exercised) and must write exactly what the original writes;
a producer must leave each ready slot at epoch * writers; a slot left low must end the launch
with WaitTimeoutError naming the slot's chunk instead of hanging.
"""

import os
import sys
import types
from pathlib import Path

import pytest

# The interpreter is chosen when triton is first imported: set it before anything imports it.
os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "syncopate" / "kernels" / "examples"
GOLDEN = ROOT / "tests" / "golden" / "transform"


@pytest.fixture(autouse=True)
def _interpreter_index_fix(monkeypatch):
    """Triton 3.6's interpreter turns a scalar into an int with int(1-element array), which
    NumPy >= 2.4 refuses, so every loop with a run-time bound fails (a bug of the interpreter,
    not of the kernels): take the element explicitly."""
    from triton.runtime import interpreter

    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)


@pytest.fixture(scope="module")
def sy():
    """syncopate.language / .launch / examples.cases, from the installed package if it imports,
    else from the source tree (the transformer's Python side needs no compiled bindings)."""
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

    language = importlib.import_module("syncopate.language")
    launch = importlib.import_module("syncopate.launch")
    cases = importlib.import_module("syncopate.kernels.examples.cases")
    if not language.INTERPRET:
        pytest.skip("syncopate.language was imported before TRITON_INTERPRET=1 was set")
    yield types.SimpleNamespace(language=language, launch=launch, cases=cases)
    for k in list(sys.modules):
        if (k == "syncopate" or k.startswith("syncopate.")) and k not in saved:
            del sys.modules[k]
    sys.modules.update(saved)


def _case_ids():
    return ["ag_gemm_one_tile", "ag_gemm_tma", "persistent_gemm", "gemm_rs_producer", "rmsnorm_rows"]


def _load_pair(sy, case):
    stem = case.file[:-3]
    original = sy.cases.load_module(EXAMPLES / case.file, f"sy_test_original_{stem}")
    transformed = sy.cases.load_module(GOLDEN / case.file, f"sy_test_golden_{stem}")
    return getattr(original, case.kernel), getattr(transformed, case.kernel)


def _case(sy, name):
    return next(c for c in sy.cases.CASES if c.file == name + ".py")


@pytest.mark.parametrize("name", _case_ids())
@pytest.mark.parametrize("seed", [0, 1])
def test_transformed_matches_original(sy, name, seed):
    case = _case(sy, name)
    original, transformed = _load_pair(sy, case)
    device = torch.device("cpu")
    gen = torch.Generator().manual_seed(seed)
    ref = case.make(device, gen)
    original[ref.grid_original](*ref.args, **ref.meta)
    assert not torch.isnan(ref.tensors[ref.output]).any(), "the original kernel left tiles unwritten"

    gen = torch.Generator().manual_seed(seed)
    prob = case.make(device, gen)
    world, epoch = 4, 2
    lists = sy.cases.row_shard_slots(prob, case.role, world)
    order = sy.cases.shuffled_order(prob.tiles_m * prob.tiles_n, seed + 17)
    assert order != sorted(order)
    tables = sy.launch.TileTables.from_lists(
        order, prob.tiles_n, lists.tile_waits, lists.tile_notifies, lists.slot_writers, lists.slot_chunks, rank=1
    )
    # Consumer: every chunk has landed for this call. Producer: slots hold the last call's count.
    start = [epoch * w if case.role == "consume" else (epoch - 1) * w for w in lists.slot_writers]
    signals = torch.tensor(start, dtype=torch.int32)
    sy.launch.launch(
        transformed,
        prob.grid_transformed,
        tables,
        *prob.args,
        signals=signals,
        epoch=epoch,
        wait_bound_ns=50_000_000,
        **prob.meta,
    )
    torch.testing.assert_close(prob.tensors[prob.output], ref.tensors[ref.output], rtol=0, atol=0)
    expected = [epoch * w for w in lists.slot_writers]
    assert signals.tolist() == expected


@pytest.mark.parametrize("name", ["ag_gemm_one_tile", "persistent_gemm", "rmsnorm_rows"])
def test_missing_chunk_times_out_naming_it(sy, name):
    case = _case(sy, name)
    _, transformed = _load_pair(sy, case)
    prob = case.make(torch.device("cpu"), torch.Generator().manual_seed(5))
    world = 4
    lists = sy.cases.row_shard_slots(prob, case.role, world)
    chunks = [100 + s for s in range(world)]  # chunk ids differ from slot ids on purpose
    tables = sy.launch.TileTables.from_lists(
        sy.cases.shuffled_order(len(lists.tile_waits), 3),
        prob.tiles_n,
        lists.tile_waits,
        lists.tile_notifies,
        lists.slot_writers,
        chunks,
        rank=3,
    )
    signals = torch.ones(world, dtype=torch.int32)
    signals[2] = 0  # chunk 102 never lands
    with pytest.raises(sy.launch.WaitTimeoutError) as info:
        sy.launch.launch(
            transformed,
            prob.grid_transformed,
            tables,
            *prob.args,
            signals=signals,
            epoch=1,
            wait_bound_ns=20_000,
            **prob.meta,
        )
    message = str(info.value)
    assert "rank 3" in message
    assert "slot 2 (chunk 102)" in message
    assert "chunk 102 never arrived" in message
    assert "saw 0" in message and ">= 1" in message


def test_launcher_rejects_untransformed_kernel(sy):
    case = _case(sy, "rmsnorm_rows")
    original, _ = _load_pair(sy, case)
    prob = case.make(torch.device("cpu"), torch.Generator().manual_seed(0))
    lists = sy.cases.row_shard_slots(prob, "consume", 2)
    tables = sy.launch.TileTables.from_lists(
        list(range(prob.tiles_m)), 1, lists.tile_waits, lists.tile_notifies, lists.slot_writers
    )
    with pytest.raises(sy.launch.UserError, match="was not written by `syncopate transform`"):
        sy.launch.launch(original, None, tables, *prob.args, signals=torch.ones(2, dtype=torch.int32), **prob.meta)


def test_tables_reject_bad_order(sy):
    with pytest.raises(sy.launch.UserError, match="permutation"):
        sy.launch.TileTables.from_lists([0, 0, 1], 1, [[], [], []], [[], [], []], [1])
    with pytest.raises(sy.launch.UserError, match=r"tile_waits\[1\]: slot 5"):
        sy.launch.TileTables.from_lists([0, 1], 1, [[], [5]], [[], []], [1])


def test_tables_from_csr_arrays_match_from_lists(sy):
    arrays = types.SimpleNamespace(
        rank=2,
        wait_offsets=[0, 1, 3, 3],
        wait_slots=[0, 0, 1],
        notify_offsets=[0, 0, 0, 1],
        notify_slots=[2],
        slot_writers=[1, 1, 3],
        slot_chunk=[7, 8, 9],
    )
    order = types.SimpleNamespace(tiles=[2, 0, 1])
    tables = sy.launch.TileTables.from_arrays(arrays, order, 1)
    same = sy.launch.TileTables.from_lists([2, 0, 1], 1, [[0], [0, 1], []], [[], [], [2]], [1, 1, 3], [7, 8, 9], rank=2)
    assert tables == same
    with pytest.raises(sy.launch.UserError, match="wait_offsets: 4 entries for 2 tiles"):
        sy.launch.TileTables.from_arrays(arrays, [1, 0], 1)


def test_two_kernels_transformed_into_one_module_launch_by_name(sy, tmp_path):
    """`transform_kernels` (CLI: --kernel a,b): one module, and the launcher finds each kernel's
    parameters and accesses under its own name."""
    _core = pytest.importorskip("syncopate._core")
    case = _case(sy, "rmsnorm_rows")
    source = (EXAMPLES / case.file).read_text()
    second = source[source.index("@triton.jit") :].replace("def rmsnorm_kernel(", "def rmsnorm_kernel_b(")
    both = source + "\n\n" + second
    results = _core.transform_kernels(both, "both.py", ["rmsnorm_kernel", "rmsnorm_kernel_b"])
    path = tmp_path / "both_transformed.py"
    path.write_text(results[0].source)
    module = sy.cases.load_module(path, "sy_test_two_kernels")
    original = getattr(sy.cases.load_module(EXAMPLES / case.file, "sy_test_two_original"), case.kernel)
    ref = case.make(torch.device("cpu"), torch.Generator().manual_seed(3))
    original[ref.grid_original](*ref.args, **ref.meta)
    for name in ("rmsnorm_kernel", "rmsnorm_kernel_b"):
        kernel = getattr(module, name)
        info = sy.launch.transformed_info(kernel)
        assert info["kernel"] == name and info["accesses"][0]["param"] == "x_ptr"
        prob = case.make(torch.device("cpu"), torch.Generator().manual_seed(3))
        lists = sy.cases.row_shard_slots(prob, "consume", 2)
        tables = sy.launch.TileTables.from_lists(
            sy.cases.shuffled_order(prob.tiles_m, 5), 1, lists.tile_waits, lists.tile_notifies, lists.slot_writers
        )
        sy.launch.launch(kernel, None, tables, *prob.args, signals=torch.ones(2, dtype=torch.int32), **prob.meta)
        torch.testing.assert_close(prob.tensors["y"], ref.tensors["y"], rtol=0, atol=0)
    module.__syncopate__["kernels"].pop("rmsnorm_kernel_b")
    with pytest.raises(sy.launch.UserError, match="is not one of the kernels transformed in its module"):
        sy.launch.transformed_info(module.rmsnorm_kernel_b)
