// The simulator's output: when each chunk and each tile ran, on every rank.
#pragma once

#include <string>
#include <vector>

#include "syncopate/plan/enums.hpp"

namespace syncopate::sim {

// One chunk's life, in microseconds from the start of the call.
//   ready:        its stream predecessors and deps have landed and its producer tiles are done
//   start:        it got a lane (copy engine, SM-copy lane, NCCL channel) and began moving
//   transfer_end: its last byte is through the link
//   arrival:      the signal is visible on its destination (transfer_end + latency + add_us +
//                 signal)
//   add_us:       a reduce-add's add step on its destination (copy engine, NCCL), else 0
struct ChunkTiming {
  int chunk = 0;
  int src = 0;
  int dst = 0;
  plan::Backend backend = plan::Backend::copy_engine;
  int issuer = 0;  // the rank whose stream issues it (the source, for NCCL)
  int stream = 0;  // its stream on the issuer
  double bytes = 0;
  double ready = 0;
  double start = 0;
  double transfer_end = 0;
  double arrival = 0;
  double add_us = 0;
};

// One rank's call as a user times it (fused and kernel-level modes; the others leave it empty),
// from the call's start: its (kernel-level: last) kernel is launched on the device at
// kernel_launch (fused: after the call path's preamble and, for AG+GEMM, the local shard copy;
// its first tile starts one launch overhead later; kernel-level: when the host launches it),
// the GPU finishes its tiles and the chunks landing here at gpu_end, a GEMM+RS/AR then copies
// its result out of the heap (copy_out_start .. copy_out_end, equal when there is none), the
// host returns at host_return, and the call ends at `end`, no earlier than both.
struct RankEnd {
  double kernel_launch = 0;
  double gpu_end = 0;
  double copy_out_start = 0;
  double copy_out_end = 0;
  double host_return = 0;
  double end = 0;
};

// One tile's run on one SM worker. `start` is when its inputs had landed and it began computing
// (the worker may have spun on its waits before that, from `claimed`).
struct TileTiming {
  int rank = 0;
  int tile = 0;
  int worker = 0;
  int kernel = 0;  // 0 in a fused call; the chunked GEMM's kernel index in kernel-level overlap
  // The chunk that sets the tile's arrival group: the last-landing chunk it (or its kernel)
  // waited for; else the first-leaving chunk it helps produce; -1 when neither (local work).
  int group_chunk = -1;
  double claimed = 0;
  double start = 0;
  double end = 0;
};

struct Timeline {
  std::string label;  // "fused", "kernel-level", "sequential", ...
  int world_size = 0;
  std::vector<int> workers;         // per rank: SM workers of its compute kernel
  std::vector<ChunkTiming> chunks;  // by chunk id
  std::vector<TileTiming> tiles;    // every tile of every rank, by (rank, position in order)
  std::vector<RankEnd> rank_ends;   // fused and kernel-level: per rank, launch, copy-out, end
  double total_us = 0;              // the last event on any rank
};

}  // namespace syncopate::sim
