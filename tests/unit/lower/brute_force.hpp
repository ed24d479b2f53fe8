// Independent, element-by-element answers to "which tiles touch which chunks", for small shapes.
// Deliberately shares no code with lowering: it walks every element of every box.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <set>

#include <gtest/gtest.h>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::testing {

// Calls fn(index) for every element index of `box`.
inline void for_each_element(const plan::Box& box, const std::function<void(const std::vector<std::int64_t>&)>& fn) {
  for (auto e : box.extent)
    if (e <= 0) return;
  std::vector<std::int64_t> idx = box.offset;
  while (true) {
    fn(idx);
    std::size_t d = idx.size();
    while (d > 0) {
      --d;
      if (++idx[d] < box.offset[d] + box.extent[d]) break;
      idx[d] = box.offset[d];
      if (d == 0) return;
    }
    if (idx.empty()) return;
  }
}

// Grid row of tensor row 0 on m_dim: rank * E for an m_local_shard access (E = the tensor's
// extent on m_dim), 0 otherwise.
inline std::int64_t row_shift(const plan::CommPlan& plan, const lower::TileAccess& access, int rank) {
  if (!access.m_local_shard) return 0;
  return std::int64_t{rank} * plan.tensors.at(access.tensor).shape.at(access.m_dim);
}

// Tiles whose row range / column range contains element `idx` under `access`; the element's
// row on m_dim is grid row idx[m_dim] + shift.
inline std::set<int> tiles_of_element(const lower::TileGrid& grid, const lower::TileAccess& access,
                                      const std::vector<std::int64_t>& idx, std::int64_t shift = 0) {
  std::set<int> tiles;
  for (std::int64_t tm = 0; tm < grid.tiles_m(); ++tm)
    for (std::int64_t tn = 0; tn < grid.tiles_n(); ++tn) {
      const bool row_ok = access.m_dim < 0 || (idx[access.m_dim] + shift >= tm * grid.block_m &&
                                               idx[access.m_dim] + shift < (tm + 1) * grid.block_m);
      const bool col_ok =
          access.n_dim < 0 || (idx[access.n_dim] >= tn * grid.block_n && idx[access.n_dim] < (tn + 1) * grid.block_n);
      if (row_ok && col_ok) tiles.insert(static_cast<int>(tm * grid.tiles_n() + tn));
    }
  return tiles;
}

inline std::set<int> tiles_touching_box(const lower::TileGrid& grid, const lower::TileAccess& access,
                                        const plan::Box& box, std::int64_t shift = 0) {
  std::set<int> tiles;
  for_each_element(box, [&](const std::vector<std::int64_t>& idx) {
    for (int t : tiles_of_element(grid, access, idx, shift)) tiles.insert(t);
  });
  return tiles;
}

// Per tile of rank `rank`: chunks landing on `rank` in access.tensor at an element it reads.
inline std::vector<std::set<int>> brute_waits(const plan::CommPlan& plan, const lower::TileGrid& grid,
                                              const lower::TileAccess& access, int rank) {
  std::vector<std::set<int>> waits(static_cast<std::size_t>(grid.count()));
  for (const auto& c : plan.chunks) {
    if (c.dst != rank || c.dst_tensor != access.tensor) continue;
    for (int t : tiles_touching_box(grid, access, c.dst_box, row_shift(plan, access, rank))) waits[t].insert(c.id);
  }
  return waits;
}

// The chunks behind each tile's slots in `lists` (tile_waits or tile_notifies).
inline std::vector<std::set<int>> chunks_of(const lower::SignalTable& table,
                                            const std::vector<std::vector<int>>& lists) {
  std::vector<std::set<int>> out(lists.size());
  for (std::size_t t = 0; t < lists.size(); ++t)
    for (int s : lists[t]) out[t].insert(table.slots.at(s).chunk);
  return out;
}

// Producer side: per tile of `rank`, the (slot kind, chunk) pairs it must notify: ready for
// chunks leaving `rank` from what it writes, dst-ready for chunks landing on what it writes.
using KindChunk = std::pair<lower::SlotKind, int>;

// Per tile of `rank`: the (kind, chunk) pairs the tile must notify, element by element.
inline std::vector<std::set<KindChunk>> brute_notifies(const plan::CommPlan& plan, const lower::TileGrid& grid,
                                                       const lower::TileAccess& access, int rank) {
  std::vector<std::set<KindChunk>> out(static_cast<std::size_t>(grid.count()));
  const std::int64_t shift = row_shift(plan, access, rank);
  for (const auto& c : plan.chunks) {
    if (c.src == rank && c.tensor == access.tensor)
      for (int t : tiles_touching_box(grid, access, c.box, shift)) out[t].insert({lower::SlotKind::ready, c.id});
    if (c.dst == rank && c.dst_tensor == access.tensor)
      for (int t : tiles_touching_box(grid, access, c.dst_box, shift))
        out[t].insert({lower::SlotKind::dst_ready, c.id});
  }
  return out;
}

inline void expect_notifies_match_brute_force(const plan::CommPlan& plan, const lower::TileGrid& grid,
                                              const lower::TileAccess& access) {
  const auto tables = lower::lower(plan, grid, {access});
  for (const auto& table : tables) {
    SCOPED_TRACE(::testing::Message() << "rank " << table.rank);
    const auto expected = brute_notifies(plan, grid, access, table.rank);
    std::map<int, int> listed;  // slot -> tiles listing it
    for (std::int64_t t = 0; t < grid.count(); ++t) {
      std::set<KindChunk> actual;
      for (int s : table.tile_notifies[t]) {
        actual.insert({table.slots[s].kind, table.slots[s].chunk});
        ++listed[s];
      }
      EXPECT_EQ(actual, expected[t]) << "tile " << t;
    }
    for (const auto& slot : table.slots) {
      if (slot.kind == lower::SlotKind::landing) continue;
      EXPECT_EQ(slot.writers, listed[slot.slot]) << "slot " << slot.slot;
      const auto& c = plan.chunks[slot.chunk];
      const auto& box = slot.kind == lower::SlotKind::ready ? c.box : c.dst_box;
      const int owner = slot.kind == lower::SlotKind::ready ? c.src : c.dst;
      EXPECT_EQ(slot.writers,
                static_cast<int>(tiles_touching_box(grid, access, box, row_shift(plan, access, owner)).size()));
      const auto& by_chunk =
          slot.kind == lower::SlotKind::ready ? table.ready_slot_of_chunk : table.dst_ready_slot_of_chunk;
      EXPECT_EQ(by_chunk[slot.chunk], slot.slot);
    }
  }
}

}  // namespace syncopate::testing
