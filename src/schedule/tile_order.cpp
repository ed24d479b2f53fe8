// make_tile_order(): row-major, grouped and arrival orders of a rank's tiles (see tile_order.hpp).
#include "syncopate/schedule/tile_order.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/tile_region.hpp"

namespace syncopate::schedule {
namespace {

void validate_inputs(const plan::CommPlan& plan, const lower::SignalTable& table, const lower::TileGrid& grid,
                     const std::vector<double>& chunk_arrival, int group_m) {
  lower::validate_grid(grid);
  const auto count = static_cast<std::size_t>(grid.count());
  if (table.tile_waits.size() != count || table.tile_notifies.size() != count)
    throw UserError(
        fmt::format("rank {}: table-grid-mismatch: the signal table has {} tiles, the "
                    "grid {} x {} with tiles {} x {} has {}",
                    table.rank, table.tile_waits.size(), grid.m, grid.n, grid.block_m, grid.block_n, count));
  if (chunk_arrival.size() != plan.chunks.size())
    throw UserError(
        fmt::format("chunk_arrival: size-mismatch: {} values for {} chunks", chunk_arrival.size(), plan.chunks.size()));
  for (std::size_t c = 0; c < chunk_arrival.size(); ++c)
    if (!std::isfinite(chunk_arrival[c]))
      throw UserError(fmt::format("chunk_arrival[{}]: not-finite: {}", c, chunk_arrival[c]));
  if (group_m < 1) throw UserError(fmt::format("group_m: must be >= 1, got {}", group_m));
  for (const auto& slot : table.slots)
    if (slot.chunk < 0 || static_cast<std::size_t>(slot.chunk) >= plan.chunks.size())
      throw UserError(fmt::format("rank {}, slot {}: unknown-chunk: chunk {} with {} chunks", table.rank, slot.slot,
                                  slot.chunk, plan.chunks.size()));
  const auto check_lists = [&](const std::vector<std::vector<int>>& lists, const char* name) {
    for (std::size_t t = 0; t < lists.size(); ++t)
      for (int s : lists[t])
        if (s < 0 || static_cast<std::size_t>(s) >= table.slots.size())
          throw UserError(
              fmt::format("rank {}, tile {}: {}: slot {} with {} slots", table.rank, t, name, s, table.slots.size()));
  };
  check_lists(table.tile_waits, "bad-wait-slot");
  check_lists(table.tile_notifies, "bad-notify-slot");
}

// An order built group by group: each group's tiles not yet placed, group-M swizzled.
class OrderBuilder {
 public:
  OrderBuilder(const lower::TileGrid& grid, int group_m)
      : grid_(grid), group_m_(group_m), placed_(static_cast<std::size_t>(grid.count()), 0) {}

  void emit(std::vector<int> tiles) {
    std::erase_if(tiles, [&](int t) { return placed_[t] != 0; });
    append_new(group_m_order(grid_, std::move(tiles), group_m_));
  }
  // Appends the tiles not yet placed, in the given order.
  void append_new(const std::vector<int>& tiles) {
    for (int t : tiles)
      if (placed_[t] == 0) {
        placed_[t] = 1;
        order_.push_back(t);
      }
  }
  std::vector<int> tiles() && { return std::move(order_); }

 private:
  const lower::TileGrid& grid_;
  int group_m_;
  std::vector<char> placed_;
  std::vector<int> order_;
};

// Consumer side: local tiles (waiting on no chunk from another rank) first, then one group per
// distinct predicted arrival of the last chunk waited on, earliest first.
std::vector<int> consumer_order(const plan::CommPlan& plan, const lower::SignalTable& table,
                                const lower::TileGrid& grid, const std::vector<double>& chunk_arrival, int group_m) {
  std::vector<int> local;
  std::map<double, std::vector<int>> by_arrival;  // ordered: earliest group first
  for (int t = 0; t < static_cast<int>(grid.count()); ++t) {
    bool remote = false;
    double last = 0.0;
    for (int s : table.tile_waits[t]) {
      const int c = table.slots[s].chunk;
      remote = remote || plan.chunks[c].src != table.rank;
      last = std::max(last, chunk_arrival[c]);
    }
    if (remote)
      by_arrival[last].push_back(t);
    else
      local.push_back(t);
  }
  std::vector<int> order = group_m_order(grid, std::move(local), group_m);
  for (auto& [arrival, tiles] : by_arrival) {
    const auto group = group_m_order(grid, std::move(tiles), group_m);
    order.insert(order.end(), group.begin(), group.end());
  }
  return order;
}

// Producer side: walk the gated chunks by predicted leaving time (ties by chunk id, then slot)
// and emit each chunk's not yet emitted tiles, so the first chunk to leave is finished first.
std::vector<int> producer_order(const lower::SignalTable& table, const lower::TileGrid& grid,
                                const std::vector<double>& chunk_arrival, int group_m) {
  std::vector<std::vector<int>> tiles_of_slot(table.slots.size());
  for (int t = 0; t < static_cast<int>(grid.count()); ++t)
    for (int s : table.tile_notifies[t]) tiles_of_slot[s].push_back(t);
  std::vector<int> slots(table.slots.size());
  std::iota(slots.begin(), slots.end(), 0);
  std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) {
    const int ca = table.slots[a].chunk, cb = table.slots[b].chunk;
    return std::tie(chunk_arrival[ca], ca, a) < std::tie(chunk_arrival[cb], cb, b);
  });
  OrderBuilder order(grid, group_m);
  for (int s : slots) order.emit(tiles_of_slot[s]);
  std::vector<int> rest(static_cast<std::size_t>(grid.count()));
  std::iota(rest.begin(), rest.end(), 0);
  order.emit(std::move(rest));  // tiles that gate no chunk
  return std::move(order).tiles();
}

// Staged side (some tiles wait, others only notify; staged GEMM+RS): tiles that ship a chunk and
// wait on none first, by the chunk's peer counted from this rank ((peer - rank) mod W: box
// rank+1, rank+2, ..., so that at any moment the ranks feed different receivers), then by
// predicted leaving time (ties: chunk id, slot); then tiles that neither wait nor ship; then the
// waiting tiles by arrival as on the consumer side (the own box last, in sub-chunk order).
std::vector<int> staged_order(const plan::CommPlan& plan, const lower::SignalTable& table, const lower::TileGrid& grid,
                              const std::vector<double>& chunk_arrival, int group_m) {
  const auto count = static_cast<std::size_t>(grid.count());
  std::vector<char> waits_remote(count, 0);
  for (std::size_t t = 0; t < count; ++t)
    for (int s : table.tile_waits[t])
      if (plan.chunks[table.slots[s].chunk].src != table.rank) waits_remote[t] = 1;
  std::vector<std::vector<int>> tiles_of_slot(table.slots.size());
  for (std::size_t t = 0; t < count; ++t)
    if (waits_remote[t] == 0)
      for (int s : table.tile_notifies[t]) tiles_of_slot[s].push_back(static_cast<int>(t));
  const int world = std::max(plan.world_size, 1);
  const auto distance = [&](int slot) {
    const auto& c = plan.chunks[table.slots[slot].chunk];
    const int peer = c.src == table.rank ? c.dst : c.src;
    return ((peer - table.rank) % world + world) % world;
  };
  std::vector<int> slots;
  for (int s = 0; s < static_cast<int>(table.slots.size()); ++s)
    if (!tiles_of_slot[s].empty()) slots.push_back(s);
  std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) {
    const int ca = table.slots[a].chunk, cb = table.slots[b].chunk;
    return std::tuple{distance(a), chunk_arrival[ca], ca, a} < std::tuple{distance(b), chunk_arrival[cb], cb, b};
  });
  OrderBuilder order(grid, group_m);
  for (int s : slots) order.emit(tiles_of_slot[s]);
  std::vector<int> idle;  // neither waits nor ships
  for (std::size_t t = 0; t < count; ++t)
    if (waits_remote[t] == 0) idle.push_back(static_cast<int>(t));
  order.emit(std::move(idle));
  // The waiting tiles, in the consumer order (which puts tiles without remote waits first: all
  // emitted already, so what it adds is the arrival groups, kept in their order).
  order.append_new(consumer_order(plan, table, grid, chunk_arrival, group_m));
  return std::move(order).tiles();
}

// Some tile waits on a chunk from another rank, and some tile that waits on none gates a chunk.
bool is_staged(const plan::CommPlan& plan, const lower::SignalTable& table) {
  bool waits = false, ships = false;
  for (std::size_t t = 0; t < table.tile_waits.size(); ++t) {
    bool remote = false;
    for (int s : table.tile_waits[t]) remote = remote || plan.chunks[table.slots[s].chunk].src != table.rank;
    waits = waits || remote;
    ships = ships || (!remote && !table.tile_notifies[t].empty());
  }
  return waits && ships;
}

bool any_nonempty(const std::vector<std::vector<int>>& lists) {
  return std::any_of(lists.begin(), lists.end(), [](const auto& l) { return !l.empty(); });
}

}  // namespace

std::string_view to_string(OrderKind kind) { return plan::to_string(kind); }

std::vector<int> group_m_order(const lower::TileGrid& grid, std::vector<int> tiles, int group_m) {
  const auto tiles_n = grid.tiles_n();
  std::vector<std::int64_t> rows;
  for (int t : tiles) rows.push_back(t / tiles_n);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const auto block_of = [&](std::int64_t row) {
    return (std::lower_bound(rows.begin(), rows.end(), row) - rows.begin()) / group_m;
  };
  const auto key = [&](int t) {
    const std::int64_t tm = t / tiles_n, tn = t % tiles_n;
    return std::tuple{block_of(tm), tn, tm};
  };
  std::sort(tiles.begin(), tiles.end(), [&](int a, int b) { return key(a) < key(b); });
  return tiles;
}

TileOrder make_tile_order(const plan::CommPlan& plan, const lower::SignalTable& table, const lower::TileGrid& grid,
                          OrderKind kind, const std::vector<double>& chunk_arrival, int group_m) {
  validate_inputs(plan, table, grid, chunk_arrival, group_m);
  TileOrder out{table.rank, kind, {}};
  std::vector<int> all(static_cast<std::size_t>(grid.count()));
  std::iota(all.begin(), all.end(), 0);
  switch (kind) {
    case OrderKind::row_major:
      out.tiles = std::move(all);
      break;
    case OrderKind::grouped:
      out.tiles = group_m_order(grid, std::move(all), group_m);
      break;
    case OrderKind::arrival:
      if (is_staged(plan, table))
        out.tiles = staged_order(plan, table, grid, chunk_arrival, group_m);
      else if (any_nonempty(table.tile_waits))
        out.tiles = consumer_order(plan, table, grid, chunk_arrival, group_m);
      else if (any_nonempty(table.tile_notifies))
        out.tiles = producer_order(table, grid, chunk_arrival, group_m);
      else
        out.tiles = group_m_order(grid, std::move(all), group_m);
      break;
  }
  return out;
}

}  // namespace syncopate::schedule
