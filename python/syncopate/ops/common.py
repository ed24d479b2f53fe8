"""What the three op contexts share: their keyword arguments, B layouts, output buffers,
process groups and the context cache of the torch custom ops. No GPU work happens here."""

from __future__ import annotations

from typing import Optional

import torch

from syncopate import _core
from syncopate.errors import UserError
from syncopate.settings import env

BACKENDS = ("copy-engine", "sm-copy", "nccl")
ALGORITHMS = ("direct", "ring", "bidir")
TILE_ORDERS = ("arrival", "row-major", "grouped")
MODES = ("auto", "fused", "sequential")
B_LAYOUTS = ("kn", "nk")
# The SMs the fused GEMM leaves free per backend, and the executor's block counts, come from
# one table in C++ (include/syncopate/sim/reserved_sms.hpp, which says how the calibration's
# backends.<b>.sms relate to it).
# SM-copy blocks the executor runs: the reserved SMs less a few for the signal kernels.
SM_COPY_BLOCKS = _core.SM_COPY_BLOCKS
# GEMM+RS / GEMM+AR add every incoming chunk with a kernel at the destination while the GEMM
# runs (docs/RUNTIME.md, "Reduce-add chunks"): its blocks.
PRODUCER_ADD_BLOCKS = _core.ADD_KERNEL_BLOCKS


def reserved_sms(backend: str, producer: bool) -> int:
    """SMs the fused GEMM leaves to the chunk backend (and, for producers, the add kernels)."""
    return _core.reserved_sms(backend, producer=producer)


# The ops' default for check=: off keeps a call asynchronous (a wait that timed out is raised by
# a later call or by check(), see OpContext.report_timeouts); SYNCOPATE_CHECK_EACH_CALL=1 makes
# every call synchronize and raise at once, as a debugging aid.
CHECK_EACH_CALL = env.check_each_call
_TMA_ALIGN_BYTES = 16


def check_choice(who: str, name: str, value, allowed) -> None:
    """UserError unless value is "auto" or one of `allowed`."""
    if value != "auto" and value not in allowed:
        raise UserError(f"{who}: {name}={value!r} is not one of {('auto',) + tuple(allowed)}")


def check_options(who: str, *, backend, algorithm, split, tile_order, mode, b_layout) -> None:
    """The constructor's configuration keywords, checked before any GPU work."""
    check_choice(who, "backend", backend, BACKENDS)
    check_choice(who, "algorithm", algorithm, ALGORITHMS)
    check_choice(who, "tile_order", tile_order, TILE_ORDERS)
    if mode not in MODES:
        raise UserError(f"{who}: mode={mode!r} is not one of {MODES}")
    if b_layout not in B_LAYOUTS:
        raise UserError(
            f"{who}: b_layout={b_layout!r} is not one of {B_LAYOUTS} "
            "(\"kn\": b is [K, N] row-major; \"nk\": b is weight.t() of a [N, K] weight)"
        )
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise UserError(f"{who}: split must be None (the simulator chooses) or an integer >= 1, got {split!r}")


def check_dims(who: str, **dims) -> None:
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserError(f"{who}: {name} must be a positive integer, got {v!r}")


def detect_b_layout(b: torch.Tensor) -> Optional[str]:
    """ "kn" when B [K, N] is contiguous, "nk" when it is the transpose view of a contiguous
    [N, K] tensor (an nn.Linear weight passed as weight.t()), None for any other strides (a
    strided view would change the kernel's specialisation from call to call)."""
    if b.is_contiguous():
        return "kn"
    if b.t().is_contiguous():
        return "nk"
    return None


def check_b_layout(who: str, b: torch.Tensor, expected: str) -> None:
    """UserError unless b has the layout the context was built (and compiled) for."""
    layout = detect_b_layout(b)
    if layout == expected:
        return
    if layout is None:
        raise UserError(
            f"{who}: b has strides {tuple(b.stride())}, neither row-major [K, N] (\"kn\") "
            "nor the transpose of a row-major [N, K] weight (\"nk\"); pass b.contiguous()"
        )
    raise UserError(
        f"{who}: b has layout {layout!r} but this context was built with "
        f"b_layout={expected!r}; build a context with b_layout={layout!r} (the kernel is "
        "compiled per layout before any call, so it cannot switch during one)"
    )


def leading_stride_aligned(rows_elems: int, dtype: torch.dtype) -> bool:
    """A row pitch of `rows_elems` elements that TMA can describe (a multiple of 16 bytes)."""
    return (rows_elems * torch.tensor([], dtype=dtype).element_size()) % _TMA_ALIGN_BYTES == 0


def check_aligned(who: str, name: str, t: torch.Tensor) -> None:
    """The kernel is compiled for 16-byte aligned pointers; another alignment would make Triton
    compile a new variant during a call (while a peer may spin), so it is refused."""
    if t.data_ptr() % _TMA_ALIGN_BYTES != 0:
        raise UserError(
            f"{who}: {name} starts at an address that is not 16-byte aligned; pass a "
            f"freshly allocated (or .clone()d) tensor"
        )


def check_out(out, shape, dtype, device, who):
    """`out` if it fits (shape, dtype, device, contiguous, 16-byte aligned), a new tensor if None."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device or not out.is_contiguous():
        raise UserError(
            f"{who}: out must be a contiguous {list(shape)} {dtype} tensor on {device}, got "
            f"{list(out.shape)} {out.dtype} on {out.device}"
        )
    check_aligned(who, "out", out)
    return out


def group_rank_world(group, *, none_is_world: bool = False):
    """(group, rank, world); (None, 0, 1) without torch.distributed. group=None means one rank
    (the op contexts: `AgGemm(None, ...)`), or with none_is_world torch.distributed's default
    group, as torch.distributed's own calls read it (the functional attention ops)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None, 0, 1
    if group is None:
        if not none_is_world:
            return None, 0, 1
        group = dist.group.WORLD
    return group, dist.get_rank(group), dist.get_world_size(group)


def ranks_sharing_a_device(group, device) -> Optional[tuple]:
    """(rank, rank, device name) of two ranks of `group` on one GPU (NCCL refuses them; the
    copy-engine and SM-copy backends work there through CUDA IPC), or None. Collective."""
    import socket

    import torch.distributed as dist

    if group is None or dist.get_world_size(group) < 2:
        return None
    mine = (
        socket.gethostname(),
        str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else f"{device}",
    )
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    seen = {}
    for r, where in enumerate(everyone):
        if where in seen:
            return seen[where], r, where[1]
        seen[where] = r
    return None


def refuse_gloo_capture(who: str, group, device) -> None:
    """Raises UserError if the current stream is being captured and `group` would run a CUDA
    collective over gloo (the tests with ranks sharing one GPU): gloo stages CUDA tensors through
    host memory on its own threads, which a CUDA graph cannot record."""
    if device.type != "cuda" or group is None or not torch.cuda.is_current_stream_capturing():
        return
    import torch.distributed as dist

    if dist.get_backend(group) == "gloo":
        raise UserError(
            f"{who}: cannot be captured in a CUDA graph: its collective runs over gloo (ranks "
            f"sharing a GPU), which copies through host memory outside the stream; capture "
            f"with an NCCL group, or a context whose chunks use the copy engine or SM copy "
            f"(mode='fused' or mode='sequential')"
        )


def barrier(group, device):
    import torch.distributed as dist

    if group is not None and dist.get_world_size(group) > 1:
        dist.barrier(group=group, device_ids=[device.index] if device.type == "cuda" else None)


# Contexts made by forward(), by process group name and shapes: a cache, so that repeated calls
# reuse their buffers and compiled kernels (the torch custom op cannot carry a context).
_CONTEXTS: dict = {}


def context_for(cls, group, key, **kwargs):
    """The context of class `cls` for `group` and `key`, made on first use."""
    full_key = (cls.__name__, group.group_name) + tuple(key)
    if full_key not in _CONTEXTS:
        _CONTEXTS[full_key] = cls(group, **kwargs)
    return _CONTEXTS[full_key]


def default_backend() -> str:
    """The backend of contexts made by the torch custom ops: $SYNCOPATE_BACKEND, else "auto"."""
    return env.backend


def _aligned_contiguous(t: torch.Tensor) -> torch.Tensor:
    if t.is_contiguous() and t.data_ptr() % _TMA_ALIGN_BYTES == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def forward_operands(a: torch.Tensor, b: torch.Tensor):
    """(a, b, b_layout) for the custom ops: a contiguous and aligned; b as given when its layout
    is kn or nk and it is aligned, else a contiguous copy ("kn")."""
    a = _aligned_contiguous(a)
    layout = detect_b_layout(b)
    if layout is None or b.data_ptr() % _TMA_ALIGN_BYTES != 0:
        return a, _aligned_contiguous(b), "kn"
    return a, b, layout
