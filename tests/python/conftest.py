"""Shared fixtures of the CPU-side Python tests (no GPU, no driver needed), the compile-for-sm_90
helper, and the test-order options scripts/test.sh uses to show no test depends on order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# This suite runs kernels in Triton's CPU interpreter, which Triton picks when it is first
# imported. Set here, before any test module imports triton, so that which module happens to be
# collected first never decides it (several modules also set it, for running them alone).
os.environ["TRITON_INTERPRET"] = "1"

# Bind `syncopate` to the installed package before any test module runs: a test that puts the
# source tree's python/ on sys.path (to load pure-Python kernels) must not make later tests
# import the uncompiled source copy. If it is not installed, the tests that need it fail on
# their own imports with the package's message.
try:
    import syncopate

    PACKAGE_ROOT = str(Path(syncopate.__file__).resolve().parents[1])  # where it is installed
except ImportError:
    PACKAGE_ROOT = None

HERE = Path(__file__).resolve().parent


# The test-order options (--test-order, --outcomes-out, --outcomes-compare): order_plugin.py.
from order_plugin import pytest_addoption, pytest_configure  # noqa: E402,F401  (hooks)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def run_compile_script():
    """run(script, *args, timeout=s, cache_dir=None): runs a compile script of this directory
    (compile_*.py) in a child Python without TRITON_INTERPRET; returns its CompletedProcess.

    Never compile for a GPU target in the test process: once any test has run a kernel in the
    interpreter, triton.language may stay patched (Triton 3.6's interpreter does not undo what
    it patches for a jit function called from a kernel, e.g. tl.cdiv), and the code generator
    then fails on its own IR values. Skips where Triton has no NVIDIA backend with ptxas.
    """
    import importlib.util

    pytest.importorskip("triton")
    spec = importlib.util.find_spec("triton.backends.nvidia")
    ptxas = Path(spec.origin).parent / "bin" / "ptxas" if spec and spec.origin else None
    if ptxas is None or not ptxas.exists():
        pytest.skip("this triton has no NVIDIA backend with ptxas, so nothing can compile for sm_90")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # The installed syncopate first: sys.path may also hold the source tree's python/, which has
    # no compiled modules.
    first = [PACKAGE_ROOT] if PACKAGE_ROOT else []
    env["PYTHONPATH"] = os.pathsep.join(first + [str(HERE)] + [p for p in sys.path if p])

    def run(script: str, *args: str, timeout: float, cache_dir: Path | None = None) -> subprocess.CompletedProcess:
        """cache_dir: Triton's cache for this run (default: the one this process would use)."""
        child_env = dict(env, TRITON_CACHE_DIR=str(cache_dir)) if cache_dir is not None else env
        return subprocess.run(
            [sys.executable, str(HERE / script), *args], env=child_env, capture_output=True, text=True, timeout=timeout
        )

    return run


@pytest.fixture
def single_rank_group():
    """A one-rank gloo process group on the CPU, torn down after the test.

    The public op functions read the world size and group name from a real ProcessGroup; one
    rank is all a CPU machine can host, and tests needing a larger world call the
    torch.ops.syncopate.* ops directly with an explicit world_size.
    """
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    if dist.is_initialized():
        pytest.fail("a previous test left a process group initialized")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.fixture
def fake_mode():
    """A FakeTensorMode: tensors with shapes, dtypes and (CUDA) devices but no storage."""
    pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode
