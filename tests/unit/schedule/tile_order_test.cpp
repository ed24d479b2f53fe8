// Tile orders: permutations for every template and order kind, Triton's group-M order, arrival
// order (local first, non-decreasing predicted arrival, group-M inside groups, rank-rotated),
// producer order (chunks leaving first are completed first) and input errors.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "../lower/brute_force.hpp"
#include "../lower/test_plans.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {
namespace {

using lower::AccessRole;
using lower::TileAccess;
using lower::TileGrid;

bool is_reduction(plan::Collective c) {
  return c == plan::Collective::reduce_scatter || c == plan::Collective::all_reduce;
}

// The access a GEMM kernel would have on this template: it consumes gathered/exchanged data and
// produces the partials a reduction drains.
TileAccess access_for(const plan::TemplateOptions& o) {
  if (is_reduction(o.collective)) return {o.tensor, AccessRole::produce, 0, 1};
  return {testing::consumed_tensor(o), AccessRole::consume, 0, -1};
}

// Triton's matmul-tutorial mapping from program id to tile, written out as in the tutorial.
std::vector<int> triton_grouped(std::int64_t tiles_m, std::int64_t tiles_n, int group_m) {
  std::vector<int> order;
  const std::int64_t in_group = group_m * tiles_n;
  for (std::int64_t pid = 0; pid < tiles_m * tiles_n; ++pid) {
    const std::int64_t group_id = pid / in_group;
    const std::int64_t first_m = group_id * group_m;
    const std::int64_t size_m = std::min<std::int64_t>(tiles_m - first_m, group_m);
    const std::int64_t pid_m = first_m + (pid % in_group) % size_m;
    const std::int64_t pid_n = (pid % in_group) / size_m;
    order.push_back(static_cast<int>(pid_m * tiles_n + pid_n));
  }
  return order;
}

bool is_permutation_of_grid(const std::vector<int>& tiles, std::int64_t count) {
  std::vector<int> sorted = tiles;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(static_cast<std::size_t>(count));
  std::iota(all.begin(), all.end(), 0);
  return sorted == all;
}

TEST(TileOrder, EveryOrderOfEveryTemplateIsAPermutation) {
  for (const auto& tc : testing::all_template_cases()) {
    if (tc.options.world_size > 4 && tc.options.split > 1) continue;  // keep the run short
    SCOPED_TRACE(tc.name);
    const auto plan = plan::make_plan(tc.options);
    const auto arrival = estimate_arrival(plan);
    for (const TileGrid grid : {TileGrid{tc.options.shape[0], 6, 3, 4}, TileGrid{tc.options.shape[0], 6, 1, 1}}) {
      const auto tables = lower::lower(plan, grid, {access_for(tc.options)});
      for (const auto& table : tables)
        for (auto kind : {OrderKind::arrival, OrderKind::row_major, OrderKind::grouped})
          for (int group_m : {1, 3, 8}) {
            const auto order = make_tile_order(plan, table, grid, kind, arrival, group_m);
            EXPECT_EQ(order.rank, table.rank);
            EXPECT_EQ(order.kind, kind);
            EXPECT_TRUE(is_permutation_of_grid(order.tiles, grid.count()))
                << "rank " << table.rank << " " << to_string(kind) << " group_m " << group_m;
          }
    }
  }
}

TEST(TileOrder, RowMajorAndGroupedMatchTheirDefinitions) {
  const auto plan = testing::hand_ring_all_gather(2, {13, 4}, 0);
  const auto arrival = estimate_arrival(plan);
  for (std::int64_t n : {1, 5, 16})
    for (int group_m : {1, 2, 3, 8, 20}) {
      const TileGrid grid{13, n, 2, 2};  // 7 tile rows
      const auto tables = lower::lower(plan, grid, {{"x", AccessRole::consume, 0, -1}});
      const auto row_major = make_tile_order(plan, tables[0], grid, OrderKind::row_major, arrival);
      std::vector<int> iota(static_cast<std::size_t>(grid.count()));
      std::iota(iota.begin(), iota.end(), 0);
      EXPECT_EQ(row_major.tiles, iota);
      const auto grouped = make_tile_order(plan, tables[0], grid, OrderKind::grouped, arrival, group_m);
      EXPECT_EQ(grouped.tiles, triton_grouped(grid.tiles_m(), grid.tiles_n(), group_m))
          << "n " << n << " group_m " << group_m;
    }
}

// Checks the consumer arrival order of one rank against an independent brute-force model:
// local tiles first, then non-decreasing arrival of the last chunk waited on, and inside each
// group of equal arrival whose tile rows are contiguous, Triton's order on those rows. Returns
// how many groups that last check covered, so the caller can insist it ran.
int expect_consumer_arrival_order(const plan::CommPlan& plan, const TileGrid& grid, const TileAccess& access,
                                  const lower::SignalTable& table, const std::vector<double>& arrival, int group_m) {
  const auto waits = testing::brute_waits(plan, grid, access, table.rank);
  const auto order = make_tile_order(plan, table, grid, OrderKind::arrival, arrival, group_m);
  EXPECT_TRUE(is_permutation_of_grid(order.tiles, grid.count()));
  const auto is_local = [&](int t) {
    return std::none_of(waits[t].begin(), waits[t].end(), [&](int c) { return plan.chunks[c].src != table.rank; });
  };
  const auto last_arrival = [&](int t) {
    double last = 0;
    for (int c : waits[t]) last = std::max(last, arrival[c]);
    return last;
  };
  std::size_t i = 0;
  while (i < order.tiles.size() && is_local(order.tiles[i])) ++i;
  for (std::size_t j = i; j < order.tiles.size(); ++j) {
    EXPECT_FALSE(is_local(order.tiles[j])) << "local tile " << order.tiles[j] << " at " << j;
    if (j > i) {
      EXPECT_LE(last_arrival(order.tiles[j - 1]), last_arrival(order.tiles[j])) << j;
    }
  }
  // Group boundaries: the local prefix, then runs of equal arrival.
  std::vector<std::pair<std::size_t, std::size_t>> groups{{0, i}};
  for (std::size_t j = i; j < order.tiles.size();) {
    std::size_t k = j;
    while (k < order.tiles.size() && last_arrival(order.tiles[k]) == last_arrival(order.tiles[j])) ++k;
    groups.push_back({j, k});
    j = k;
  }
  int checked = 0;
  for (auto [begin, end] : groups) {
    if (begin == end) continue;
    std::set<std::int64_t> rows;
    for (auto j = begin; j < end; ++j) rows.insert(order.tiles[j] / grid.tiles_n());
    const auto r0 = *rows.begin();
    const auto r_count = static_cast<std::int64_t>(rows.size());
    if (*rows.rbegin() - r0 + 1 != r_count) continue;  // rows not contiguous: no simple model
    if (static_cast<std::int64_t>(end - begin) != r_count * grid.tiles_n()) continue;
    auto expected = triton_grouped(r_count, grid.tiles_n(), group_m);
    for (auto& t : expected) t += static_cast<int>(r0 * grid.tiles_n());
    EXPECT_EQ(std::vector<int>(order.tiles.begin() + begin, order.tiles.begin() + end), expected)
        << "group at " << begin;
    ++checked;
  }
  return checked;
}

TEST(TileOrder, ArrivalOrderLocalFirstThenByArrivalWithGroupM) {
  int groups_checked = 0;
  for (const auto& tc : testing::all_template_cases()) {
    if (is_reduction(tc.options.collective) || tc.options.world_size > 4) continue;
    SCOPED_TRACE(tc.name);
    const auto plan = plan::make_plan(tc.options);
    const auto arrival = estimate_arrival(plan);
    const TileAccess access{testing::consumed_tensor(tc.options), AccessRole::consume, 0, 1};
    for (std::int64_t bm : {1, 3}) {
      const TileGrid grid{tc.options.shape[0], 6, bm, 4};
      const auto tables = lower::lower(plan, grid, {access});
      for (const auto& table : tables)
        for (int group_m : {2, 8}) {
          SCOPED_TRACE(::testing::Message() << "rank " << table.rank << " bm " << bm << " gm " << group_m);
          groups_checked += expect_consumer_arrival_order(plan, grid, access, table, arrival, group_m);
        }
    }
  }
  EXPECT_GT(groups_checked, 100);
}

TEST(TileOrder, RingAllGatherArrivalOrderIsRankRotated) {
  // x [32, 8] over 4 ranks: shard s is rows [8s, 8s+8) = tile rows 2s and 2s+1 (tiles 4 x 4).
  plan::TemplateOptions o;
  o.collective = plan::Collective::all_gather;
  o.algorithm = plan::Algorithm::ring;
  o.world_size = 4;
  o.shape = {32, 8};
  const auto plan = plan::make_plan(o);
  const TileGrid grid{32, 8, 4, 4};
  const auto tables = lower::lower(plan, grid, {{"x", AccessRole::consume, 0, -1}});
  const auto arrival = estimate_arrival(plan);
  std::vector<std::vector<int>> shard_sequence(4);
  for (const auto& table : tables) {
    const auto order = make_tile_order(plan, table, grid, OrderKind::arrival, arrival);
    for (std::size_t i = 0; i < order.tiles.size(); i += 4)  // 4 tiles per shard
      shard_sequence[table.rank].push_back(static_cast<int>(order.tiles[i] / grid.tiles_n() / 2));
    EXPECT_EQ(shard_sequence[table.rank].front(), table.rank) << "the local shard comes first";
  }
  for (int r = 1; r < 4; ++r)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(shard_sequence[r][k], (shard_sequence[0][k] + r) % 4) << "rank " << r;
  // Ring: every later shard arrives one step later, so all four groups are distinct.
  EXPECT_EQ(std::set<int>(shard_sequence[0].begin(), shard_sequence[0].end()).size(), 4u);
}

// Producer side: with gated slots sorted by (predicted arrival, chunk), after the first k
// slots' tiles are emitted, exactly the union of their tiles has been emitted.
void expect_producer_prefix_property(const lower::SignalTable& table, const TileGrid& grid,
                                     const std::vector<double>& arrival, const TileOrder& order) {
  std::vector<std::pair<std::pair<double, int>, int>> slots;  // ((arrival, chunk), slot)
  for (const auto& s : table.slots)
    if (s.kind != lower::SlotKind::landing) slots.push_back({{arrival[s.chunk], s.chunk}, s.slot});
  std::sort(slots.begin(), slots.end());
  std::set<int> needed;
  for (const auto& [key, slot] : slots) {
    for (std::int64_t t = 0; t < grid.count(); ++t) {
      const auto& n = table.tile_notifies[t];
      if (std::find(n.begin(), n.end(), slot) != n.end()) needed.insert(static_cast<int>(t));
    }
    const std::set<int> prefix(order.tiles.begin(), order.tiles.begin() + needed.size());
    EXPECT_EQ(prefix, needed) << "rank " << table.rank << " slot " << slot;
  }
}

TEST(TileOrder, ProducerOrderCompletesEarlyLeavingChunksFirst) {
  for (const auto& tc : testing::all_template_cases()) {
    if (!is_reduction(tc.options.collective) || tc.options.world_size > 4) continue;
    SCOPED_TRACE(tc.name);
    const auto plan = plan::make_plan(tc.options);
    const auto arrival = estimate_arrival(plan);
    const TileGrid grid{tc.options.shape[0], 6, 3, 4};
    const auto tables = lower::lower(plan, grid, {access_for(tc.options)});
    for (const auto& table : tables) {
      const auto order = make_tile_order(plan, table, grid, OrderKind::arrival, arrival, 2);
      ASSERT_TRUE(is_permutation_of_grid(order.tiles, grid.count()));
      expect_producer_prefix_property(table, grid, arrival, order);
    }
  }
}

TEST(TileOrder, ProducerOrderHandChecked) {
  // Direct RS over 3 ranks, x [6, 2], one tile per row. Rank 0 sends rows [2,4) (chunk 0, lands
  // at 8 bytes) then rows [4,6) (chunk 1, at 16); chunks 2 and 4 add rows [0,2) into rank 0 at 8.
  const auto plan = testing::hand_direct_reduce_scatter(3, 6, 2);
  const TileGrid grid{6, 2, 1, 2};
  const auto tables = lower::lower(plan, grid, {{"x", AccessRole::produce, 0, 1}});
  const auto arrival = estimate_arrival(plan);
  ASSERT_EQ(arrival[0], 8);
  ASSERT_EQ(arrival[1], 16);
  const auto order = make_tile_order(plan, tables[0], grid, OrderKind::arrival, arrival);
  EXPECT_EQ(order.tiles, (std::vector<int>{2, 3, 0, 1, 4, 5}));
}

TEST(TileOrder, BadInputsAreUserErrors) {
  const auto plan = testing::hand_ring_all_gather(2, {8, 4}, 0);
  const TileGrid grid{8, 4, 2, 2};
  const auto tables = lower::lower(plan, grid, {{"x", AccessRole::consume, 0, -1}});
  const auto arrival = estimate_arrival(plan);
  const auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const UserError& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return {};
  };
  auto msg = message([&] { make_tile_order(plan, tables[0], {8, 4, 4, 2}, OrderKind::arrival, arrival); });
  EXPECT_NE(msg.find("table-grid-mismatch"), std::string::npos) << msg;
  msg = message([&] { make_tile_order(plan, tables[0], grid, OrderKind::arrival, {1.0}); });
  EXPECT_NE(msg.find("1 values for 2 chunks"), std::string::npos) << msg;
  msg = message([&] { make_tile_order(plan, tables[0], grid, OrderKind::grouped, arrival, 0); });
  EXPECT_NE(msg.find("group_m"), std::string::npos) << msg;
  auto nan_arrival = arrival;
  nan_arrival[1] = std::numeric_limits<double>::quiet_NaN();
  msg = message([&] { make_tile_order(plan, tables[0], grid, OrderKind::arrival, nan_arrival); });
  EXPECT_NE(msg.find("chunk_arrival[1]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace syncopate::schedule
