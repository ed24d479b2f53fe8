"""syncopate.runtime.resolve_device: the one place a context's device gets its index.

A context kept on an unindexed "cuda" compared unequal to every operand (whose device is always
"cuda:N") and refused every call; each op, the runtime wrappers and the layers resolve through it.
"""

import pytest

torch = pytest.importorskip("torch")

from syncopate.runtime import resolve_device  # noqa: E402


@pytest.fixture
def current_gpu_is_3(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)


@pytest.mark.parametrize("given", [None, "cuda", torch.device("cuda")])
def test_no_index_means_the_current_gpu(current_gpu_is_3, given):
    device = resolve_device(given)
    assert device == torch.device("cuda", 3)
    assert device.index == 3


@pytest.mark.parametrize("given", ["cuda:1", torch.device("cuda", 0), "cpu", torch.device("cpu")])
def test_an_indexed_or_cpu_device_is_kept(current_gpu_is_3, given):
    assert resolve_device(given) == torch.device(given)


def test_an_unindexed_context_device_would_match_no_operand():
    # Why the index matters: torch compares devices by type and index.
    assert torch.device("cuda") != torch.device("cuda", 0)
