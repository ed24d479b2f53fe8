"""Shared fixtures of the CPU-side Python tests (no GPU, no driver needed)."""

import pytest

# Bind `syncopate` to the installed package before any test module runs: a test that puts the
# source tree's python/ on sys.path (to load pure-Python kernels) must not make later tests
# import the uncompiled source copy. If it is not installed, the tests that need it fail on
# their own imports with the package's message.
try:
    import syncopate  # noqa: F401
except ImportError:
    pass


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
