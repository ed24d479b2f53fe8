// Launching an instantiated CUDA graph (a call captured by the Python ops, ops/call_graphs.py).
//
// torch.cuda.CUDAGraph.replay() does the same plus per-replay bookkeeping of PyTorch's random
// generators, which a captured Syncopate call never uses; the ops' per-call host time is mostly
// this launch, so they call it directly.
//
// replay_graph_unless is the whole host side of a call that repeats an earlier one (the ops'
// fast path): one call from Python instead of a capture-status query, two timeout looks and the
// launch, each a crossing of its own. It launches nothing when the call must take the full path:
// the stream is being captured (the call's work is recorded into the caller's capture instead),
// or a wait of an earlier call has timed out as far as the host can see (the caller raises it
// before enqueuing more work), or the capture status cannot be read (the full path asks torch,
// which raises its own error).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "syncopate/runtime/host_flag.hpp"
#include "syncopate/runtime/wait_monitor.hpp"

namespace syncopate::runtime {

// cudaGraphLaunch(exec, stream); throws DeviceError naming the CUDA error.
void launch_graph(std::uintptr_t graph_exec, cudaStream_t stream);

// What replay_graph_unless did. Values are shared with ops/call_graphs.py.
enum class ReplayOutcome : int {
  launched = 0,      // the graph was launched on the stream
  capturing = 1,     // the stream is being captured: nothing launched
  timed_out = 2,     // `monitor` or `flag` shows an earlier timeout: nothing launched
  status_error = 3,  // cudaStreamIsCapturing failed (error cleared): nothing launched
};

// Checks, in this order, the stream's capture status, then `monitor`'s record and `flag` (either
// may be null: not watched), and launches `graph_exec` on `stream` only if all are clear.
// Throws DeviceError if the launch itself fails.
ReplayOutcome replay_graph_unless(std::uintptr_t graph_exec, cudaStream_t stream, const WaitMonitor* monitor,
                                  const HostFlag* flag);

// A call captured as two graphs (ops/call_graphs.py, "split graphs"): `head` (the call's start
// and the fused kernel) is launched first on `stream`, so the kernel's start pays for a graph
// of a few nodes only; then `tail` (the chunks, the join, the end) on `side`, whose first node
// waits for an event that `head` records before the kernel; then `stream` waits for `tail`
// (done_event recorded on `side` after the tail; tail_records_done: the tail records it itself,
// as its last node, an external event record captured with it: one host call less), so what the
// caller enqueues next follows the whole call. Throws DeviceError naming the step that failed.
void launch_split_graph(std::uintptr_t head, std::uintptr_t tail, cudaStream_t stream, cudaStream_t side,
                        cudaEvent_t done_event, bool tail_records_done = false);

// replay_graph_unless for a split call: the same checks on `stream`, then launch_split_graph.
ReplayOutcome replay_split_graph_unless(std::uintptr_t head, std::uintptr_t tail, cudaStream_t side,
                                        cudaEvent_t done_event, bool tail_records_done, cudaStream_t stream,
                                        const WaitMonitor* monitor, const HostFlag* flag);

}  // namespace syncopate::runtime
