"""How an op context runs one call's device work: replayed from its own CUDA graph, enqueued
into a graph the caller is capturing, or enqueued eagerly.

A call's work (begin, inputs, publish, fork, fused kernel, chunk issue, end) does not depend on
which call it is: the epoch lives on the device (runtime/epoch.hpp). So it is captured once and
replayed: the host then pays one graph launch per call instead of a few dozen launches, memory
copies and stream writes. A graph bakes in the operands' addresses, so each context keeps a
few graphs keyed by those addresses (a training or serving loop reuses its buffers, so after
the first calls every call is a replay); the least recently used goes when a new one is made.

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
        self._graphs: "OrderedDict[Hashable, torch.cuda.CUDAGraph]" = OrderedDict()
        self.captures = 0  # graphs made so far (a benchmark reads it to see that calls replay)

    @property
    def mode(self) -> str:
        """"graph" (calls replay this context's graphs) or "eager"."""
        return "graph" if self.enabled else "eager"

    def run(self, key: Hashable, enqueue: Callable[[], None]) -> None:
        """Runs one call: enqueue() puts its device work on the current stream."""
        if capturing():
            if self.refusal is not None:
                raise UserError(f"{self.who}: cannot be captured in a CUDA graph: {self.refusal}")
            enqueue()
            return
        if not self.enabled:
            enqueue()
            return
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._capture(enqueue)
            self._graphs[key] = graph
            if len(self._graphs) > self.limit:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        graph.replay()

    def _capture(self, enqueue: Callable[[], None]) -> "torch.cuda.CUDAGraph":
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA calls (a peer rank's thread in one process) must
        # not invalidate this capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            enqueue()
        self.captures += 1
        return graph

    def clear(self) -> None:
        self._graphs.clear()
