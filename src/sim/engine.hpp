// The event-driven core of the simulator (internal).
//
// It knows nothing of plans, signal tables or execution modes: modes.cpp turns a fused call
// into an EngineInput for each mode (fused, kernel-level, sequential, compute or communication
// alone), and the engine plays it out.
//
// Resources and rules:
//  - A chunk is *ready* once every chunk in `after` has landed and every tile in `gate_tiles`
//    and kernel in `gate_kernels` has finished (then `gate_delay_us` later), and not before
//    `not_before_us`.
//  - A ready chunk waits for a free lane of its backend on its issuing GPU (concurrency), FIFO
//    by ready time then id; then its bytes flow over its link, sharing bandwidth max-min fairly
//    with every flow on the same (src, dst, backend) link, the source GPU's egress and the
//    destination GPU's ingress; it lands latency + signal latency after its last byte. A chunk
//    between nodes (`inter_node`) shares the source GPU's NIC egress and the destination's NIC
//    ingress instead (calib.network, not slowed by compute) and pays the network's latency.
//  - Each rank runs its kernels one after the other. Kernel k launches at
//    max(end of kernel k-1, last arrival of its `waits` + sync) + launch. Its tiles go to
//    `workers` SM workers in the kernel's order: statically (worker w takes positions w, w+W,
//    ...: a persistent kernel) or dynamically (the next tile to the first free worker). A worker
//    claims its next tile, spins until the tile's own waits have landed, then computes it.
//  - While a kernel runs on either end, a link moves bytes at the backend's under-compute
//    bandwidth (calibration), and a reduce-add chunk with `add_step` is added into place on its
//    destination after its transfer: bytes / the add rate (under compute while a kernel runs
//    there), before its signal. A kernel starts no earlier than its `not_before_us` (the host
//    enqueues it then) plus the launch overhead.
//  - A rank computes `compute_slowdown` times slower while chunks of a backend with that
//    slowdown are moving into or out of it (the largest factor of those in flight applies).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "syncopate/sim/calibration.hpp"
#include "syncopate/sim/timeline.hpp"

namespace syncopate::sim::detail {

struct EngineChunk {
  int src = 0;
  int dst = 0;
  plan::Backend backend = plan::Backend::copy_engine;
  double bytes = 0;
  int issuer = 0;                                 // the GPU whose lanes it occupies
  int stream = 0;                                 // for the trace: its stream on the issuer
  std::vector<int> after;                         // chunks that land before it starts
  std::vector<std::pair<int, int>> gate_tiles;    // (rank, tile) that finish before it starts
  std::vector<std::pair<int, int>> gate_kernels;  // (rank, kernel) that finish before it starts
  double gate_delay_us = 0;                       // after the last gate tile or kernel finishes
  double not_before_us = 0;
  bool add_step = false;    // a reduce-add added in place after its transfer
  bool inter_node = false;  // between nodes: over the network (calib.network)
};

struct EngineKernel {
  std::vector<int> tiles;    // tile ids in execution order
  std::vector<int> waits;    // chunks that land before the kernel launches
  double not_before_us = 0;  // when the host enqueues it (the launch overhead comes on top)
};

struct EngineRank {
  int workers = 1;
  double tile_work_us = 0;                   // one tile's time at full speed
  std::vector<double> tile_scale;            // by tile id: its share of tile_work_us (empty: 1)
  int tile_count = 0;                        // tile ids are 0 .. tile_count-1
  std::vector<EngineKernel> kernels;         // together they hold every tile once
  std::vector<std::vector<int>> tile_waits;  // by tile id (may be empty: no per-tile waits)
};

struct EngineInput {
  std::string label;
  std::vector<EngineChunk> chunks;  // index = chunk id
  std::vector<EngineRank> ranks;
  bool dynamic_assignment = false;
  bool compute_slowdown = true;  // false: compute alone, or modes where nothing overlaps
};

// Throws UserError (rule "deadlock") when something can never run, naming the rank and chunk
// or tile, and InternalError if the input is inconsistent (a tile listed twice, ...).
Timeline run_engine(const EngineInput& input, const Calibration& calib);

}  // namespace syncopate::sim::detail
