"""The MoE layer's capacity-slot path (MoeDispatchCombine.dispatch_slots / combine_slots): a
dispatch and a combine whose host work never waits for the device.

The layer's row layout (`dispatch_gemm`) has as many rows as this rank received, a number the
host must read from the device (a synchronization per call, after which the rest of the host's
work is exposed). Here the rows stay in the fused dispatch's capacity slots: h_slots [W * E * C, N]
(slot s * E + e: the rows from rank s for local expert e, the first recv_counts[s * E + e] of them
real), as DeepEP's low-latency kernels keep theirs. Every index is computed on the device:

  slot_destinations   routing -> each routed row's place in the slots (dest, -1 past the
                      capacity) and the rows per global expert, by sort and prefix sums
  pack_rows           the rows into x_send / x_recv (kernels/moe_rows.py), no host counts
  combine_rows        each token's top_k expert outputs from y_send / y_recv, weighted, summed

What a host check would read (expert ids out of range, rows over capacity) is gathered into a
small device record that is copied to pinned host memory behind the call and read once its event
has completed (`DeferredChecks`). A bad call is refused by name at the layer's check() (which
synchronizes), never by a call: no dispatch_slots or combine_slots raises what a record shows,
its own or an earlier call's. Rows over capacity are not written (dest -1) and the counts the
plan carries are clamped to the capacity, so a bad call reads and writes nothing out of bounds,
and every later call is as correct as its own routing, until check() reports it.

Why only check(): the record is this rank's alone, and when its event completes depends on the
timing. A call that raised it (before its own work, or after) would leave this rank's caller
skipping collective work its peers enqueue (the rest of the dispatch, the combine, the next
layer), so the peers' bounded waits would time out naming a chunk, not the routing; worse,
the ranks' epochs would be out of step for every later call of the layer. check() is where the
caller already synchronizes, outside every call; the error is raised on the ranks that routed
badly (their peers' check() passes), so a caller that stops on it should agree with the peers
first (e.g. an all_reduce of a flag).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Optional

import torch

from syncopate.errors import ShapeError

# record fields (int64): smallest and largest expert id, the expert with the most rows, its rows
RECORD_FIELDS = ("min_id", "max_id", "worst_expert", "worst_rows")
# Calls whose records are not yet read before one waits for the oldest (bounded memory).
MAX_PENDING = 16
_BLOCK_H = 1024


@dataclasses.dataclass(frozen=True)
class SlotLayout:
    """Where one dispatch_slots call put this rank's routed rows, for its combine_slots.

    dest: int64 [T * top_k] device: pair p (token p // top_k, its (p % top_k)-th expert) went to
    row dest[p] of the slots (global expert g, i-th row for it: g * capacity + i), -1 over capacity.
    recv_counts: int32 [W * E] device: rows this rank received in each slot (s * E + e).
    """

    dest: torch.Tensor
    recv_counts: torch.Tensor
    num_tokens: int
    top_k: int
    capacity: int


def slot_destinations(expert_ids: torch.Tensor, num_experts: int, capacity: int):
    """(dest int64 [T * k], send int32 [num_experts] clamped to capacity, record int64 [4]) of a
    routing, on expert_ids' device with no host synchronization. Rows for one expert keep their
    token order (a stable sort), as on the sequential path."""
    flat = expert_ids.reshape(-1).to(torch.int64)
    n = flat.numel()
    device = flat.device
    safe = flat.clamp(0, num_experts - 1)  # out-of-range ids are reported by the record
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, safe, torch.ones_like(safe))
    order = torch.argsort(safe, stable=True)
    expert_sorted = safe[order]
    starts = torch.cumsum(counts, 0) - counts
    within = torch.arange(n, device=device) - starts[expert_sorted]
    dest_sorted = torch.where(within < capacity, expert_sorted * capacity + within, torch.full_like(within, -1))
    dest = torch.empty_like(dest_sorted).scatter_(0, order, dest_sorted)
    if n:
        worst_rows, worst_expert = counts.max(0)
        record = torch.stack([flat.min(), flat.max(), worst_expert, worst_rows])
    else:
        record = torch.zeros(4, dtype=torch.int64, device=device)
    return dest, counts.clamp(max=capacity).to(torch.int32), record


def check_record(values, *, num_experts: int, capacity: int, rank: int, local_experts: int, who: str) -> None:
    """Raises by name what a call's record (RECORD_FIELDS, host ints) shows: an expert id out of
    range (UserError-like ShapeError, as the layout path), or rows over an expert's capacity."""
    rec = dict(zip(RECORD_FIELDS, (int(v) for v in values)))
    for key in ("min_id", "max_id"):
        if not 0 <= rec[key] < num_experts:
            raise ShapeError(f"{who}: expert id {rec[key]} is outside 0..{num_experts - 1} (rank {rank})")
    if rec["worst_rows"] > capacity:
        g = rec["worst_expert"]
        raise ShapeError(
            f"{who}: rank {rank} routes {rec['worst_rows']} rows to expert {g} (on rank {g // local_experts}), over "
            f"its capacity of {capacity} rows per rank (the rows past it were not sent)"
        )


class _Completed:
    """The event of a record already on the host (off CUDA): complete from the start, so the
    record goes through the same queue as a CUDA one."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class DeferredChecks:
    """Records of calls copied to pinned host memory behind the work, read once their event has
    completed. No method but raise_refusal() raises: push() and poll() read the completed records
    without waiting and keep the first refusal (a record still on its way is read by a later
    poll), drain() waits for all; raise_refusal() raises the kept one once and clears it. Holding
    more than MAX_PENDING unread records waits for the oldest (bounded memory)."""

    def __init__(self, check):
        self._check = check  # callable(host values) raising on a bad record
        self._pending = collections.deque()
        self._refusal = None  # the first refused record's error since raise_refusal()
        self._refused = 0  # records refused since then

    def push(self, record: torch.Tensor) -> None:
        if record.device.type == "cuda":
            host = torch.empty(record.shape, dtype=record.dtype, pin_memory=True)
            host.copy_(record, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:
            host, event = record.clone(), _Completed()
        self._pending.append((event, host))
        if len(self._pending) > MAX_PENDING:
            self._pending[0][0].synchronize()
        self.poll()

    def poll(self) -> None:
        while self._pending and self._pending[0][0].query():
            self._read(self._pending.popleft()[1])

    def drain(self) -> None:
        while self._pending:
            event, host = self._pending.popleft()
            event.synchronize()
            self._read(host)

    def raise_refusal(self) -> None:
        """Raises the first refusal read since the last raise (ShapeError naming the expert and
        rank; how many records were refused in all), once."""
        refusal, refused = self._refusal, self._refused
        self._refusal, self._refused = None, 0
        if refusal is None:
            return
        more = f" ({refused - 1} later call(s) refused too)" if refused > 1 else ""
        raise ShapeError(f"{refusal}{more}") from None  # raised here, not where the record was read

    def _read(self, host: torch.Tensor) -> None:
        try:
            self._check(host.tolist())
        except ShapeError as exc:
            self._refused += 1
            if self._refusal is None:
                self._refusal = exc


def pack_rows(x: torch.Tensor, dest: torch.Tensor, top_k: int, x_send, x_recv, local: tuple) -> None:
    """Routed row p (x's row p // top_k) into row dest[p] of x_recv where local[0] <= dest[p] <
    local[1] (this rank's own slots), else of x_send; dest < 0 nowhere (kernels/moe_rows.py)."""
    from syncopate.kernels.moe_rows import pack_rows_kernel

    pairs, hidden = dest.numel(), x.shape[1]
    if pairs == 0:
        return
    block = min(_BLOCK_H, max(16, 1 << (hidden - 1).bit_length()))
    grid = (pairs, -(-hidden // block))
    pack_rows_kernel[grid](
        x, dest, x_send, x_recv, hidden, top_k, local[0], local[1], x.stride(0), x_send.stride(0), BLOCK_H=block
    )


def combine_rows(
    y_send, y_recv, dest: torch.Tensor, weights: torch.Tensor, local: tuple, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """y [T, H]: for each token the sum over its top_k pairs of weight * the expert output at row
    dest of y_send (own slots, local[0] <= dest < local[1]) or y_recv (landed), in fp32."""
    from syncopate.kernels.moe_rows import combine_rows_kernel

    tokens, top_k = weights.shape
    hidden = y_send.shape[1]
    if out is None:
        out = torch.empty((tokens, hidden), dtype=y_send.dtype, device=y_send.device)
    if tokens == 0:
        return out
    block = min(_BLOCK_H, max(16, 1 << (hidden - 1).bit_length()))
    grid = (tokens, -(-hidden // block))
    combine_rows_kernel[grid](
        y_send,
        y_recv,
        dest,
        weights,
        out,
        hidden,
        local[0],
        local[1],
        y_send.stride(0),
        out.stride(0),
        TOP_K=top_k,
        BLOCK_H=block,
    )
    return out
