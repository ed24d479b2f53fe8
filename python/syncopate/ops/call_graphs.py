"""How an op context runs one call's device work: replayed from its own CUDA graph, enqueued
into a graph the caller is capturing, or enqueued eagerly.

A call's work (begin, inputs, publish, fork, fused kernel, chunk issue, end) does not depend on
which call it is: the epoch lives on the device (runtime/epoch.hpp). So it is captured once and
replayed: the host then pays one graph launch per call instead of a few dozen launches, memory
copies and stream writes. A graph bakes in the operands' addresses, so each context keeps a
few graphs keyed by those addresses (a training or serving loop reuses its buffers, so after
the first calls every call is a replay); the least recently used goes when a new one is made.
The first call with new addresses runs eagerly and is then captured for the next ones: what
initialises lazily on first use (cuBLAS's handle for the sequential path, workspaces) must not
happen inside a capture, where it fails.

Split graphs. A fused call's work (FusedCall) is captured as two graphs: the head (the call's
start and the fused kernel) and the tail (the chunks on the plan's side streams, the join, the
end). The head is launched first on the caller's stream and the tail after it on a side stream
of the context; so the kernel starts after a launch of a graph of a few nodes, not of the whole
call (a launch's cost before the first node runs grows with the graph: about 3.5 us more for an
op's graph than for one node on nvidia-h100-x1). Their order on the device: the head records an
external event after the call's start (epoch advance, exit waits, entry raise), by default on a
branch beside the kernel (head_branch), and the tail's first node waits for it, which is what
the fork does in the one-graph form; the head records a second one after the kernel, which the
tail waits for after issuing the chunks and before what reads the kernel's output and the end;
the caller's stream then waits for the tail (an event the tail records as its last node, by
default, or the host after launching it), so what the caller enqueues next, the next call
included, follows the whole call. The launches are one runtime call
(runtime/graph_launch.hpp: launch_split_graph). CallGraphs' docstring has the measurements
behind the defaults.

Inside a caller's `torch.cuda.graph` the work is enqueued as is, into the caller's capture, and
replays correctly for the same reason. Where a configuration cannot be captured (NCCL chunks,
whose host watchdog needs events of each call), the context runs eagerly, and a call inside a
caller's capture raises UserError saying why instead of recording a graph that would replay
wrongly.
"""

from __future__ import annotations

import contextlib
import gc
from collections import OrderedDict
from functools import partial
from typing import Callable, Hashable, Optional

import torch

from syncopate.errors import UserError

# Graphs one context keeps (one per set of operand addresses seen).
MAX_GRAPHS = 8


def capturing() -> bool:
    """Whether the current stream is being captured into a CUDA graph (by the caller)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def collection_held():
    """Holds off Python's automatic cyclic garbage collection for an eager call's window between
    launching a kernel whose tiles wait for chunks and issuing those chunks: a collection there
    may free another context's buffers (an object left in a reference cycle), and cudaFree /
    cudaFreeHost synchronize the device, so the host would wait for a kernel that waits for the
    host until the kernel's wait bound ends it (seen in the MoE dispatch on nvidia-h200,
    2026-12-03). A graph replay has no such window (one runtime call)."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class FusedCall:
    """One fused call's device work in the order the call path needs it, as steps a graph can
    be cut between (module docstring, "Split graphs"):

        start()    the call's start on the current stream (begin_and_publish, or begin, the
                   inputs put in place, publish)
        fork       the plan's side streams start after what the stream holds now (ws.fork)
        launch()   the fused kernel
        chunks     every chunk step on the side streams (ws.issue_chunks)
        finish()   what reads the kernel's output or the landed chunks before the end (a wait
                   for every landing slot, a copy out of the heap); None: nothing
        end        join the side streams, raise the exit counter (ws.end)
        after()    the kernel's timeout flag copied to the host (OpContext._run_call); None: nothing

    Called, it enqueues them all on the current stream in this order (eager, a caller's
    capture, a one-graph capture)."""

    __slots__ = ("ws", "start", "launch", "finish", "after")

    def __init__(self, ws, start: Callable[[], None], launch: Callable[[], None], finish=None, after=None):
        self.ws, self.start, self.launch, self.finish, self.after = ws, start, launch, finish, after

    def __call__(self) -> None:
        ws = self.ws
        self.start()
        ws.fork()
        with collection_held():
            self.launch()
            ws.issue_chunks()
        self.tail_rest()

    def tail_rest(self) -> None:
        """finish, end, after (on the current stream)."""
        if self.finish is not None:
            self.finish()
        self.ws.end()
        if self.after is not None:
            self.after()


class _Graph:
    """A captured call: torch's graph (which owns the executable and the capture's memory pool)
    and the executable's handle, launched through the runtime (graph_launch.hpp: no per-replay
    bookkeeping of PyTorch's random generators, which a Syncopate call never uses) on the
    current stream of the device it was captured on. The stream is read as a raw handle
    (what Triton's launcher does): building a torch.cuda.Stream object per replay cost
    microseconds of the call's host time."""

    __slots__ = ("graph", "exec_handle", "launch", "launch_unless", "device")
    split = False

    def __init__(self, graph: "torch.cuda.CUDAGraph", device: int):
        from syncopate.runtime import require_runtime

        runtime = require_runtime()
        self.graph = graph
        self.exec_handle = int(graph.raw_cuda_graph_exec())
        # Both take the current stream (and the timeout records) only: what the graph is bound in.
        self.launch = partial(runtime.launch_graph, self.exec_handle)
        self.launch_unless = partial(runtime.replay_graph_unless, self.exec_handle)
        self.device = device

    def replay(self) -> None:
        self.launch(torch._C._cuda_getCurrentRawStream(self.device))

    def replay_unless(self, monitor, flag) -> bool:
        """Launches the graph unless the current stream is being captured or `monitor` / `flag`
        (the runtime's wait record, the kernel's host flag; None: not watched) show an earlier
        timeout: all in one runtime call (graph_launch.hpp). True if it launched."""
        return self.launch_unless(torch._C._cuda_getCurrentRawStream(self.device), monitor, flag)


class _SplitGraph(_Graph):
    """A FusedCall captured as a head and a tail graph (module docstring, "Split graphs"), with
    the side stream the tail runs on and the event the caller's stream waits for after it;
    replayed by one runtime call, like _Graph (the same launch / launch_unless signatures)."""

    __slots__ = ("tail", "events", "side")
    split = True

    def __init__(self, head, tail, side: "torch.cuda.Stream", events, device: int, tail_records_done: bool = False):
        from syncopate.runtime import require_runtime

        runtime = require_runtime()
        self.graph, self.tail, self.side, self.events, self.device = head, tail, side, events, device
        self.exec_handle = int(head.raw_cuda_graph_exec())
        bound = (
            self.exec_handle,
            int(tail.raw_cuda_graph_exec()),
            int(side.cuda_stream),
            int(events[-1].cuda_event),
            bool(tail_records_done),
        )
        self.launch = partial(runtime.launch_split_graph, *bound)
        self.launch_unless = partial(runtime.replay_split_graph_unless, *bound)


class CallGraphs:
    """One context's call graphs.

    enabled: replay calls from graphs (False: every call is enqueued eagerly).
    refusal: why this context's work cannot be captured at all (None if it can); then calls run
    eagerly and a call inside a caller's capture raises UserError naming `who` and the reason.
    split: a FusedCall is captured as a head and a tail graph (module docstring); False: as one.
    head_branch: in the head, the event the tail waits for is recorded on a branch beside the
    kernel (the kernel depends on the call's start alone) instead of between the start and the
    kernel; tail_records_done: the tail graph records the event the caller's stream waits for as
    its last node (an external event record) instead of the host after launching it (one host
    call less). Both are on by default: on nvidia-h200 (2026-12-03, bench_call_path.py, world 1,
    12 rows in one run) that form started the GEMM sooner than the split without them on 10 rows
    (by up to 3.3 us; the other two, 0.0 and -2.6 us, on rows where a bare one-node graph took
    12-16 us) and cost the host less on 11 (by up to 9.2 us); the call as one graph
    (split=False) costs the host 4.9-11.6 us less but starts the GEMM 0.5-9.2 us later
    (docs/RUNTIME.md, "The call path").
    """

    def __init__(
        self,
        who: str,
        *,
        enabled: bool,
        refusal: Optional[str] = None,
        limit: int = MAX_GRAPHS,
        split: bool = True,
        head_branch: bool = True,
        tail_records_done: bool = True,
    ):
        self.who = who
        self.refusal = refusal
        self.enabled = bool(enabled) and refusal is None
        self.split = bool(split)
        self.head_branch = bool(head_branch)
        self.tail_records_done = bool(tail_records_done)
        self.limit = int(limit)
        self._graphs: "OrderedDict[Hashable, _Graph]" = OrderedDict()
        self.captures = 0  # graphs made so far (a benchmark reads it to see that calls replay)
        self._side = None  # the stream split graphs' tails run on (made at the first split capture)
        self._branch = None  # a second capture stream (head_branch)

    @property
    def mode(self) -> str:
        """ "graph" (calls replay this context's graphs) or "eager"."""
        return "graph" if self.enabled else "eager"

    def run(self, key: Hashable, enqueue: Callable[[], None], under_capture: Optional[bool] = None) -> None:
        """Runs one call: enqueue() puts its device work on the current stream. under_capture:
        whether the current stream is being captured by the caller, if the caller has asked
        already (one query per call: each costs host time)."""
        if under_capture is None:
            under_capture = capturing()
        if not self.enabled:
            if self.refusal is not None and under_capture:
                raise UserError(f"{self.who}: cannot be captured in a CUDA graph: {self.refusal}")
            enqueue()
            return
        if under_capture:  # the caller's capture: record into it
            enqueue()
            return
        graph = self._graphs.get(key)
        if graph is None:
            enqueue()  # this call, eagerly (and everything lazily initialised, outside a capture)
            self._graphs[key] = self._capture(enqueue)
            if len(self._graphs) > self.limit:
                self._graphs.popitem(last=False)
            return
        self._graphs.move_to_end(key)
        graph.replay()

    def replay_cached(self, key: Hashable, monitor=None, flag=None) -> bool:
        """The fast path of a call that repeats an earlier one: replays the graph captured for
        `key` and returns True, unless graphs are off or there is none, the current stream is being captured, or
        `monitor` / `flag` show an earlier timeout; then nothing is launched and False says the
        call must take the full path (run), which enqueues into the caller's capture or raises
        the timeout. The caller has checked that its operands are what the graph was captured
        for (OpContext._replay_if_cached)."""
        if not self.enabled:  # graphs turned off after some were made: every call eager
            return False
        graph = self._graphs.get(key)
        if graph is None:
            return False
        # _Graph.replay_unless, spelled out: one Python call less on the fast path.
        if not graph.launch_unless(torch._C._cuda_getCurrentRawStream(graph.device), monitor, flag):
            return False
        if len(self._graphs) > 1:
            self._graphs.move_to_end(key)
        return True

    def _capture(self, enqueue: Callable[[], None]) -> _Graph:
        if self.split and isinstance(enqueue, FusedCall):
            return self._capture_split(enqueue)
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA calls (a peer rank's thread in one process) must
        # not invalidate this capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            enqueue()
        self.captures += 1
        return _Graph(graph, torch.cuda.current_device())

    def _capture_split(self, call: FusedCall) -> _SplitGraph:
        """The head and the tail graph of `call` (module docstring, "Split graphs")."""
        device = torch.cuda.current_device()
        if self._side is None:
            # The highest priority, as the plan's own side streams: the tail's waits and
            # chunk issue must not queue behind a long kernel of the caller's.
            low, high = torch.cuda.Stream.priority_range()
            self._side = torch.cuda.Stream(device=device, priority=high)
        side = self._side
        started = torch.cuda.Event(external=True)  # after the call's start, before the kernel
        launched = torch.cuda.Event(external=True)  # after the kernel
        # Recorded on `side` after the tail by every replay (by the host, or as the tail's last
        # node: tail_records_done).
        done = torch.cuda.Event(external=self.tail_records_done)
        done.record(side)  # made now (outside any capture: a plain record): the replay takes its handle
        head, tail = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(head, capture_error_mode="thread_local"):
            call.start()
            if self.head_branch:
                stream = torch.cuda.current_stream()
                branch = self._branch_stream(device)
                branch.wait_stream(stream)
                started.record(branch)
                call.launch()
                launched.record()
                stream.wait_stream(branch)  # rejoined: a capture ends on its own stream
            else:
                started.record()
                call.launch()
                launched.record()
        with torch.cuda.graph(tail, stream=side, capture_error_mode="thread_local"):
            side.wait_event(started)
            call.ws.fork()
            call.ws.issue_chunks()
            side.wait_event(launched)
            call.tail_rest()
            if self.tail_records_done:
                done.record(side)
        self.captures += 1
        return _SplitGraph(head, tail, side, (started, launched, done), device, self.tail_records_done)

    def _branch_stream(self, device: int) -> "torch.cuda.Stream":
        """The second capture stream of a head with the start event on a branch (head_branch)."""
        if self._branch is None:
            self._branch = torch.cuda.Stream(device=device)
        return self._branch

    def clear(self) -> None:
        self._graphs.clear()
