// Consumer wait lists on hand-written plans: a hand-checked case, then brute force over many
// tile sizes (dividing the shape or not), along rows and along columns.
#include <gtest/gtest.h>

#include "brute_force.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

using Chunks = std::set<int>;

TEST(TileWaits, StraddlingTilesWaitOnEveryChunkTheyTouch) {
  // x [10, 5] over 3 ranks: shards are rows [0,4) [4,7) [7,10). Rank 0 gets shard 2 at step 0
  // (chunk 2, from rank 2) and shard 1 at step 1 (chunk 5). Tiles of 3 rows: [0,3) [3,6) [6,9)
  // [9,10).
  const auto plan = testing::hand_ring_all_gather(3, {10, 5}, 0);
  const TileGrid grid{10, 5, 3, 5};
  const auto tables = lower(plan, grid, {{"x", AccessRole::consume, 0, -1}});
  const auto waits = testing::chunks_of(tables[0], tables[0].tile_waits);
  ASSERT_EQ(waits.size(), 4u);
  EXPECT_EQ(waits[0], Chunks{});
  EXPECT_EQ(waits[1], (Chunks{5}));
  EXPECT_EQ(waits[2], (Chunks{2, 5}));
  EXPECT_EQ(waits[3], (Chunks{2}));
  // Landing slots are numbered in chunk id order.
  EXPECT_EQ(tables[0].landing_slot_of_chunk[2], 0);
  EXPECT_EQ(tables[0].landing_slot_of_chunk[5], 1);
  EXPECT_EQ(tables[0].slots.size(), 2u);
}

TEST(TileWaits, RowsMatchBruteForceForManyTileSizes) {
  for (int world : {1, 2, 3, 5}) {
    const auto plan = testing::hand_ring_all_gather(world, {13, 7}, 0);
    for (std::int64_t bm : {1, 2, 3, 4, 6, 13, 16})
      for (std::int64_t bn : {2, 3, 7, 8})
        for (int n_dim : {-1, 1}) {
          SCOPED_TRACE(::testing::Message() << "world " << world << " tile " << bm << "x" << bn << " n_dim " << n_dim);
          const TileGrid grid{13, 7, bm, bn};
          const TileAccess access{"x", AccessRole::consume, 0, n_dim};
          const auto tables = lower(plan, grid, {access});
          for (const auto& table : tables) {
            const auto expected = testing::brute_waits(plan, grid, access, table.rank);
            EXPECT_EQ(testing::chunks_of(table, table.tile_waits), expected) << "rank " << table.rank;
          }
        }
  }
}

TEST(TileWaits, ColumnsMatchBruteForce) {
  // B gathered along N: x [5, 11] split along dim 1; tiles read their columns, every row.
  const auto plan = testing::hand_ring_all_gather(4, {5, 11}, 1);
  for (std::int64_t bm : {2, 5})
    for (std::int64_t bn : {1, 2, 3, 4, 12}) {
      const TileGrid grid{9, 11, bm, bn};  // M is not a dim of x: m_dim -1
      const TileAccess access{"x", AccessRole::consume, -1, 1};
      const auto tables = lower(plan, grid, {access});
      for (const auto& table : tables) {
        EXPECT_EQ(testing::chunks_of(table, table.tile_waits), testing::brute_waits(plan, grid, access, table.rank))
            << "rank " << table.rank << " tile " << bm << "x" << bn;
        // A tile column waits on the same chunks on every tile row.
        for (std::int64_t t = 0; t < grid.count(); ++t)
          EXPECT_EQ(table.tile_waits[t], table.tile_waits[t % grid.tiles_n()]);
      }
    }
}

TEST(TileWaits, ProducedOnlyTensorGivesNoWaits) {
  const auto plan = testing::hand_ring_all_gather(3, {10, 5}, 0);
  const auto tables = lower(plan, {10, 5, 4, 4}, {{"x", AccessRole::produce, 0, 1}});
  for (const auto& table : tables)
    for (const auto& waits : table.tile_waits) EXPECT_TRUE(waits.empty());
}

TEST(TileWaits, ListsAreSortedAndUnique) {
  const auto plan = testing::hand_ring_all_gather(5, {13, 7}, 0);
  // The same access twice must not duplicate slots.
  const TileAccess access{"x", AccessRole::consume, 0, 1};
  const auto tables = lower(plan, {13, 7, 4, 3}, {access, access});
  for (const auto& table : tables)
    for (const auto& waits : table.tile_waits)
      for (std::size_t i = 1; i < waits.size(); ++i) EXPECT_LT(waits[i - 1], waits[i]);
}

}  // namespace
}  // namespace syncopate::lower
