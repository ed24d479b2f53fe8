"""Expert parallelism: the token all-to-all with the expert GEMMs around it (dispatch, combine).

    layer = MoeDispatchCombine(group, num_experts=8, top_k=2)       # experts split over the ranks
    h, layout = layer.dispatch_gemm(x, expert_ids, w_up)            # x [T, H] -> h [R, N]
    y = layer.combine_gemm(act(h), w_down, layout, weights)         # -> y [T, H]

Each rank holds E / W experts (rank r: experts r*E/W .. (r+1)*E/W - 1) and T tokens. A token goes
to its top-k experts (`expert_ids` [T, k], chosen by the router, int64) and comes back as the sum
of the experts' outputs weighted by `weights` [T, k]:

    dispatch_gemm   the rows of x go to their experts' ranks (all-to-all with run-time sizes), and
                    each local expert e multiplies its rows by w_up[e] ([H, N]): h holds the R rows
                    this rank received, grouped by local expert (layout.rows_per_expert), then
                    by source rank, in the order the source sent them.
    combine_gemm    each local expert multiplies its rows by w_down[e] ([N', H]); the rows go back
                    to their tokens' ranks (the reverse all-to-all) and are summed there with
                    the routing weights.

How many rows go from rank s to expert e is known only when the router has run, call by call, so
the counts are exchanged first (an all-to-all of W x (E/W + 1) integers: the counts and whether
the sender refuses the call), then the rows. Dropless: every routed row is carried. `capacity`
bounds the rows one expert may receive from one rank (the buffers a fused kernel will size for
it); a call that routes more, or an expert id out of range, raises ShapeError on every rank after
the counts exchange, before any rows move: naming the expert and the ranks where it was routed,
naming the refusing rank elsewhere (a rank that refused alone would leave its peers waiting in
the next collective).

mode="sequential": the all-to-all (torch.distributed's all_to_all_single over the group: NCCL
across GPUs, gloo on the CPU), then one matmul per local expert; without torch.distributed it is
one rank, and the all-to-all is the identity.
mode="fused" (ops/moe_fused.py): the dispatch is the MoE dispatch plan (plan/expert_parallel.hpp:
counts first, then one chunk per (source rank, local expert) of `capacity` rows) run by the
runtime's copy-engine or SM-copy chunks while the transformed grouped GEMM (kernels/moe_gemm.py)
runs: each tile waits for exactly the chunk of its (source, expert) slot, local slots first, and
reads that slot's count on the device. The combine is the notifying grouped GEMM over the same
slots, each tile announcing its rows once stored, while the return all-to-all's chunk of each
(home rank, expert) slot leaves as soon as the slot's last tile is done; the home rank then sums
each token's k rows with its weights. Both need `capacity` (a multiple of FUSED_BLOCK_M) and
CUDA; copy-engine chunks move whole capacity slots, SM-copy dispatch chunks only the counted rows,
NCCL chunks (backend="nccl", ranks on their own GPUs) whole capacity slots in one ncclGroupStart/End
per round after one group for every count. Both are correct on nvidia-h200 at world 1 and 2
(ranks sharing the GPU) but were slower than sequential where measured, so mode="auto" runs
sequential and says why in `reason` / `combine_reason`. Fused calls do not wait for their
kernels: a call's bounded waits are checked when the next fused call starts, or by check().
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Optional, Sequence

import torch

from syncopate.errors import ShapeError, UserError

MODES = ("auto", "fused", "sequential")
# The fused ops' chunk backends. nccl moves whole capacity slots (an NCCL size is a host value),
# the counts on the device; it needs one GPU per rank (refused by name where ranks share one).
FUSED_BACKENDS = ("copy-engine", "sm-copy", "nccl")
# Rows of the fused grouped GEMM's tiles: the capacity must be a multiple of it.
FUSED_BLOCK_M = 64


@dataclasses.dataclass(frozen=True)
class DispatchLayout:
    """Where the rows of one dispatch went, for the combine that brings them back.

    send_counts[r][e]: rows this rank sent to local expert e of rank r (W x E/W, host ints).
    recv_counts[s][e]: rows this rank received from rank s for its local expert e.
    order: [T*k] positions of (token, slot) pairs in the order they were sent (by destination
    expert), as indices into expert_ids.reshape(-1).
    regroup: [R] for each received row in expert-grouped order, its index in the order the rows
    arrived (by source rank, then expert).
    """

    send_counts: tuple
    recv_counts: tuple
    order: torch.Tensor
    regroup: torch.Tensor
    num_tokens: int
    top_k: int

    @property
    def rows_per_expert(self) -> list:
        """Rows each local expert received (the groups of h, in order)."""
        return [sum(row[e] for row in self.recv_counts) for e in range(len(self.recv_counts[0]))]


class MoeDispatchCombine:
    """The dispatch and combine of one MoE layer on `group` (None: one rank).

    num_experts: experts in the layer (a multiple of the group size); top_k: experts per token;
    capacity: the most rows one expert may receive from one rank (None: no bound);
    mode: "auto", "fused" or "sequential" (the dispatch; see the module's docstring);
    backend: the fused ops' chunks, "copy-engine", "sm-copy" or "nccl" (FUSED_BACKENDS)."""

    def __init__(
        self,
        group=None,
        *,
        num_experts: int,
        top_k: int,
        capacity: Optional[int] = None,
        mode: str = "auto",
        backend: str = "copy-engine",
    ):
        who = "MoeDispatchCombine"
        if mode not in MODES:
            raise UserError(f"{who}: mode must be one of {MODES}, got {mode!r}")
        if backend not in FUSED_BACKENDS:
            raise UserError(f"{who}: backend must be one of {FUSED_BACKENDS} (the fused ops' chunks), got {backend!r}")
        self.group = group
        self.world = 1 if group is None else group.size()
        self.rank = 0 if group is None else group.rank()
        for name, value in (("num_experts", num_experts), ("top_k", top_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{who}: {name} must be an integer >= 1, got {value!r}")
        if num_experts % self.world:
            raise ShapeError(f"{who}: num_experts={num_experts} cannot be split evenly over {self.world} ranks")
        if top_k > num_experts:
            raise ShapeError(f"{who}: top_k={top_k} is more than num_experts={num_experts}")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise UserError(f"{who}: capacity must be None or an integer >= 1, got {capacity!r}")
        self.num_experts = num_experts
        self.local_experts = num_experts // self.world
        self.top_k = top_k
        self.capacity = capacity
        self.mode = mode
        self.backend = backend
        self.last_mode = None  # what the last dispatch ran: "fused" or "sequential"
        self.reason = ""  # why, for mode="auto"
        self._fused = {}
        self._fused_combine = {}
        self.last_combine_mode = None  # what the last combine ran
        self.combine_reason = ""
        from syncopate.ops.moe_slots import DeferredChecks, check_record

        # dispatch_slots' routing records, read once their copies to the host completed. The check
        # holds values, not self: a closure over self would make the layer a reference cycle,
        # freed by the cyclic GC at any later allocation, even inside another layer's fused call,
        # where freeing its heaps (cudaFree synchronizes) stalls the host behind a kernel that
        # waits for the host's next step (ops/call_graphs.py, `collection_held`).
        self._deferred = DeferredChecks(
            functools.partial(
                check_record,
                num_experts=num_experts,
                capacity=capacity,
                rank=self.rank,
                local_experts=self.local_experts,
                who="MoeDispatchCombine.dispatch_slots",
            )
        )

    # -- dispatch -----------------------------------------------------------------------------------
    def dispatch_gemm(self, x: torch.Tensor, expert_ids: torch.Tensor, w_up: torch.Tensor):
        """(h [R, N], layout): the rows of x sent to their experts, each multiplied by its
        expert's w_up [E/W, H, N]."""
        who = "MoeDispatchCombine.dispatch_gemm"
        self._check_routing_shapes(who, x, expert_ids)
        self._check_weight(who, "w_up", w_up, x.shape[1], x)
        flat = expert_ids.reshape(-1).to(torch.int64)
        # Stable: the rows for one expert keep their token order, on every path.
        order = torch.argsort(flat, stable=True)
        # One read of the device for the ids' range and the counts (h's shape needs them). The
        # counts by scatter_add of clamped ids, not bincount (on CUDA it reads the largest id on
        # the host first); an id out of range is refused before they are used.
        send = torch.zeros(self.num_experts, dtype=torch.int64, device=flat.device)
        send.scatter_add_(0, flat.clamp(0, self.num_experts - 1), torch.ones_like(flat))
        bad_id = None
        if flat.numel():
            lo, hi, *counts = torch.cat([flat.min().view(1), flat.max().view(1), send]).tolist()
            if lo < 0 or hi >= self.num_experts:
                bad_id = lo if lo < 0 else hi
        else:
            counts = [0] * self.num_experts
        send = send.view(self.world, self.local_experts)
        e = self.local_experts
        send_counts = tuple(tuple(counts[j * e : (j + 1) * e]) for j in range(self.world))
        rows = x[torch.div(order, self.top_k, rounding_mode="floor")]
        self.last_mode, self.reason = self._choose(x)
        # A bad routing is refused on every rank, after the counts exchange (which carries each
        # rank's verdict): a rank that refused alone would leave its peers in the next collective.
        refused = bad_id is not None or self._over_capacity(send_counts)
        recv_counts, refused_by = self._exchange_counts(send_counts, refused)
        if bad_id is not None:
            raise ShapeError(f"{who}: expert id {bad_id} is outside 0..{self.num_experts - 1} (rank {self.rank})")
        self._check_capacity(send_counts, recv_counts)
        if refused_by:
            raise ShapeError(
                f"{who}: rank(s) {refused_by} routed rows this call cannot carry (an expert id out of range, or more "
                f"than capacity={self.capacity} rows for one expert; their own error names it): refused on every rank"
            )
        if self.last_mode == "fused":
            # The counts travel with the plan on the device too (the kernel reads them there);
            # the host needs them for h's shape, so they are exchanged as on the sequential path
            # and nothing after the fused call waits for its kernel.
            return self._dispatch_fused(x, rows, flat[order], send, send_counts, recv_counts, order, w_up)
        received = self._all_to_all(rows, [sum(r) for r in send_counts], [sum(r) for r in recv_counts])
        regroup = _expert_major(recv_counts, x.device)
        grouped = received[regroup]
        layout = DispatchLayout(send_counts, recv_counts, order, regroup, x.shape[0], self.top_k)
        return _per_expert_matmul(grouped, w_up, layout.rows_per_expert), layout

    def _choose(self, x: torch.Tensor, what: str = "dispatch"):
        """(mode, reason) of this dispatch or combine (`what`)."""
        who = "MoeDispatchCombine"
        blockers = self._fused_blockers(x)
        if self.mode == "sequential":
            return "sequential", "mode='sequential'"
        if self.mode == "fused" and blockers:
            raise UserError(f"{who}: mode='fused' cannot run: " + "; ".join(blockers))
        if blockers:
            return "sequential", "; ".join(blockers)
        if self.mode == "auto":
            # Measured on nvidia-h200 (bench/bench_moe.py, world 1, 2026-11-25, Mixtral-like,
            # balanced): fused dispatch 2.87 ms vs sequential 2.33 ms, fused combine 2.95 ms vs
            # 2.03 ms (docs/PYTHON.md). Until they pay, auto does not take them.
            return "sequential", (
                f"the fused {what} is not shown faster than the sequential one "
                "(bench/bench_moe.py); ask for mode='fused' to run it"
            )
        return "fused", "mode='fused'"

    def _fused_blockers(self, x: torch.Tensor) -> list:
        """Why the fused path cannot run on x ([] when it can)."""
        blockers = []
        if self.capacity is None:
            blockers.append("no capacity was given (the fused plan's chunks carry capacity-sized slots)")
        elif self.capacity % FUSED_BLOCK_M:
            blockers.append(
                f"capacity {self.capacity} is not a multiple of {FUSED_BLOCK_M} (a tile must read one slot)"
            )
        if x.device.type != "cuda":
            blockers.append(f"x is on {x.device} (the fused path runs on CUDA)")
        else:
            try:
                from syncopate.runtime import require_runtime

                require_runtime()
            except Exception as exc:  # a build without the CUDA runtime
                blockers.append(f"the runtime is missing ({exc})")
        return blockers

    def _dispatch_op(self, x: torch.Tensor, w_up: torch.Tensor):
        """The MoeFusedDispatch for these widths, dtype and device (made once; collective)."""
        from syncopate.ops.moe_fused import MoeFusedDispatch

        key = (x.shape[1], w_up.shape[2], x.dtype, x.device)
        fused = self._fused.get(key)
        if fused is None:
            fused = MoeFusedDispatch(
                self.group,
                local_experts=self.local_experts,
                capacity=self.capacity,
                hidden=x.shape[1],
                out_features=w_up.shape[2],
                dtype=x.dtype,
                device=x.device,
                backend=self.backend,
            )
            self._fused[key] = fused
        return fused

    def _combine_op(self, h: torch.Tensor, w_down: torch.Tensor):
        """The MoeFusedCombine for these widths, dtype and device (made once; collective)."""
        from syncopate.ops import moe_fused

        key = (h.shape[1], w_down.shape[2], h.dtype, h.device)
        fused = self._fused_combine.get(key)
        if fused is None:
            fused = moe_fused.MoeFusedCombine(
                self.group,
                local_experts=self.local_experts,
                capacity=self.capacity,
                in_features=h.shape[1],
                hidden=w_down.shape[2],
                dtype=h.dtype,
                device=h.device,
                backend=self.backend,
            )
            self._fused_combine[key] = fused
        return fused

    def _dispatch_fused(self, x, rows, expert_of_row, send, send_counts, recv_counts, order, w_up):
        from syncopate.ops.moe_fused import local_rows

        fused = self._dispatch_op(x, w_up)
        flat_send = send.reshape(-1)
        starts = torch.cumsum(flat_send, 0) - flat_send
        within = torch.arange(rows.shape[0], device=x.device) - starts[expert_of_row]
        dest = expert_of_row * self.capacity + within  # slot (rank j, expert e) = global expert id
        local = local_rows(send_counts, self.rank)  # read in place from x_recv's local slots
        h_slots = fused(rows, dest, flat_send.to(torch.int32), w_up, local)
        # The sequential layout: by local expert, then source rank (gathered on the device).
        h = h_slots[_slot_rows(recv_counts, self.capacity, x.device)]
        regroup = _expert_major(recv_counts, x.device)
        return h, DispatchLayout(send_counts, recv_counts, order, regroup, x.shape[0], self.top_k)

    def check(self) -> None:
        """Raises WaitTimeoutError if a fused call's wait (kernel or runtime) ran past its bound,
        and ShapeError for a dispatch_slots call whose routing was bad (an expert id out of range,
        rows over capacity): the first such call since the last check(), once, on the rank that
        routed it. Fused calls do not wait for their kernels; each looks at the earlier calls of
        its op when it starts, without synchronizing, and this checks every call (it
        synchronizes the device). Every routing record is read first; a timeout is raised before
        a routing refusal, which the next check() then raises."""
        self._deferred.drain()
        for op in (*self._fused.values(), *self._fused_combine.values()):
            op.check()
        self._deferred.raise_refusal()

    # -- the capacity-slot path (ops/moe_slots.py): no host synchronization ------------------------
    def dispatch_slots(self, x: torch.Tensor, expert_ids: torch.Tensor, w_up: torch.Tensor):
        """(h_slots [W * E/W * capacity, N], SlotLayout): the fused dispatch with the rows left in
        its capacity slots (slot s * E/W + e: the rows from rank s for local expert e, the first
        layout.recv_counts[s * E/W + e] real, the rest unspecified). Nothing in the call waits for
        the device: the routing is turned into slot places on the device, and what a host check
        would read (expert ids, rows over capacity) is reported by check() alone (ShapeError
        naming the expert and rank; ops/moe_slots.py says why no call raises it); such rows are
        not sent. Needs capacity and CUDA (the fused path), whatever `mode` says. What the host
        can refuse (shapes, dtypes, devices, the op's construction) is refused before any work
        of the call is enqueued."""
        from syncopate.ops import moe_slots

        who = "MoeDispatchCombine.dispatch_slots"
        self._check_routing_shapes(who, x, expert_ids)
        self._check_weight(who, "w_up", w_up, x.shape[1], x)
        self._require_fused(who, x)
        fused = self._dispatch_op(x, w_up)  # may refuse (e.g. nccl on a shared GPU): before any work
        dest, send, record = moe_slots.slot_destinations(expert_ids, self.num_experts, self.capacity)
        self._deferred.push(record)  # never raises: check() does
        h, recv_counts = fused.call_slots(x if x.stride(1) == 1 else x.contiguous(), dest, send, w_up, self.top_k)
        self.last_mode, self.reason = "fused", "dispatch_slots"
        return h, moe_slots.SlotLayout(dest, recv_counts, x.shape[0], self.top_k, self.capacity)

    def combine_slots(self, h_slots: torch.Tensor, w_down: torch.Tensor, layout, weights: torch.Tensor):
        """y [T, H]: the fused combine of dispatch_slots' rows: h_slots [W * E/W * capacity, N']
        (e.g. act(h_slots); rows past each slot's count are never read into y) times each local
        expert's w_down [E/W, N', H], sent home and summed there with the routing weights [T, k]
        (kernels/moe_rows.py). No host synchronization."""
        from syncopate.ops import moe_slots

        who = "MoeDispatchCombine.combine_slots"
        if not isinstance(layout, moe_slots.SlotLayout):
            raise UserError(f"{who}: layout must be the SlotLayout that dispatch_slots returned")
        rows = self.world * self.local_experts * layout.capacity
        if not isinstance(h_slots, torch.Tensor) or h_slots.dim() != 2 or h_slots.shape[0] != rows:
            got = list(h_slots.shape) if isinstance(h_slots, torch.Tensor) else type(h_slots).__name__
            raise ShapeError(f"{who}: h_slots must be [{rows}, N'] (the slots dispatch_slots returned), got {got}")
        self._check_weight(who, "w_down", w_down, h_slots.shape[1], h_slots)
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (layout.num_tokens, layout.top_k):
            got = list(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ShapeError(
                f"{who}: weights must be [{layout.num_tokens}, {layout.top_k}] (tokens x top_k), got {got}"
            )
        if not weights.is_floating_point() or weights.device != h_slots.device:
            raise UserError(
                f"{who}: weights must be floating point on {h_slots.device}, got {weights.dtype} on {weights.device}"
            )
        self._require_fused(who, h_slots)
        fused = self._combine_op(h_slots, w_down)
        y = fused.call_slots(h_slots, layout.recv_counts, w_down, layout.dest, weights.contiguous())
        self.last_combine_mode, self.combine_reason = "fused", "combine_slots"
        return y

    def _require_fused(self, who: str, x: torch.Tensor) -> None:
        blockers = self._fused_blockers(x)
        if blockers:
            raise UserError(f"{who}: the capacity-slot path is the fused one and cannot run: " + "; ".join(blockers))

    # -- combine ------------------------------------------------------------------------------------
    def combine_gemm(
        self, h: torch.Tensor, w_down: torch.Tensor, layout: DispatchLayout, weights: torch.Tensor
    ) -> torch.Tensor:
        """y [T, H]: each row of h multiplied by its expert's w_down [E/W, N', H], sent back to its
        token's rank and summed there with the routing weights [T, k]."""
        who = "MoeDispatchCombine.combine_gemm"
        if not isinstance(layout, DispatchLayout):
            raise UserError(f"{who}: layout must be the DispatchLayout that dispatch_gemm returned")
        rows = sum(layout.rows_per_expert)
        if not isinstance(h, torch.Tensor) or h.dim() != 2 or h.shape[0] != rows:
            got = list(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
            raise ShapeError(f"{who}: h must be [{rows}, N'] (the rows dispatch_gemm returned), got {got}")
        self._check_weight(who, "w_down", w_down, h.shape[1], h)
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (layout.num_tokens, layout.top_k):
            got = list(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ShapeError(
                f"{who}: weights must be [{layout.num_tokens}, {layout.top_k}] (tokens x top_k), got {got}"
            )
        if not weights.is_floating_point():
            raise UserError(f"{who}: weights must be floating point, got {weights.dtype}")
        self.last_combine_mode, self.combine_reason = self._choose(h, "combine")
        if self.last_combine_mode == "fused":
            back = self._combine_fused(h, w_down, layout)
            return self._weighted_sum(back, layout, weights)
        y = _per_expert_matmul(h, w_down, layout.rows_per_expert)
        arrived = torch.empty_like(y)
        arrived[layout.regroup] = y  # back to the order the rows arrived in
        back = self._all_to_all(arrived, [sum(r) for r in layout.recv_counts], [sum(r) for r in layout.send_counts])
        return self._weighted_sum(back, layout, weights)

    @staticmethod
    def _weighted_sum(back: torch.Tensor, layout: DispatchLayout, weights: torch.Tensor) -> torch.Tensor:
        """y [T, H]: back (the experts' outputs for this rank's rows, in the order they were sent)
        summed per token with the routing weights."""
        scale = weights.reshape(-1)[layout.order].to(torch.float32)
        out = torch.zeros((layout.num_tokens, back.shape[1]), dtype=torch.float32, device=back.device)
        out.index_add_(
            0, torch.div(layout.order, layout.top_k, rounding_mode="floor"), back.to(torch.float32) * scale[:, None]
        )
        return out.to(back.dtype)

    def _combine_fused(self, h: torch.Tensor, w_down: torch.Tensor, layout: DispatchLayout) -> torch.Tensor:
        """The experts' outputs for this rank's rows, in the order they were sent, through
        MoeFusedCombine: h's rows scattered into the dispatch's capacity slots, the notifying
        grouped GEMM, the slots sent home as their tiles finish."""
        from syncopate.ops import moe_fused

        fused = self._combine_op(h, w_down)
        fused.a_slots[_slot_rows(layout.recv_counts, self.capacity, h.device)] = h
        counts = to_device(torch.tensor([v for row in layout.recv_counts for v in row], dtype=torch.int32), h.device)
        dest = moe_fused.sent_rows(layout.send_counts, self.capacity, h.device)
        local = moe_fused.local_rows(layout.send_counts, self.rank)  # gathered in place from y_send
        return fused(fused.a_slots, counts, w_down, dest, local)

    # -- the collectives ----------------------------------------------------------------------------
    def _exchange_counts(self, send_counts: tuple, refused: bool = False):
        """(recv_counts, [ranks other than this one that refuse the call]): each rank's row for
        rank j carries its counts for j's experts and, last, whether it refuses the call."""
        if self.world == 1:
            return send_counts, []
        import torch.distributed as dist

        device = _collective_device(self.group)
        rows = [(*row, int(refused)) for row in send_counts]
        send = torch.tensor(rows, dtype=torch.int64, device=device).reshape(-1)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        got = recv.view(self.world, self.local_experts + 1).tolist()
        refused_by = [s for s, row in enumerate(got) if row[-1] and s != self.rank]
        return tuple(tuple(int(v) for v in row[:-1]) for row in got), refused_by

    def _all_to_all(self, rows: torch.Tensor, send_rows: Sequence[int], recv_rows: Sequence[int]) -> torch.Tensor:
        if self.world == 1:
            return rows
        import torch.distributed as dist

        # gloo moves CPU tensors only (ranks sharing a GPU run over gloo): go through the host.
        device = _collective_device(self.group)
        send = rows.contiguous() if rows.device.type == device.type else rows.to(device)
        out = send.new_empty((sum(recv_rows), rows.shape[1]))
        dist.all_to_all_single(
            out, send, output_split_sizes=list(recv_rows), input_split_sizes=list(send_rows), group=self.group
        )
        return out.to(rows.device)

    # -- checks -------------------------------------------------------------------------------------
    def _check_routing_shapes(self, who: str, x: torch.Tensor, expert_ids: torch.Tensor) -> None:
        """What the host knows without the device: shapes, dtypes, devices."""
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ShapeError(
                f"{who}: x must be a [tokens, hidden] matrix, got "
                f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        if not isinstance(expert_ids, torch.Tensor) or tuple(expert_ids.shape) != (x.shape[0], self.top_k):
            got = list(expert_ids.shape) if isinstance(expert_ids, torch.Tensor) else type(expert_ids).__name__
            raise ShapeError(f"{who}: expert_ids must be [{x.shape[0]}, {self.top_k}] (tokens x top_k), got {got}")
        if expert_ids.dtype not in (torch.int32, torch.int64):
            raise UserError(f"{who}: expert_ids must be int32 or int64, got {expert_ids.dtype}")
        if expert_ids.device != x.device:
            raise UserError(f"{who}: expert_ids is on {expert_ids.device} but x is on {x.device}")

    def _check_weight(self, who: str, name: str, w: torch.Tensor, rows: int, like: torch.Tensor) -> None:
        if not isinstance(w, torch.Tensor) or w.dim() != 3 or w.shape[0] != self.local_experts or w.shape[1] != rows:
            got = list(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
            raise ShapeError(
                f"{who}: {name} must be [{self.local_experts}, {rows}, N] (this rank's experts, "
                f"rows = the input's columns), got {got}"
            )
        if w.dtype != like.dtype or w.device != like.device:
            raise UserError(f"{who}: {name} is {w.dtype} on {w.device} but the input is {like.dtype} on {like.device}")

    def _over_capacity(self, send_counts: tuple) -> bool:
        return self.capacity is not None and any(rows > self.capacity for row in send_counts for rows in row)

    def _check_capacity(self, send_counts: tuple, recv_counts: tuple) -> None:
        """Either side may be () (the fused path checks the send side before the call, the
        receive side after)."""
        if self.capacity is None:
            return
        for r, row in enumerate(send_counts):
            for e, rows in enumerate(row):
                if rows > self.capacity:
                    raise ShapeError(
                        f"MoeDispatchCombine.dispatch_gemm: rank {self.rank} routes {rows} rows to expert "
                        f"{r * self.local_experts + e} (on rank {r}), over its capacity of {self.capacity} rows "
                        f"per rank"
                    )
        # What arrives here is what the senders checked; a sender with another capacity is a bug.
        for s, row in enumerate(recv_counts):
            for e, rows in enumerate(row):
                if rows > self.capacity:
                    raise ShapeError(
                        f"MoeDispatchCombine.dispatch_gemm: rank {s} sent {rows} rows to expert "
                        f"{self.rank * self.local_experts + e} (on rank {self.rank}), over its capacity of "
                        f"{self.capacity}"
                    )


def _collective_device(group) -> torch.device:
    """Where the group's collectives take their integer tensors: CUDA for NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def concat_ranges(bases: Sequence[int], counts: Sequence[int], device: torch.device) -> torch.Tensor:
    """int64 [sum(counts)]: bases[i], bases[i] + 1, ..., bases[i] + counts[i] - 1, for each i in
    turn. Built on the host with NumPy (torch.repeat_interleave on the CPU took about 1 ms a call
    here, the largest host cost of the fused layer in torch.profiler on nvidia-h200) and copied to
    `device` once, without waiting for the device (`to_device`)."""
    import numpy as np

    counts_a = np.asarray(list(counts), dtype=np.int64)
    bases_a = np.asarray(list(bases), dtype=np.int64)
    starts = np.cumsum(counts_a) - counts_a
    total = int(counts_a.sum()) if counts_a.size else 0
    index = np.repeat(bases_a - starts, counts_a) + np.arange(total, dtype=np.int64)
    return to_device(torch.from_numpy(index), device)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device's stream: a copy from pageable
    memory waits for the work queued before it (a fused call's kernel), one from pinned memory
    does not."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _expert_major(recv_counts: tuple, device: torch.device) -> torch.Tensor:
    """For the rows as they arrived (by source rank, then local expert), the permutation that
    groups them by local expert, then source rank."""
    world, experts = len(recv_counts), len(recv_counts[0])
    flat = [recv_counts[s][e] for s in range(world) for e in range(experts)]
    arrival_start = [0, *itertools.accumulate(flat)][:-1]
    order = [(s, e) for e in range(experts) for s in range(world)]
    return concat_ranges(
        [arrival_start[s * experts + e] for s, e in order], [recv_counts[s][e] for s, e in order], device
    )


def _slot_rows(recv_counts: tuple, capacity: int, device: torch.device) -> torch.Tensor:
    """Rows of the fused dispatch's capacity slots (slot s * E + e, `capacity` rows each) in the
    sequential layout's order: by local expert, then source rank, the first recv_counts[s][e]
    rows of each slot."""
    world, experts = len(recv_counts), len(recv_counts[0])
    order = [(s, e) for e in range(experts) for s in range(world)]
    return concat_ranges(
        [(s * experts + e) * capacity for s, e in order], [recv_counts[s][e] for s, e in order], device
    )


def _per_expert_matmul(rows: torch.Tensor, w: torch.Tensor, rows_per_expert: Sequence[int]) -> torch.Tensor:
    """rows grouped by expert ([sum, K]) times each group's w[e] ([K, N]): [sum, N]."""
    out = rows.new_empty((rows.shape[0], w.shape[2]))
    at = 0
    for e, count in enumerate(rows_per_expert):
        if count:
            torch.matmul(rows[at : at + count], w[e], out=out[at : at + count])
        at += count
    return out


def route(logits: torch.Tensor, top_k: int):
    """(expert_ids [T, k] int64, weights [T, k]): the top-k experts of each token and their
    softmax weights renormalised over the k (Mixtral's router)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ShapeError("syncopate.ops.moe.route: logits must be a [tokens, experts] matrix")
    top, ids = torch.topk(logits.float(), top_k, dim=1)
    return ids, torch.softmax(top, dim=1).to(logits.dtype)
