"""The fused ops as torch custom ops (namespace ``syncopate``), so they work inside torch.compile
and under autograd.

Three ops, inputs fp16 or bf16 on one CUDA device, output of the input dtype:

    ag_gemm(a_shard [M/w, K], b [K, N])        -> all_gather(a_shard, dim 0) @ b      [M, N]
    gemm_rs(a [M, K/w], b_shard [K/w, N])      -> reduce_scatter(a @ b_shard, dim 0)  [M/w, N]
    gemm_ar(a [M, K/w], b_shard [K/w, N])      -> all_reduce(a @ b_shard)             [M, N]

and a fourth, the backward's helper: ag_gemm_gathered(a_shard, b) -> (ag_gemm(a_shard, b),
all_gather(a_shard)) [M, N], [M, K]. (w is the world size of the process group; gemm_rs and
gemm_ar need M to be a multiple of w.) Each op has a backward formula (autograd.py): the input
gradient of AG+GEMM is a GEMM+RS and that of GEMM+RS an AG+GEMM, so tensor-parallel layers train
with the dual fused op.

Each op is registered as ``torch.ops.syncopate.<op>(Tensor a, Tensor b, int world_size,
str group_name) -> Tensor``. The world size is an argument, not looked up, so the fake (meta)
implementation can give the output shape while tracing with fake tensors and no process group.
The group name NO_GROUP ("") means one rank without torch.distributed (world_size must be 1).
Both the fake and the real implementation check the arguments first and raise
syncopate.ShapeError / syncopate.UserError (both ValueErrors) naming the op, the argument and
the rule; the real one does so before any GPU work. The public functions below resolve the
process group (None: the default group, or one rank when torch.distributed is not initialized)
and call the op.

The operands live on a CUDA device; the CPU is accepted too while Triton's interpreter is on
(TRITON_INTERPRET=1), where the kernels run on the CPU (the CPU tests run the ops that way).

The GPU work itself lives in ``syncopate/ops/<op>.py`` (the runtime's context objects, which own
the symmetric buffers and compiled kernels). The contract this layer relies on:

    # in syncopate/ops/ag_gemm.py (likewise gemm_rs.py, gemm_ar.py)
    def forward(a, b, *, group):  # checked tensors, a torch.distributed ProcessGroup
        '''Finds or builds the context for (group, shapes, dtype, device) and runs the op.'''

`group` is a ProcessGroup, or at one rank without torch.distributed an object with what
forward() reads of one (`size()`, `rank()`, `group_name`; _OneRank below). ag_gemm.forward also
takes `gathered_out=` (an [M, K] tensor the call fills with the gathered A, written before the
heap can be overwritten by the next call); ag_gemm_gathered passes it.
"""

from __future__ import annotations

import importlib
from typing import Optional, Tuple

import torch

from syncopate.errors import ShapeError, UserError
from syncopate.ops.context import SUPPORTED_DTYPES
from syncopate.settings import env

__all__ = [
    "ag_gemm",
    "ag_gemm_gathered",
    "gemm_rs",
    "gemm_ar",
    "SUPPORTED_DTYPES",
    "OP_NAMES",
    "NO_GROUP",
    "group_args",
]

OP_NAMES = ("ag_gemm", "gemm_rs", "gemm_ar")
# The group name of one rank without torch.distributed (process groups are never named "").
NO_GROUP = ""

# Argument names as the public functions spell them, for error messages.
_ARG_NAMES = {
    "ag_gemm": ("a_shard", "b"),
    "ag_gemm_gathered": ("a_shard", "b"),
    "gemm_rs": ("a", "b_shard"),
    "gemm_ar": ("a", "b_shard"),
}


def _fmt_shape(t: torch.Tensor) -> str:
    # str, not int: under torch.compile with dynamic shapes a dim is a SymInt, and int() on it
    # would specialise the graph just to print a message.
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _check_operands(op: str, a: torch.Tensor, b: torch.Tensor, world_size: int) -> None:
    """The checks every op shares: 2-D operands with matching K, dtype, device, world size."""
    a_name, b_name = _ARG_NAMES[op]
    where = f"syncopate.ops.{op}"
    if isinstance(world_size, bool) or not isinstance(world_size, (int, torch.SymInt)) or world_size < 1:
        raise UserError(f"{where}: world_size must be an integer >= 1, got {world_size!r}")
    for name, t in ((a_name, a), (b_name, b)):
        if not isinstance(t, torch.Tensor):
            raise UserError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ShapeError(f"{where}: {name} must be a 2-D matrix, got shape {_fmt_shape(t)}")
        if any(d == 0 for d in t.shape):
            raise ShapeError(f"{where}: {name} has an empty dimension, shape {_fmt_shape(t)}")
    if a.shape[1] != b.shape[0]:
        raise ShapeError(
            f"{where}: inner dimensions differ: {a_name} is {_fmt_shape(a)} (K={a.shape[1]}) "
            f"but {b_name} is {_fmt_shape(b)} (K={b.shape[0]})"
        )
    if a.dtype != b.dtype:
        raise UserError(f"{where}: {a_name} is {a.dtype} but {b_name} is {b.dtype}; they must match")
    if a.dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise UserError(f"{where}: dtype {a.dtype} is not supported; use one of {supported}")
    if a.device != b.device:
        raise UserError(f"{where}: {a_name} is on {a.device} but {b_name} is on {b.device}")
    if not device_supported(a.device):
        raise UserError(
            f"{where}: the operands must be on a CUDA device (or the CPU under Triton's "
            f"interpreter, TRITON_INTERPRET=1), got {a.device}"
        )


def interpreter_on() -> bool:
    """Whether Triton's interpreter runs the kernels (TRITON_INTERPRET=1): then they run on the CPU."""
    return env.triton_interpret


def device_supported(device: torch.device) -> bool:
    """Where the ops run: CUDA devices, and the CPU while Triton's interpreter is on."""
    return device.type == "cuda" or (device.type == "cpu" and interpreter_on())


def _ag_gemm_shape(a_shard: torch.Tensor, b: torch.Tensor, world_size: int, op: str = "ag_gemm") -> Tuple[int, int]:
    _check_operands(op, a_shard, b, world_size)
    return a_shard.shape[0] * world_size, b.shape[1]


def _check_rows_split_evenly(op: str, a: torch.Tensor, world_size: int) -> None:
    # The runtime's reduce plans give every rank an equal share of C's rows (gemm_ar reduces
    # by a reduce-scatter then an all-gather of those shares).
    if a.shape[0] % world_size != 0:
        raise ShapeError(
            f"syncopate.ops.{op}: a has M={a.shape[0]} rows, which the reduction cannot split evenly "
            f"over world size {world_size}; M must be a multiple of {world_size}"
        )


def _gemm_rs_shape(a: torch.Tensor, b_shard: torch.Tensor, world_size: int) -> Tuple[int, int]:
    _check_operands("gemm_rs", a, b_shard, world_size)
    _check_rows_split_evenly("gemm_rs", a, world_size)
    return a.shape[0] // world_size, b_shard.shape[1]


def _gemm_ar_shape(a: torch.Tensor, b_shard: torch.Tensor, world_size: int) -> Tuple[int, int]:
    _check_operands("gemm_ar", a, b_shard, world_size)
    _check_rows_split_evenly("gemm_ar", a, world_size)
    return a.shape[0], b_shard.shape[1]


_OUTPUT_SHAPE = {"ag_gemm": _ag_gemm_shape, "gemm_rs": _gemm_rs_shape, "gemm_ar": _gemm_ar_shape}


class _OneRank:
    """What the runtime modules' forward() reads of a process group, for one rank without
    torch.distributed (group name NO_GROUP). The contexts built for it see no initialized
    torch.distributed and run as world 1 with group None (common.group_rank_world)."""

    group_name = NO_GROUP

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def _dist_ready() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _resolve_group(op: str, world_size: int, group_name: str):
    """The process group named `group_name` (checked against world_size), or _OneRank()."""
    if group_name == NO_GROUP:
        if world_size != 1:
            raise UserError(
                f"syncopate.ops.{op}: world_size={world_size} with no process group (group name "
                f"{NO_GROUP!r} means one rank); pass the process group's name"
            )
        if _dist_ready():
            raise UserError(
                f"syncopate.ops.{op}: group name {NO_GROUP!r} (one rank without torch.distributed) "
                "was given while torch.distributed is initialized; pass the process group's name"
            )
        return _OneRank()
    if not _dist_ready():
        raise UserError(
            f"syncopate.ops.{op}: torch.distributed is not initialized; run under torchrun and call "
            f"torch.distributed.init_process_group() first (or pass group name {NO_GROUP!r} at world size 1)"
        )
    import torch.distributed as dist

    try:
        group = dist.distributed_c10d._resolve_process_group(group_name)
    except Exception as exc:  # torch raises several types for an unknown name
        raise UserError(f"syncopate.ops.{op}: no process group named {group_name!r}: {exc}") from None
    if group.size() != world_size:
        raise UserError(
            f"syncopate.ops.{op}: world_size={world_size} but process group {group_name!r} has {group.size()} ranks"
        )
    return group


def _run_on_gpu(op: str, a: torch.Tensor, b: torch.Tensor, world_size: int, group_name: str):
    """The eager implementation: checks, resolves the group, hands over to the runtime module."""
    _OUTPUT_SHAPE[op](a, b, world_size)
    group = _resolve_group(op, world_size, group_name)
    impl = _runtime_module(op)
    return impl.forward(a, b, group=group)


def _run_ag_gemm_gathered(a: torch.Tensor, b: torch.Tensor, world_size: int, group_name: str):
    """ag_gemm that also returns the gathered A (a new tensor: the runtime's own copy is
    overwritten by its next call)."""
    op = "ag_gemm_gathered"
    m, _ = _ag_gemm_shape(a, b, world_size, op)
    group = _resolve_group(op, world_size, group_name)
    impl = _runtime_module("ag_gemm")
    gathered = a.new_empty((m, a.shape[1]))
    return impl.forward(a, b, group=group, gathered_out=gathered), gathered


def _runtime_module(op: str):
    """syncopate.ops.<op>, the runtime's implementation (imported on first use: it needs CUDA).

    Importing a submodule makes Python set it as an attribute of the package, where it would
    shadow the public function of the same name; syncopate.ops guards against that (see its
    __init__), so this import is safe at any time.
    """
    try:
        module = importlib.import_module(f"syncopate.ops.{op}")
    except ImportError as exc:
        raise UserError(
            f"syncopate.ops.{op}: the GPU implementation is not available in this build ({exc}); "
            f"install syncopate on a machine with CUDA so that syncopate._runtime is built"
        ) from exc
    if not callable(getattr(module, "forward", None)):
        raise NotImplementedError(f"syncopate.ops.{op}: module {module.__name__} has no forward(a, b, *, group)")
    return module


# --- registration -------------------------------------------------------------------------------
# One registration per op, written out (not generated in a loop) so that each op's schema and
# fake implementation can be read in one place. The backward formulas are in autograd.py.


@torch.library.custom_op("syncopate::ag_gemm", mutates_args=())
def ag_gemm_op(a_shard: torch.Tensor, b: torch.Tensor, world_size: int, group_name: str) -> torch.Tensor:
    return _run_on_gpu("ag_gemm", a_shard, b, world_size, group_name)


@ag_gemm_op.register_fake
def _ag_gemm_fake(a_shard, b, world_size, group_name):
    return a_shard.new_empty(_ag_gemm_shape(a_shard, b, world_size))


@torch.library.custom_op("syncopate::ag_gemm_gathered", mutates_args=())
def ag_gemm_gathered_op(
    a_shard: torch.Tensor, b: torch.Tensor, world_size: int, group_name: str
) -> Tuple[torch.Tensor, torch.Tensor]:
    return _run_ag_gemm_gathered(a_shard, b, world_size, group_name)


@ag_gemm_gathered_op.register_fake
def _ag_gemm_gathered_fake(a_shard, b, world_size, group_name):
    m, n = _ag_gemm_shape(a_shard, b, world_size, "ag_gemm_gathered")
    return a_shard.new_empty((m, n)), a_shard.new_empty((m, a_shard.shape[1]))


@torch.library.custom_op("syncopate::gemm_rs", mutates_args=())
def gemm_rs_op(a: torch.Tensor, b_shard: torch.Tensor, world_size: int, group_name: str) -> torch.Tensor:
    return _run_on_gpu("gemm_rs", a, b_shard, world_size, group_name)


@gemm_rs_op.register_fake
def _gemm_rs_fake(a, b_shard, world_size, group_name):
    return a.new_empty(_gemm_rs_shape(a, b_shard, world_size))


@torch.library.custom_op("syncopate::gemm_ar", mutates_args=())
def gemm_ar_op(a: torch.Tensor, b_shard: torch.Tensor, world_size: int, group_name: str) -> torch.Tensor:
    return _run_on_gpu("gemm_ar", a, b_shard, world_size, group_name)


@gemm_ar_op.register_fake
def _gemm_ar_fake(a, b_shard, world_size, group_name):
    return a.new_empty(_gemm_ar_shape(a, b_shard, world_size))


# --- public functions ---------------------------------------------------------------------------


def group_args(op: str, group) -> Tuple[str, int]:
    """(group_name, world_size) of `group`. None: the default group, or one rank (NO_GROUP, 1)
    when torch.distributed is not initialized. Traceable by torch.compile."""
    import torch.distributed as dist

    if group is None and not _dist_ready():
        return NO_GROUP, 1
    if group is None:
        group = dist.group.WORLD
    if not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise UserError(
            f"syncopate.ops.{op}: group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}"
        )
    if not _dist_ready():
        raise UserError(
            f"syncopate.ops.{op}: a process group was given but torch.distributed is not "
            f"initialized; call torch.distributed.init_process_group() first"
        )
    return group.group_name, group.size()


def ag_gemm(
    a_shard: torch.Tensor, b: torch.Tensor, group: Optional["torch.distributed.ProcessGroup"] = None
) -> torch.Tensor:
    """all_gather(a_shard, dim 0) @ b, overlapped: a_shard [M/w, K], b [K, N] -> [M, N]."""
    group_name, world_size = group_args("ag_gemm", group)
    return torch.ops.syncopate.ag_gemm(a_shard, b, world_size, group_name)


def ag_gemm_gathered(
    a_shard: torch.Tensor, b: torch.Tensor, group: Optional["torch.distributed.ProcessGroup"] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(all_gather(a_shard) @ b, all_gather(a_shard)): [M, N] and [M, K]."""
    group_name, world_size = group_args("ag_gemm_gathered", group)
    return torch.ops.syncopate.ag_gemm_gathered(a_shard, b, world_size, group_name)


def gemm_rs(
    a: torch.Tensor, b_shard: torch.Tensor, group: Optional["torch.distributed.ProcessGroup"] = None
) -> torch.Tensor:
    """reduce_scatter(a @ b_shard, dim 0), overlapped: a [M, K/w], b_shard [K/w, N] -> [M/w, N]."""
    group_name, world_size = group_args("gemm_rs", group)
    return torch.ops.syncopate.gemm_rs(a, b_shard, world_size, group_name)


def gemm_ar(
    a: torch.Tensor, b_shard: torch.Tensor, group: Optional["torch.distributed.ProcessGroup"] = None
) -> torch.Tensor:
    """all_reduce(a @ b_shard), overlapped: a [M, K/w], b_shard [K/w, N] -> [M, N]."""
    group_name, world_size = group_args("gemm_ar", group)
    return torch.ops.syncopate.gemm_ar(a, b_shard, world_size, group_name)


# The backward formulas (registered on import; autograd.py uses the ops above).
from syncopate.ops import autograd as _autograd  # noqa: E402,F401
