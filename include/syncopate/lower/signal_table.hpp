// Lowering: from a verified CommPlan and a tile grid to one SignalTable per rank.
//
// Signals carry epochs: call e (1, 2, ...) of the same plan waits for slot >= e * writers, so
// no reset kernel runs between calls. Slots live in the symmetric heap of the rank that waits.
//  - A *landing* slot exists on rank r for every chunk whose dst is r; its one writer is the
//    backend that lands the chunk.
//  - A *ready* slot exists on rank r for every chunk whose src is r and whose source box a
//    producer tile writes (GEMM+RS); its writers are the tiles covering the box; the chunk may
//    leave once the slot reaches e * writers.
//  - A *dst-ready* slot exists on rank r for every chunk whose dst is r and whose destination
//    box a producer tile on r writes; its writers are those tiles. The chunk may land (add into,
//    or overwrite, that box) only once the slot reaches e * writers: a reduce-add landing before
//    the local partial is stored would be overwritten by the store (write-after-write hazard).
// An m_local_shard access (tiling.hpp) is resolved on the rank whose tiles wait or notify: a
// landing slot on the chunk's dst, ready slots on its src, dst-ready slots on its dst.
// Staged GEMM+RS ("c" produce rows 1 cols 2, "p" consume m_local_shard rows 1 cols 2): on rank r
// the tiles of its own row box wait on the landing slots of the staging chunks of their rows
// from every other rank; the other tiles wait on nothing and notify the ready slot of the chunk
// that ships their rows. A tile straddling two boxes (M / W not a multiple of BLOCK_M) gets both,
// and the two ranks' straddling tiles then wait on each other's ready chunks: a cross-rank cycle
// that lowering does not detect, so staged plans need M / W % BLOCK_M == 0.
//
// Slot layout per rank: landing slots first (chunk id order, so slot == index among the chunks
// landing here), then ready slots, then dst-ready slots, each in chunk id order. Wait and notify
// lists are sorted ascending and hold no duplicates. signal_table_csr.hpp flattens the lists
// into int32 CSR arrays for a kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::lower {

enum class SlotKind { landing, ready, dst_ready };

struct SignalSlot {
  int slot = 0;  // index in this rank's slot array
  SlotKind kind = SlotKind::landing;
  int chunk = 0;    // chunk id this slot tracks
  int writers = 1;  // increments per call
};

struct SignalTable {
  int rank = 0;
  std::vector<SignalSlot> slots;
  std::vector<int> landing_slot_of_chunk;       // by chunk id; -1 if the chunk does not land here
  std::vector<int> ready_slot_of_chunk;         // by chunk id; -1 if no producer tile gates it here
  std::vector<int> dst_ready_slot_of_chunk;     // by chunk id; -1 if no local tile writes its dst box
  std::vector<std::vector<int>> tile_waits;     // by tile id: landing slots to wait on
  std::vector<std::vector<int>> tile_notifies;  // by tile id: ready and dst-ready slots to increment

  // Value slot `s` must reach for call `epoch` (epochs start at 1).
  std::int64_t expected(int s, std::int64_t epoch) const { return epoch * slots.at(s).writers; }
};

// One table per rank. `accesses` lists the tensors the local kernel consumes or produces.
// Throws UserError if a tensor is not in the plan or a dim is out of range, naming both, or if
// the grid does not match the tensor's extent on m_dim / n_dim. Call on a verified plan; a plan
// whose chunks name unknown ranks or tensors gets a UserError, never undefined behaviour.
std::vector<SignalTable> lower(const plan::CommPlan& plan, const TileGrid& grid,
                               const std::vector<TileAccess>& accesses);

}  // namespace syncopate::lower
