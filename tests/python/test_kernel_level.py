"""Kernel-level mode on the CPU: occupancy arithmetic through the bindings, the padded Triton
kernel's metadata, the simulator's kernel-level shaping model (monotonic where it must be), the
API's argument checks, and the shaped GEMM under the Triton interpreter (no residency there).
The GPU half is tests/gpu/test_kernel_level_gpu.py."""

from __future__ import annotations

import os

import pytest

sy = pytest.importorskip("syncopate")
torch = pytest.importorskip("torch")

from syncopate.errors import UserError  # noqa: E402


def _runtime():
    try:
        from syncopate import _runtime
    except ImportError as error:  # a build without the CUDA toolkit has no _runtime
        pytest.skip(f"syncopate._runtime not built: {error}")
    return _runtime


def hopper_limits(rt):
    limits = rt.SmLimits()
    limits.smem_per_sm = 228 * 1024
    limits.smem_per_block_optin = 227 * 1024
    limits.reserved_smem_per_block = 1024
    limits.max_blocks_per_sm = 32
    limits.max_threads_per_sm = 2048
    limits.registers_per_sm = 65536
    limits.registers_per_block = 65536
    return limits


# -- occupancy arithmetic (the C++ is unit-tested in tests/unit/runtime/occupancy_test.cpp) ------


def test_bindings_shape_a_two_block_kernel_to_one():
    rt = _runtime()
    kernel = rt.KernelResources(128, 128, 0, 114688)
    blocks, limit, per_block = rt.resident_blocks(kernel, hopper_limits(rt))
    assert (blocks, limit, per_block) == (2, "shared memory", 114688 + 1024)
    shaping = rt.shape_for_residency(kernel, hopper_limits(rt), 1)
    assert shaping.ok and shaping.blocks == 1 and shaping.natural_blocks == 2
    assert shaping.dynamic_smem == 116864 - 1024
    assert shaping.extra_dynamic_smem == shaping.dynamic_smem - 114688


def test_bindings_refuse_raising_residency_with_the_reason():
    rt = _runtime()
    shaping = rt.shape_for_residency(rt.KernelResources(256, 128, 0, 180224), hopper_limits(rt), 2)
    assert not shaping.ok
    assert "shaping can only lower residency" in shaping.reason
    with pytest.raises(UserError, match="target residency: expected >= 1"):
        rt.shape_for_residency(rt.KernelResources(256, 32), hopper_limits(rt), 0)


# -- the padded Triton kernel ------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_for_sm90(run_compile_script, tmp_path_factory):
    """A CompiledKernel for sm_90 (compile_add_one.py), compiled on the CPU with Triton's ptxas in
    a child process (conftest.py's run_compile_script says why) and rebuilt here from its
    cache files; never loaded."""
    import json

    from triton.compiler import CompiledKernel

    run = run_compile_script("compile_add_one.py", timeout=300, cache_dir=tmp_path_factory.mktemp("triton-cache"))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    compiled = json.loads(run.stdout.splitlines()[-1])
    return CompiledKernel(None, compiled["metadata_group"], compiled["hash"])


def test_padded_kernel_raises_shared_and_leaves_the_original(compiled_for_sm90):
    from syncopate.kernel_level.shaped_launch import padded_kernel

    original = compiled_for_sm90
    before = (original.metadata.shared, tuple(original.packed_metadata))
    twin = padded_kernel(original, 50_000, max_per_block=227 * 1024)
    assert twin is not original
    assert twin.metadata.shared == before[0] + 50_000
    assert tuple(twin.packed_metadata) == (before[1][0], before[1][1], before[0] + 50_000)
    assert twin.module is None and twin.function is None and twin._run is None  # loads its own module
    assert (original.metadata.shared, tuple(original.packed_metadata)) == before
    assert twin.metadata.num_warps == original.metadata.num_warps and twin.name == original.name


def test_padded_kernel_refuses_bad_sizes(compiled_for_sm90):
    from syncopate.kernel_level.shaped_launch import padded_kernel

    assert padded_kernel(compiled_for_sm90, 0) is compiled_for_sm90
    with pytest.raises(UserError, match="must be >= 0 bytes"):
        padded_kernel(compiled_for_sm90, -128)
    shared = compiled_for_sm90.metadata.shared
    with pytest.raises(
        UserError, match=f"{shared} \\+ 232449 = {shared + 232449} bytes .* per-block maximum of 232448"
    ):
        padded_kernel(compiled_for_sm90, 232449, max_per_block=232448)


# -- the simulator's kernel-level shaping model ------------------------------------------------


def _predict(op="ag_gemm", backend="nccl", world=4, chunks=2, **shaping):
    calib = sy.calibration("h200")
    if op == "ag_gemm":
        plan = sy.make_plan("all-gather", world_size=world, shape=[8192, 8192], split=chunks, backend=backend)
    else:
        plan = sy.make_plan("reduce-scatter", world_size=world, shape=[8192, 8192], split=chunks, backend=backend)
    return sy.simulate(
        plan, sy.GemmShape(8192, 8192 if op == "gemm_rs" else 2048, 2048 if op == "gemm_rs" else 8192), calib, **shaping
    ).kernel_level_us


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs"])
@pytest.mark.parametrize("backend", ["nccl", "copy-engine", "sm-copy"])
def test_default_shaping_is_the_unshaped_model(op, backend):
    base = _predict(op, backend)
    assert _predict(op, backend, kernel_level_residency=0, natural_residency=1, comm_sms=-1) == base
    # Shaping to the residency the kernel already has changes nothing.
    assert _predict(op, backend, kernel_level_residency=2, natural_residency=2) == base
    assert _predict(op, backend, kernel_level_residency=5, natural_residency=2) == base


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs"])
def test_shaping_never_pays_without_communication_kernels(op):
    # The copy engine takes no SMs: a shaped kernel only loses compute.
    unshaped = _predict(op, "copy-engine")
    for r in (1, 2, 3):
        assert _predict(op, "copy-engine", kernel_level_residency=r, natural_residency=4) >= unshaped - 1e-6


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs"])
@pytest.mark.parametrize("backend", ["nccl", "sm-copy"])
def test_more_resident_blocks_never_slow_a_shaped_kernel(op, backend):
    times = [
        _predict(op, backend, kernel_level_residency=r, natural_residency=8, block_share=0.3) for r in (1, 2, 3)
    ]  # 0.3, 0.6, 0.9 of an SM
    assert times[0] >= times[1] - 1e-6 >= times[2] - 2e-6
    assert times[0] > times[2]  # and the model is not flat


@pytest.mark.parametrize("backend", ["nccl", "sm-copy"])
def test_a_larger_block_share_never_slows_a_shaped_kernel(backend):
    times = [
        _predict("ag_gemm", backend, kernel_level_residency=1, natural_residency=2, block_share=s)
        for s in (0.5, 0.7, 0.9, 1.0)
    ]
    assert all(a >= b - 1e-6 for a, b in zip(times, times[1:]))
    assert times[0] > times[-1]


def test_comm_sms_beyond_the_calibration_only_cost_compute():
    # NCCL is calibrated on 16 SMs: giving it 32 moves no byte faster and takes 16 more SMs.
    base = _predict("ag_gemm", "nccl")
    assert _predict("ag_gemm", "nccl", comm_sms=16) == pytest.approx(base)
    assert _predict("ag_gemm", "nccl", comm_sms=32) >= base - 1e-6
    # Fewer SMs: less bandwidth; communication alone gets slower.
    calib = sy.calibration("h200")
    plan = sy.make_plan("all-gather", world_size=4, shape=[8192, 8192], split=2, backend="nccl")
    gemm = sy.GemmShape(8192, 2048, 8192)
    # (kernel-level time includes compute, which gains SMs: check the timeline's last chunk instead)
    slow = sy.simulate(plan, gemm, calib, comm_sms=4).kernel_level
    fast = sy.simulate(plan, gemm, calib, comm_sms=16).kernel_level
    assert max(c.arrival for c in slow.chunks) > max(c.arrival for c in fast.chunks)


def test_bad_shaping_options_name_the_field():
    with pytest.raises(UserError, match="block_share: expected a number in \\(0, 1\\]"):
        _predict(kernel_level_residency=1, natural_residency=2, block_share=1.5)
    with pytest.raises(UserError, match="comm_sms: expected -1"):
        _predict(comm_sms=-3)
    with pytest.raises(UserError, match="comm_sms: 0 SMs leave backend nccl"):
        _predict(comm_sms=0)
    with pytest.raises(UserError, match="natural_residency"):
        _predict(natural_residency=0)


def test_choose_residency_follows_the_model():
    from syncopate.kernel_level import choose_residency

    # Nothing to shape when the kernel already fits one block per SM.
    best, predicted = choose_residency("ag_gemm", world=4, m=8192, k=8192, n=2048, chunks=2, natural_residency=1)
    assert best is None and list(predicted) == [0]
    # Copy engine: communication takes no SMs, so shaping never wins.
    best, predicted = choose_residency(
        "ag_gemm", world=4, m=8192, k=8192, n=2048, chunks=2, natural_residency=4, backend="copy-engine"
    )
    assert best is None and set(predicted) == {0, 1, 2, 3}
    # The choice is the argmin of the predictions.
    best, predicted = choose_residency("gemm_rs", world=2, m=8192, k=4096, n=8192, chunks=2, natural_residency=3)
    assert predicted[best or 0] == min(predicted.values())
    with pytest.raises(UserError, match="op='x'"):
        choose_residency("x", world=2, m=8, k=8, n=8, chunks=1, natural_residency=2)


# -- the API's checks and helpers (no NCCL needed: they fail before any group is made) ---------


def test_even_bounds_cover_the_range():
    from syncopate.kernel_level import even_bounds

    assert even_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert even_bounds(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(gemm="cutlass"), "gemm='cutlass': expected one of"),
        (dict(residency=1), "residency=1 needs gemm='triton'"),
        (dict(dtype=torch.float32), "expected torch.float16 or torch.bfloat16"),
        (dict(sm_carveout=-1), "sm_carveout=-1: expected None or >= 0"),
        (dict(chunks=0), "chunks=0: expected 1 <= chunks <= m/world = 256"),
        (dict(m=0), "m, k, n must be > 0"),
    ],
)
def test_api_rejects_bad_arguments(single_rank_group, kwargs, message):
    from syncopate.kernel_level import KernelLevelAgGemm, KernelLevelGemmRs

    args = dict(m=256, k=64, n=32, dtype=torch.bfloat16, chunks=2)
    args.update(kwargs)
    for cls in (KernelLevelAgGemm, KernelLevelGemmRs):
        with pytest.raises(UserError, match=message):
            cls(single_rank_group, **args)


def test_cublas_carveout_is_restored(monkeypatch):
    from syncopate import kernel_level

    calls = []
    state = {"carveout": None, "library": "cublas"}
    monkeypatch.setattr(torch._C, "_get_sm_carveout_experimental", lambda: state["carveout"])
    monkeypatch.setattr(
        torch._C,
        "_set_sm_carveout_experimental",
        lambda v: (calls.append(("carveout", v)), state.__setitem__("carveout", v)),
    )

    def library(backend=None):
        if backend is not None:
            calls.append(("library", backend))
            state["library"] = backend
        return state["library"]

    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", library)
    with pytest.raises(RuntimeError, match="inside"):
        with kernel_level.cublas_sm_carveout(16):
            assert state == {"carveout": 16, "library": "cublaslt"}
            raise RuntimeError("inside")
    assert state == {"carveout": None, "library": "cublas"}
    calls.clear()
    with kernel_level.cublas_sm_carveout(None):
        pass
    assert calls == []


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="runs the GEMM kernel in Triton's CPU interpreter (TRITON_INTERPRET=1)",
)
def test_shaped_gemm_in_the_interpreter_computes_a_at_b(monkeypatch):
    from triton.runtime import interpreter

    from syncopate.kernels.configs import INTERPRETER_CONFIG
    from syncopate.kernel_level.shaped_gemm import ShapedGemm

    # Triton 3.6's interpreter takes int() of a 1-element array, which NumPy >= 2.4 refuses (the
    # same workaround as test_gemm_interpret.py; float16 avoids its bf16 dot bug).
    original_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_lang_tensor)

    torch.manual_seed(0)
    a = torch.randn(70, 48).to(torch.float16)
    b = torch.randn(48, 40).to(torch.float16)
    out = torch.full((70, 40), float("nan"), dtype=torch.float16)
    g = ShapedGemm(torch.device("cpu"), residency=None, sm_carveout=1, config=INTERPRETER_CONFIG)
    g(a, b, out)
    ref = a.float() @ b.float()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 1e-2
    with pytest.raises(UserError, match="residency=1 needs CUDA tensors"):
        ShapedGemm(torch.device("cpu"), residency=1, config=INTERPRETER_CONFIG)(a, b, out)
    with pytest.raises(UserError, match="sm_carveout: expected 0 <= SMs kept free < 4"):
        ShapedGemm(torch.device("cpu"), sm_carveout=4)
