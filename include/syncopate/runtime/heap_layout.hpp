// Where everything a plan needs lives inside one rank's symmetric heap.
//
// The heap is the same size on every rank and every region sits at the same offset on every
// rank, so a peer's copy of region X is peer_base + offset(X). Regions, each 256-byte aligned:
//   control  int32[kControlSlots]  entry (inputs of call e are in place) and exit (call e is
//                                  done with every buffer) counters, one writer each, and this
//                                  rank's epoch: the number of the call in flight, advanced on
//                                  the device by each call (so a captured CUDA graph replays
//                                  correctly); read only by this rank
//   signals  int32[num_signal_slots]  the SignalTable slots (the `sy_signals` array a
//                                  transformed kernel gets); max over ranks, so symmetric
//   tensors  every plan tensor, in name order, row-major
//   staging  one area per chunk that lands through a bounce buffer (copy-engine or NCCL
//            reduce-add, NCCL boxes that are not contiguous)
// Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::runtime {

inline constexpr int kEntrySlot = 0;
inline constexpr int kExitSlot = 1;
inline constexpr int kEpochSlot = 2;
inline constexpr int kControlSlots = 3;
inline constexpr std::int64_t kHeapAlign = 256;

struct HeapLayout {
  std::int64_t control_offset = 0;
  std::int64_t signals_offset = 0;
  int num_signal_slots = 0;
  std::map<std::string, std::int64_t> tensor_offsets;
  std::vector<std::int64_t> staging_offset_of_chunk;  // by chunk id; -1 when none
  std::int64_t total_bytes = 0;

  // Throws UserError naming the tensor and the tensors the plan has.
  std::int64_t tensor_offset(const std::string& name) const;
};

// True when chunk `c` of `plan` needs a staging area (see the file comment).
bool needs_staging(const plan::CommPlan& plan, const plan::Chunk& c);

// Lays out the heap for `plan` and its per-rank `tables` (one per rank, from lower::lower).
// Throws UserError when the tables do not match the plan's world size.
HeapLayout make_heap_layout(const plan::CommPlan& plan, const std::vector<lower::SignalTable>& tables);

}  // namespace syncopate::runtime
