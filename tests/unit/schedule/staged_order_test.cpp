// Arrival order of a staged GEMM+RS (each rank ships its partials of the other ranks' row boxes
// into their staging tensors, then computes its own box, whose tiles wait on the staged
// partials): other boxes first, staggered by rank (box r+1, r+2, ... mod W), each in sub-chunk
// order with group-M inside a chunk's tiles; the own box last, in sub-chunk order.
#include <algorithm>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "../lower/test_plans.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {
namespace {

using lower::AccessRole;
using lower::TileAccess;
using lower::TileGrid;

const std::vector<TileAccess> kStaged{{"c", AccessRole::produce, 1, 2}, {"p", AccessRole::consume, 1, 2, true}};

// Consecutive runs of `key(tile)` along `order`.
template <typename Key>
std::vector<std::int64_t> runs(const std::vector<int>& order, Key key) {
  std::vector<std::int64_t> out;
  for (int t : order)
    if (out.empty() || out.back() != key(t)) out.push_back(key(t));
  return out;
}

TEST(StagedOrder, OtherBoxesStaggeredByRankThenOwnBoxInSubChunkOrder) {
  const std::int64_t ms = 16, n = 32;
  const int split = 2;
  const TileGrid grid_for_world[] = {{}, {}, {2 * ms, n, 4, 8}, {3 * ms, n, 4, 8}, {4 * ms, n, 4, 8}};
  for (int world : {2, 3, 4}) {
    const TileGrid grid = grid_for_world[world];
    const auto plan = testing::hand_staged_reduce_scatter(world, grid.m, n, split);
    const auto tables = lower::lower(plan, grid, kStaged);
    const auto arrival = estimate_arrival(plan);
    for (int group_m : {1, 2, 8}) {
      for (const auto& table : tables) {
        const int r = table.rank;
        SCOPED_TRACE(::testing::Message() << "world " << world << " rank " << r << " group_m " << group_m);
        const auto order = make_tile_order(plan, table, grid, OrderKind::arrival, arrival, group_m).tiles;
        std::vector<int> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<int> all(static_cast<std::size_t>(grid.count()));
        std::iota(all.begin(), all.end(), 0);
        ASSERT_EQ(sorted, all);
        const auto row_of = [&](int t) { return (t / grid.tiles_n()) * grid.block_m; };
        const auto box_of = [&](int t) { return row_of(t) / ms; };
        const auto sub_of = [&](int t) {  // global sub-chunk: box * split + k
          return box_of(t) * split + (row_of(t) % ms) / (ms / split);
        };
        // Boxes r+1, r+2, ..., r (mod W), each visited once.
        std::vector<std::int64_t> expected_boxes;
        for (int d = 1; d <= world; ++d) expected_boxes.push_back((r + d) % world);
        EXPECT_EQ(runs(order, box_of), expected_boxes);
        // Inside every box, sub-chunk 0 before 1: each sub-chunk is one run.
        std::vector<std::int64_t> expected_subs;
        for (auto b : expected_boxes)
          for (int k = 0; k < split; ++k) expected_subs.push_back(b * split + k);
        EXPECT_EQ(runs(order, sub_of), expected_subs);
        // Inside a sub-chunk, the tiles are in group-M order.
        for (std::size_t i = 0; i < order.size();) {
          std::size_t j = i;
          while (j < order.size() && sub_of(order[j]) == sub_of(order[i])) ++j;
          const std::vector<int> segment(order.begin() + i, order.begin() + j);
          EXPECT_EQ(segment, group_m_order(grid, segment, group_m)) << "sub-chunk " << sub_of(order[i]);
          i = j;
        }
        // The own box's tiles are exactly the waiting ones, and they come last.
        for (std::size_t i = 0; i < order.size(); ++i)
          EXPECT_EQ(!table.tile_waits[order[i]].empty(), box_of(order[i]) == r) << "position " << i;
      }
    }
  }
}

TEST(StagedOrder, StaggerHoldsWhateverTheArrivalEstimateSaysButSubChunksFollowIt) {
  // Predicted arrivals that put sub-chunk 1 before sub-chunk 0 everywhere: the box order is the
  // stagger (not the estimate), the sub-chunks inside each box follow the estimate.
  const std::int64_t ms = 8, n = 8;
  const int world = 3, split = 2;
  const TileGrid grid{world * ms, n, 4, 8};
  const auto plan = testing::hand_staged_reduce_scatter(world, grid.m, n, split);
  std::vector<double> arrival(plan.chunks.size());
  for (const auto& c : plan.chunks) arrival[c.id] = c.box.offset[1] % ms == 0 ? 2.0 : 1.0;
  const auto tables = lower::lower(plan, grid, kStaged);
  for (const auto& table : tables) {
    const auto order = make_tile_order(plan, table, grid, OrderKind::arrival, arrival, 8).tiles;
    std::vector<int> rows;
    for (int t : order) rows.push_back(static_cast<int>((t / grid.tiles_n()) * grid.block_m));
    const int r = table.rank;
    std::vector<int> expected;
    for (int d = 1; d <= world; ++d) {
      const int box = (r + d) % world;
      expected.push_back(box * ms + 4);  // sub-chunk 1 (rows 4-7 of the box) first
      expected.push_back(box * ms);
    }
    EXPECT_EQ(rows, expected) << "rank " << r;
  }
}

TEST(StagedOrder, ProducerOnlyAndConsumerOnlyTablesKeepTheirOrders) {
  // Lowering only one of the two accesses gives the existing producer / consumer orders.
  const std::int64_t ms = 8;
  const TileGrid grid{2 * ms, 8, 4, 8};
  const auto plan = testing::hand_staged_reduce_scatter(2, grid.m, 8, 2);
  const auto arrival = estimate_arrival(plan);
  for (std::size_t a = 0; a < kStaged.size(); ++a) {
    const auto tables = lower::lower(plan, grid, {kStaged[a]});
    const auto order = make_tile_order(plan, tables[0], grid, OrderKind::arrival, arrival, 8).tiles;
    // Rank 0: producer side ships box 1 (rows 8-15) first; consumer side has the tiles that wait
    // on nothing (box 1) first, then box 0 by arrival. Both start with box 1.
    EXPECT_EQ(order.front() / grid.tiles_n() * grid.block_m, 8) << "access " << a;
  }
}

}  // namespace
}  // namespace syncopate::schedule
