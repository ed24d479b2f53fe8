"""Syncopate's CUDA runtime from Python: symmetric heaps, bounded waits, plan execution.

    ws = PlanWorkspace(plan, group, grid=(M, N, BLOCK_M, BLOCK_N), accesses=[("x", "consume", 0, -1)])
    x = ws.tensor("x", torch.bfloat16)          # a torch view of this rank's symmetric buffer
    ws.begin(); x[rows].copy_(shard); ws.issue(); ...; ws.end()
    ws.check()                                  # WaitTimeoutError if a wait ran past its bound

No call takes an epoch: each rank's epoch is an int32 in its heap (`ws.epoch_word`, what a
transformed kernel gets as `sy_epoch`) that begin() advances on the device, so a call captured
in a CUDA graph is right on every replay (docs/RUNTIME.md, "The call path").

One process per GPU (torchrun): the heap's CUDA IPC handles travel between processes through
torch.distributed (all_gather_object), an NCCL unique id through broadcast_object_list. The
C++ side (syncopate._runtime) owns every buffer; the torch tensors handed out are views that
stay valid as long as the workspace lives.

Run with NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): nothing here uses it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from syncopate.errors import DeviceError, UserError
from syncopate.settings import env

# The extension module is loaded on first use, not on import: it needs the CUDA runtime's
# library, and importing this module for its constants (the ops do) must work without it.
_runtime = None

DEFAULT_WAIT_BOUND_NS = env.wait_bound_ms * 1_000_000

_PLAN_DTYPE = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.int32: "i32",
    torch.float8_e4m3fn: "f8e4m3",
}


def require_runtime():
    """The compiled runtime module, or a DeviceError saying why it is missing."""
    global _runtime
    if _runtime is None:
        try:
            from syncopate import _runtime as module
        except ImportError as exc:  # a build without CUDA
            raise DeviceError(
                f"syncopate._runtime is not available ({exc}); install syncopate on a "
                "machine with a CUDA compiler so the runtime is built"
            ) from exc
        _runtime = module
    return _runtime


def plan_dtype(dtype: torch.dtype) -> str:
    """The plan IR's spelling of a torch dtype (bf16, f16, f32, i32, f8e4m3)."""
    if dtype not in _PLAN_DTYPE:
        raise UserError(f"dtype {dtype} has no plan dtype; use one of {list(_PLAN_DTYPE)}")
    return _PLAN_DTYPE[dtype]


class _DeviceMemory:
    """A raw device address as a __cuda_array_interface__ byte array, for torch.as_tensor."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def device_view(address: int, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A torch tensor over `address` (not owned: the caller keeps the memory alive)."""
    count = 1
    for s in shape:
        count *= int(s)
    nbytes = count * torch.tensor([], dtype=dtype).element_size()
    with torch.cuda.device(device):
        raw = torch.as_tensor(_DeviceMemory(address, max(nbytes, 1)), device=device)
    return raw[:nbytes].view(dtype).view(*shape)


def _is_distributed(group) -> bool:
    import torch.distributed as dist

    return group is not None and dist.is_available() and dist.is_initialized()


def resolve_device(device=None) -> torch.device:
    """`device` with its index. None, or "cuda" without an index, means the current CUDA device
    (where torch allocates): an operand's device always carries its index, so a context kept on
    an unindexed "cuda" would compare unequal to every operand and refuse every call."""
    device = torch.device("cuda") if device is None else torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def open_heap(nbytes: int, group=None, device: Optional[torch.device] = None, nodes: Sequence[int] = ()):
    """This rank's symmetric heap of `nbytes`, every peer of its node mapped (`nodes`: the node
    of each rank, as CommPlan.nodes; empty: one node). Collective over `group`."""
    rt = require_runtime()
    device = resolve_device(device)
    if _is_distributed(group):
        import torch.distributed as dist

        rank, world = dist.get_rank(group), dist.get_world_size(group)
    else:
        rank, world = 0, 1
    heap = rt.SymmetricHeap(rank, world, device.index, int(nbytes))
    if world > 1:
        import torch.distributed as dist

        handles = [None] * world
        dist.all_gather_object(handles, heap.export_handle(), group=group)
        heap.open_peers(handles, [int(n) for n in nodes])
    else:
        heap.connect_local([heap])
    return heap


def open_nccl(group, device: torch.device):
    """An NCCL communicator over `group` for the nccl chunk backend. Collective over `group`."""
    rt = require_runtime()
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    box = [rt.nccl_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
    return rt.NcclComm(box[0], world, rank, device.index)


def _uses_nccl(plan) -> bool:
    return any(c.backend == "nccl" and c.src != c.dst for c in plan.chunks)


class PlanWorkspace:
    """One rank's heap, signals and executor for one plan (and the local kernel's tile grid).

    plan: a syncopate CommPlan (sy.make_plan) for group's world size.
    grid: (M, N, BLOCK_M, BLOCK_N) of the local kernel, accesses: [(tensor, role, m_dim, n_dim)]
    or [(tensor, role, m_dim, n_dim, m_local_shard)] as in lower/tiling.hpp (m_local_shard, a
    bool: m_dim holds only this rank's shard of the grid rows, e.g. the staging tensor of a staged
    GEMM+RS); any other shape raises UserError naming the access. With no accesses the tables
    hold landing slots only.
    extra_bytes: more symmetric space after the plan's regions (see extra_offset).
    in_place_chunks: local copy chunks the caller moves itself (ExecutorOptions::in_place_chunks):
    each copies nothing, its landing is raised after its waits; the caller reads or writes the
    data in place (the MoE dispatch's and combine's own slots).
    """

    def __init__(
        self,
        plan,
        group=None,
        *,
        grid=(1, 1, 1, 1),
        accesses=(),
        device=None,
        wait_bound_ns: int = DEFAULT_WAIT_BOUND_NS,
        drop_chunk: int = -1,
        sm_copy_blocks: int = 16,
        extra_bytes: int = 0,
        in_place_chunks: Sequence[int] = (),
    ):
        rt = require_runtime()
        from syncopate import plan_to_json

        self.device = resolve_device(device)
        self.group = group
        self.plan = plan
        self.prepared = rt.prepare_plan(
            plan_to_json(plan), int(grid[0]), int(grid[1]), int(grid[2]), int(grid[3]), [tuple(a) for a in accesses]
        )
        self.extra_offset = (int(self.prepared.heap_bytes) + 255) // 256 * 256
        self.heap = open_heap(self.extra_offset + int(extra_bytes), group, self.device, nodes=plan.nodes)
        self.rank = self.heap.rank
        self.world = self.heap.world
        if self.world != plan.world_size:
            raise UserError(
                f"rank {self.rank}: the plan is for world_size {plan.world_size}, the group has {self.world} ranks"
            )
        self.monitor = rt.WaitMonitor()
        self.nccl = open_nccl(group, self.device) if (_uses_nccl(plan) and self.world > 1) else None
        self.executor = rt.RankExecutor(
            self.prepared,
            self.heap,
            self.monitor,
            self.nccl,
            wait_bound_ns=int(wait_bound_ns),
            drop_chunk=int(drop_chunk),
            sm_copy_blocks=int(sm_copy_blocks),
            in_place_chunks=[int(c) for c in in_place_chunks],
        )
        self.wait_bound_ns = int(wait_bound_ns)
        # This rank's epoch word (control slot of the heap): advanced on the device by begin().
        self.epoch_word = device_view(int(self.executor.epoch_word), [1], torch.int32, self.device)

    # -- buffers ---------------------------------------------------------------------------------
    def tensor(self, name: str, dtype: torch.dtype, rank: Optional[int] = None) -> torch.Tensor:
        """Plan tensor `name` of `rank` (default: this rank) as a torch view of the heap."""
        spec = self.plan.tensors[name]
        r = self.rank if rank is None else rank
        return device_view(self.heap.base(r) + self.prepared.tensor_offset(name), list(spec.shape), dtype, self.device)

    def extra(self, offset: int, shape: Sequence[int], dtype: torch.dtype, rank: Optional[int] = None):
        """A view into the extra symmetric space, `offset` bytes past its start."""
        r = self.rank if rank is None else rank
        return device_view(self.heap.base(r) + self.extra_offset + int(offset), shape, dtype, self.device)

    def signals(self) -> torch.Tensor:
        """This rank's int32 signal slots (`sy_signals` of a transformed kernel)."""
        n = max(1, int(self.prepared.num_signal_slots))
        return device_view(self.heap.base(self.rank) + self.prepared.signals_offset, [n], torch.int32, self.device)

    def table(self):
        """This rank's signal table as lists (tile_waits, tile_notifies, slot_writers, ...)."""
        return self.prepared.table(self.rank)

    # -- one call (rank_schedule.hpp; runtime/executor.hpp says what each step does) ------------
    def _stream(self, stream) -> int:
        s = stream if stream is not None else torch.cuda.current_stream(self.device)
        return int(s.cuda_stream)

    def begin(self, stream=None) -> None:
        """Advances the epoch and waits (bounded) until no peer still uses the last call's buffers."""
        self.executor.begin(self._stream(stream))

    def publish(self, stream=None) -> None:
        """Raises the entry counter: this rank's inputs are in place."""
        self.executor.publish(self._stream(stream))

    def begin_and_publish(self, stream=None) -> None:
        """begin() then publish(), for a call with no inputs to put in place in between: one
        device kernel instead of two or three, so what is launched next starts a node earlier."""
        self.executor.begin_and_publish(self._stream(stream))

    def fork(self, stream=None) -> None:
        """The side streams start after what the stream holds now (not after a kernel launched next)."""
        self.executor.fork(self._stream(stream))

    def bind_source(self, name: str, tensor: Optional[torch.Tensor]) -> None:
        """This rank's local chunks read plan tensor `name` from `tensor` (contiguous, the plan's
        shape and dtype, on this device) instead of the heap, from the next issue on; None: the
        heap again. For an all-gather's input (make_plan(..., input=)): the caller's shard is
        read in place, nothing is copied before the consumer starts."""
        if tensor is None:
            self.executor.bind_source(name, 0)
            return
        spec = self.plan.tensors[name]
        if (
            list(tensor.shape) != list(spec.shape)
            or not tensor.is_contiguous()
            or tensor.device != self.device
            or plan_dtype(tensor.dtype) != spec.dtype
        ):
            raise UserError(
                f"bind_source({name!r}): needs a contiguous {spec.dtype} tensor of shape {list(spec.shape)} "
                f"on {self.device}, got {tensor.dtype} {list(tensor.shape)} on {tensor.device}"
                f"{'' if tensor.is_contiguous() else ' (not contiguous)'}"
            )
        self.executor.bind_source(name, tensor.data_ptr())

    def issue_chunks(self) -> None:
        """Enqueues every chunk step on the side streams (after fork)."""
        self.executor.issue_chunks()

    def issue(self, stream=None, wait_landed: bool = True) -> None:
        """publish + fork + issue_chunks, then (wait_landed) wait until every chunk landed here."""
        self.executor.issue(self._stream(stream), bool(wait_landed))

    def wait_landed(self, stream=None) -> None:
        """Makes the stream wait (bounded) until every chunk landing on this rank has landed."""
        self.executor.wait_landed(self._stream(stream))

    def end(self, stream=None) -> None:
        """Joins the side streams, then raises the exit counter."""
        self.executor.end(self._stream(stream))

    def timed_out(self) -> bool:
        """Whether a runtime wait has timed out so far, read without synchronizing (the record is
        mapped host memory); check() then names it."""
        return bool(self.monitor.timed_out)

    def check(self, synchronize: bool = True) -> None:
        """Raises WaitTimeoutError (rank, slot, expected, seen, chunk) if a runtime wait timed out."""
        if synchronize:
            torch.cuda.synchronize(self.device)
        self.monitor.check()
