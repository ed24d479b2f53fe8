"""Measurement helpers shared by the benchmarks; the method:

- Random inputs, several sets when one set would sit in L2, so repeats do not time the cache.
- Outputs poisoned with NaN before the checked run; relative error against an fp32 reference.
- Each variant is captured once into a CUDA graph of `inner` calls (launch gaps out of the
  number), then graphs are replayed in rotating order, each replay between two events, and
  the median per call is kept. Rotating the order spreads clock drift over all variants.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

import torch


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN (an unwritten element) gives inf."""
    if not torch.isfinite(out).all():
        return math.inf
    diff = (out.double() - ref.double()).norm()
    return (diff / ref.double().norm()).item()


def input_sets_for(bytes_per_set: int, device: torch.device, max_sets: int = 8) -> int:
    """How many input sets to rotate through so that they together exceed twice the L2."""
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    return max(1, min(max_sets, math.ceil(2 * l2 / max(1, bytes_per_set))))


def time_once_ms(fn: Callable[[], None]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def capture(fn: Callable[[int], None], n_sets: int, inner: int) -> torch.cuda.CUDAGraph:
    """A graph of `inner` calls of fn(set index), rotating over the sets."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            fn(i % n_sets)
    return graph


def time_variants(
    fns: dict[str, Callable[[int], None]],
    n_sets: int,
    samples: int = 25,
    target_sample_ms: float = 1.0,
    max_inner: int = 200,
) -> dict[str, dict]:
    """Median ms per call of each variant, timed in the same run, interleaved.

    Every fn must already have run once (compiled, warmed). Returns {name: {ms, spread}} where
    spread is (p75 - p25) / median, the noise to compare differences against.
    """
    # Size one replay to about target_sample_ms, using the slowest variant's eager time.
    for fn in fns.values():
        for s in range(n_sets):
            fn(s)
    torch.cuda.synchronize()
    eager = max(time_once_ms(lambda f=f: f(0)) for f in fns.values())
    inner = max(1, min(max_inner, math.ceil(target_sample_ms / max(eager, 1e-3))))
    graphs = {name: capture(fn, n_sets, inner) for name, fn in fns.items()}
    for graph in graphs.values():  # warm replay
        graph.replay()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for sample in range(samples):
        shift = sample % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_once_ms(graphs[name].replay) / inner)
    result = {}
    for name, values in times.items():
        values.sort()
        median = statistics.median(values)
        p25 = values[len(values) // 4]
        p75 = values[(3 * len(values)) // 4]
        result[name] = {"ms": median, "spread": (p75 - p25) / median if median > 0 else 0.0, "inner": inner}
    del graphs
    return result
