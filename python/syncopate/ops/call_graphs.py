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

Inside a caller's `torch.cuda.graph` the work is enqueued as is, into the caller's capture, and
replays correctly for the same reason. Where a configuration cannot be captured (NCCL chunks,
whose host watchdog needs events of each call), the context runs eagerly, and a call inside a
caller's capture raises UserError saying why instead of recording a graph that would replay
wrongly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Optional

import torch

from syncopate.errors import UserError

# Graphs one context keeps (one per set of operand addresses seen).
MAX_GRAPHS = 8


def capturing() -> bool:
    """Whether the current stream is being captured into a CUDA graph (by the caller)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class _Graph:
    """A captured call: torch's graph (which owns the executable and the capture's memory pool)
    and the executable's handle, launched through the runtime (graph_launch.hpp: no per-replay
    bookkeeping of PyTorch's random generators, which a Syncopate call never uses) on the
    current stream of the device it was captured on. The stream is read as a raw handle
    (what Triton's launcher does): building a torch.cuda.Stream object per replay cost
    microseconds of the call's host time."""

    __slots__ = ("graph", "exec_handle", "launch", "launch_unless", "device")

    def __init__(self, graph: "torch.cuda.CUDAGraph", device: int):
        from syncopate.runtime import require_runtime

        runtime = require_runtime()
        self.graph = graph
        self.exec_handle = int(graph.raw_cuda_graph_exec())
        self.launch = runtime.launch_graph
        self.launch_unless = runtime.replay_graph_unless
        self.device = device

    def replay(self) -> None:
        self.launch(self.exec_handle, torch._C._cuda_getCurrentRawStream(self.device))

    def replay_unless(self, monitor, flag) -> bool:
        """Launches the graph unless the current stream is being captured or `monitor` / `flag`
        (the runtime's wait record, the kernel's host flag; None: not watched) show an earlier
        timeout: all in one runtime call (graph_launch.hpp). True if it launched."""
        stream = torch._C._cuda_getCurrentRawStream(self.device)
        return self.launch_unless(self.exec_handle, stream, monitor, flag)


class CallGraphs:
    """One context's call graphs.

    enabled: replay calls from graphs (False: every call is enqueued eagerly).
    refusal: why this context's work cannot be captured at all (None if it can); then calls run
    eagerly and a call inside a caller's capture raises UserError naming `who` and the reason.
    """

    def __init__(self, who: str, *, enabled: bool, refusal: Optional[str] = None, limit: int = MAX_GRAPHS):
        self.who = who
        self.refusal = refusal
        self.enabled = bool(enabled) and refusal is None
        self.limit = int(limit)
        self._graphs: "OrderedDict[Hashable, _Graph]" = OrderedDict()
        self.captures = 0  # graphs made so far (a benchmark reads it to see that calls replay)

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
        stream = torch._C._cuda_getCurrentRawStream(graph.device)
        if not graph.launch_unless(graph.exec_handle, stream, monitor, flag):
            return False
        if len(self._graphs) > 1:
            self._graphs.move_to_end(key)
        return True

    def _capture(self, enqueue: Callable[[], None]) -> _Graph:
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA calls (a peer rank's thread in one process) must
        # not invalidate this capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            enqueue()
        self.captures += 1
        return _Graph(graph, torch.cuda.current_device())

    def clear(self) -> None:
        self._graphs.clear()
