// lower(): a verified plan and a tile grid -> one SignalTable per rank (see signal_table.hpp).
//
// Each chunk is visited once per slot kind; the tiles it concerns come from tiles_touching() on
// the rank whose tiles they are (an m_local_shard access maps a box to different tiles on each
// rank), a rectangle of the grid, so the cost is the number of (chunk, tile) pairs that matter, not
// chunks x tiles.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tile_region.hpp"

namespace syncopate::lower {
namespace {

[[noreturn]] void unverified(int chunk, const std::string& rule, const std::string& detail) {
  throw UserError(fmt::format("chunks[{}]: {}: {} (lower() needs a verified plan)", chunk, rule, detail));
}

// The checks lowering relies on to index safely; the verifier makes them (and many more).
void check_plan_shape(const plan::CommPlan& plan) {
  if (plan.world_size < 1)
    throw UserError(fmt::format("world_size: bad-world-size: {} (lower() needs a verified plan)", plan.world_size));
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    const auto& c = plan.chunks[i];
    const int id = static_cast<int>(i);
    if (c.id != id) unverified(id, "id-not-index", fmt::format("id is {}", c.id));
    if (c.src < 0 || c.src >= plan.world_size || c.dst < 0 || c.dst >= plan.world_size)
      unverified(id, "rank-out-of-range",
                 fmt::format("src {} / dst {} with world_size {}", c.src, c.dst, plan.world_size));
    for (const auto& [name, box] : {std::pair{&c.tensor, &c.box}, std::pair{&c.dst_tensor, &c.dst_box}}) {
      const auto it = plan.tensors.find(*name);
      if (it == plan.tensors.end())
        unverified(id, "unknown-tensor", fmt::format("tensor \"{}\" is not in the plan", *name));
      if (box->offset.size() != it->second.shape.size() || box->extent.size() != it->second.shape.size())
        unverified(id, "box-rank-mismatch",
                   fmt::format("box of \"{}\" has {} dims, the tensor has {}", *name, box->offset.size(),
                               it->second.shape.size()));
    }
  }
}

// Linear ids of every tile of `rank` whose region under a `role` access of `tensor` meets `box`.
std::vector<int> tiles_for(const plan::CommPlan& plan, const TileGrid& grid, const std::vector<TileAccess>& accesses,
                           AccessRole role, const std::string& tensor, const plan::Box& box, int rank) {
  std::vector<int> tiles;
  for (const auto& access : accesses) {
    if (access.role != role || access.tensor != tensor) continue;
    const TileRect rect = tiles_touching(grid, access, plan.tensors.at(tensor).shape, box, rank);
    if (rect.empty()) continue;
    for (auto tm = rect.rows.begin; tm < rect.rows.end; ++tm)
      for (auto tn = rect.cols.begin; tn < rect.cols.end; ++tn)
        tiles.push_back(static_cast<int>(tm * grid.tiles_n() + tn));
  }
  std::sort(tiles.begin(), tiles.end());
  tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
  return tiles;
}

int add_slot(SignalTable& table, SlotKind kind, int chunk, int writers) {
  const int slot = static_cast<int>(table.slots.size());
  table.slots.push_back({slot, kind, chunk, writers});
  return slot;
}

void sort_unique(std::vector<std::vector<int>>& lists) {
  for (auto& list : lists) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
}

}  // namespace

std::vector<SignalTable> lower(const plan::CommPlan& plan, const TileGrid& grid,
                               const std::vector<TileAccess>& accesses) {
  validate_grid(grid);
  for (const auto& access : accesses) validate_access(plan, grid, access);
  check_plan_shape(plan);

  const auto num_chunks = plan.chunks.size();
  const auto num_tiles = static_cast<std::size_t>(grid.count());
  std::vector<SignalTable> tables(static_cast<std::size_t>(plan.world_size));
  for (int r = 0; r < plan.world_size; ++r) {
    auto& t = tables[r];
    t.rank = r;
    t.landing_slot_of_chunk.assign(num_chunks, -1);
    t.ready_slot_of_chunk.assign(num_chunks, -1);
    t.dst_ready_slot_of_chunk.assign(num_chunks, -1);
    t.tile_waits.resize(num_tiles);
    t.tile_notifies.resize(num_tiles);
  }

  // Landing slots come first so that a kernel can index them by "n-th chunk landing here".
  for (const auto& c : plan.chunks) {
    auto& table = tables[c.dst];
    const int slot = add_slot(table, SlotKind::landing, c.id, 1);
    table.landing_slot_of_chunk[c.id] = slot;
    for (int tile : tiles_for(plan, grid, accesses, AccessRole::consume, c.dst_tensor, c.dst_box, c.dst))
      table.tile_waits[tile].push_back(slot);
  }
  // Ready: the source box must be fully written by the src rank's tiles before the chunk leaves.
  for (const auto& c : plan.chunks) {
    const auto tiles = tiles_for(plan, grid, accesses, AccessRole::produce, c.tensor, c.box, c.src);
    if (tiles.empty()) continue;
    auto& table = tables[c.src];
    const int slot = add_slot(table, SlotKind::ready, c.id, static_cast<int>(tiles.size()));
    table.ready_slot_of_chunk[c.id] = slot;
    for (int tile : tiles) table.tile_notifies[tile].push_back(slot);
  }
  // Dst-ready: the destination box must hold the local tiles' output before a chunk lands there.
  for (const auto& c : plan.chunks) {
    const auto tiles = tiles_for(plan, grid, accesses, AccessRole::produce, c.dst_tensor, c.dst_box, c.dst);
    if (tiles.empty()) continue;
    auto& table = tables[c.dst];
    const int slot = add_slot(table, SlotKind::dst_ready, c.id, static_cast<int>(tiles.size()));
    table.dst_ready_slot_of_chunk[c.id] = slot;
    for (int tile : tiles) table.tile_notifies[tile].push_back(slot);
  }
  for (auto& table : tables) {
    sort_unique(table.tile_waits);
    sort_unique(table.tile_notifies);
  }
  return tables;
}

}  // namespace syncopate::lower
