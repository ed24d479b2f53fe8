// Staged GEMM+RS lowering: the kernel produces "c" [1, M, N] (rows on dim 1) and consumes the
// staging tensor "p" [W, M/W, N] through an m_local_shard access. On rank r the tiles of its own
// row box wait on the staging chunks of their rows from every other rank; every other tile waits
// on nothing and notifies the ready slot of the chunk that ships its rows.
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "brute_force.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/signal_table_json.hpp"
#include "syncopate/lower/tile_region.hpp"
#include "lower_error.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

using Chunks = std::set<int>;
using testing::KindChunk;

const TileAccess kProduceC{"c", AccessRole::produce, 1, 2};
const TileAccess kConsumeP{"p", AccessRole::consume, 1, 2, true};

// Chunks (by the rows of "c" they carry, not through "p") that a tile of rank r must wait on:
// those landing on r whose c-rows meet the tile's rows inside box r, and whose columns meet the
// tile's columns. Independent of the m_local_shard mapping.
Chunks expected_waits(const plan::CommPlan& plan, const TileGrid& grid, int rank, std::int64_t tile) {
  const std::int64_t ms = grid.m / plan.world_size;
  const std::int64_t tm = tile / grid.tiles_n(), tn = tile % grid.tiles_n();
  const std::int64_t lo = std::max(tm * grid.block_m, rank * ms);
  const std::int64_t hi = std::min((tm + 1) * grid.block_m, (rank + 1) * ms);
  const std::int64_t c0 = tn * grid.block_n, c1 = (tn + 1) * grid.block_n;
  Chunks out;
  if (lo >= hi) return out;
  for (const auto& c : plan.chunks) {
    if (c.dst != rank) continue;
    const std::int64_t r0 = c.box.offset[1], r1 = r0 + c.box.extent[1];
    const std::int64_t k0 = c.box.offset[2], k1 = k0 + c.box.extent[2];
    if (r0 < hi && lo < r1 && k0 < c1 && c0 < k1) out.insert(c.id);
  }
  return out;
}

std::set<KindChunk> notifies_of(const SignalTable& table, std::int64_t tile) {
  std::set<KindChunk> out;
  for (int s : table.tile_notifies[tile]) out.insert({table.slots[s].kind, table.slots[s].chunk});
  return out;
}

TEST(StagedWaits, HandCheckedWorldTwoSplitTwo) {
  // M 8, W 2: box 0 = rows [0,4), box 1 = rows [4,8); sub-chunks of 2 rows; tiles of 2 x 4.
  // Chunk ids: 0 = (1 -> 0, rows 0-1), 1 = (1 -> 0, rows 2-3), 2 = (0 -> 1, rows 4-5),
  // 3 = (0 -> 1, rows 6-7).
  const auto plan = testing::hand_staged_reduce_scatter(2, 8, 4, 2);
  const TileGrid grid{8, 4, 2, 4};
  const auto tables = lower(plan, grid, {kProduceC, kConsumeP});
  const auto w0 = testing::chunks_of(tables[0], tables[0].tile_waits);
  const auto w1 = testing::chunks_of(tables[1], tables[1].tile_waits);
  EXPECT_EQ(w0, (std::vector<Chunks>{{0}, {1}, {}, {}}));
  EXPECT_EQ(w1, (std::vector<Chunks>{{}, {}, {2}, {3}}));
  const KindChunk ready2{SlotKind::ready, 2}, ready3{SlotKind::ready, 3};
  EXPECT_EQ(notifies_of(tables[0], 0), std::set<KindChunk>{});
  EXPECT_EQ(notifies_of(tables[0], 1), std::set<KindChunk>{});
  EXPECT_EQ(notifies_of(tables[0], 2), std::set<KindChunk>{ready2});
  EXPECT_EQ(notifies_of(tables[0], 3), std::set<KindChunk>{ready3});
  EXPECT_EQ(notifies_of(tables[1], 0), (std::set<KindChunk>{{SlotKind::ready, 0}}));
  EXPECT_EQ(notifies_of(tables[1], 2), std::set<KindChunk>{});
  // No dst-ready slots: nothing lands on what the kernel stores ("c"); one writer per ready slot.
  for (const auto& table : tables)
    for (const auto& slot : table.slots) {
      EXPECT_NE(slot.kind, SlotKind::dst_ready);
      EXPECT_EQ(slot.writers, 1);
    }
}

TEST(StagedWaits, MatchesBruteForceAtWorldsTwoToFour) {
  for (int world : {2, 3, 4})
    for (int split : {1, 2, 3})
      for (std::int64_t bm : {1, 2, 3, 4, 6, 8, 24})
        for (std::int64_t bn : {3, 5, 16}) {
          const std::int64_t m = 24, n = 10;  // Ms = 12, 8, 6: some BLOCK_M divide it, some not
          SCOPED_TRACE(::testing::Message() << "world " << world << " split " << split << " tile " << bm << "x" << bn);
          const auto plan = testing::hand_staged_reduce_scatter(world, m, n, split);
          const TileGrid grid{m, n, bm, bn};
          const auto tables = lower(plan, grid, {kProduceC, kConsumeP});
          for (const auto& table : tables) {
            SCOPED_TRACE(::testing::Message() << "rank " << table.rank);
            const auto waits = testing::chunks_of(table, table.tile_waits);
            EXPECT_EQ(waits, testing::brute_waits(plan, grid, kConsumeP, table.rank));
            for (std::int64_t t = 0; t < grid.count(); ++t)
              EXPECT_EQ(waits[t], expected_waits(plan, grid, table.rank, t)) << "tile " << t;
          }
          // Ready slots and their writers, element by element, on the produced tensor.
          testing::expect_notifies_match_brute_force(plan, grid, kProduceC);
          // The consumed side alone notifies nothing.
          for (const auto& table : lower(plan, grid, {kConsumeP}))
            for (const auto& list : table.tile_notifies) EXPECT_TRUE(list.empty());
        }
}

TEST(StagedWaits, OwnBoxTilesOnlyWaitAndOtherTilesOnlyNotifyWhenBlocksDivideTheBox) {
  for (int world : {2, 3, 4}) {
    const std::int64_t ms = 8;
    const auto plan = testing::hand_staged_reduce_scatter(world, world * ms, 16, 2);
    const TileGrid grid{world * ms, 16, 4, 8};
    const auto tables = lower(plan, grid, {kProduceC, kConsumeP});
    for (const auto& table : tables)
      for (std::int64_t t = 0; t < grid.count(); ++t) {
        const bool own = (t / grid.tiles_n()) * grid.block_m / ms == table.rank;
        SCOPED_TRACE(::testing::Message() << "world " << world << " rank " << table.rank << " tile " << t);
        // Every other rank's partial of these rows: world - 1 chunks (one sub-chunk each).
        EXPECT_EQ(table.tile_waits[t].size(), own ? static_cast<std::size_t>(world - 1) : 0u);
        EXPECT_EQ(table.tile_notifies[t].size(), own ? 0u : 1u);
        std::set<int> sources;
        for (int s : table.tile_waits[t]) sources.insert(plan.chunks[table.slots[s].chunk].src);
        if (own) {
          EXPECT_EQ(sources.size(), static_cast<std::size_t>(world - 1));
        }
        EXPECT_FALSE(sources.count(table.rank));
      }
  }
}

TEST(StagedWaits, TileStraddlingTwoBoxesWaitsAndNotifies) {
  // M 12, W 2: boxes [0,6) and [6,12); tiles of 4 rows: [0,4) [4,8) [8,12). Tile 1 holds rank
  // 0's rows 4-5 (waits on chunk 0 = 1 -> 0) and rows 6-7 of box 1 (ships them in chunk 1 = 0 -> 1).
  const auto plan = testing::hand_staged_reduce_scatter(2, 12, 4, 1);
  const TileGrid grid{12, 4, 4, 4};
  const auto tables = lower(plan, grid, {kProduceC, kConsumeP});
  const auto w0 = testing::chunks_of(tables[0], tables[0].tile_waits);
  EXPECT_EQ(w0, (std::vector<Chunks>{{0}, {0}, {}}));
  EXPECT_EQ(notifies_of(tables[0], 1), (std::set<KindChunk>{{SlotKind::ready, 1}}));
  EXPECT_EQ(notifies_of(tables[0], 2), (std::set<KindChunk>{{SlotKind::ready, 1}}));
  EXPECT_EQ(notifies_of(tables[0], 0), std::set<KindChunk>{});
  EXPECT_EQ(tables[0].slots[tables[0].ready_slot_of_chunk[1]].writers, 2);
  // Rank 1 mirrors it: tile 1 waits on chunk 1 (rows 6-7) and ships rows 4-5 in chunk 0.
  const auto w1 = testing::chunks_of(tables[1], tables[1].tile_waits);
  EXPECT_EQ(w1, (std::vector<Chunks>{{}, {1}, {1}}));
  EXPECT_EQ(notifies_of(tables[1], 1), (std::set<KindChunk>{{SlotKind::ready, 0}}));
}

TEST(StagedWaits, TileRegionOfShardAccessIsClippedAndShifted) {
  const std::vector<std::int64_t> p_shape{2, 6, 4};  // W 2, Ms 6
  const TileGrid grid{12, 4, 4, 4};
  // Rank 1's shard is grid rows [6, 12): tile 0 (rows 0-3) is outside, tile 1 (rows 4-7) gives
  // p rows 0-1, tile 2 (rows 8-11) gives p rows 2-5.
  EXPECT_EQ(tile_region(grid, kConsumeP, p_shape, 0, 1).extent[1], 0);
  const auto t1 = tile_region(grid, kConsumeP, p_shape, 1, 1);
  EXPECT_EQ(t1.offset, (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(t1.extent, (std::vector<std::int64_t>{2, 2, 4}));
  const auto t2 = tile_region(grid, kConsumeP, p_shape, 2, 1);
  EXPECT_EQ(t2.offset[1], 2);
  EXPECT_EQ(t2.extent[1], 4);
  // Rank 0: tile 1 gives rows 4-5, tile 2 nothing.
  const auto r0 = tile_region(grid, kConsumeP, p_shape, 1, 0);
  EXPECT_EQ(r0.offset[1], 4);
  EXPECT_EQ(r0.extent[1], 2);
  EXPECT_EQ(tile_region(grid, kConsumeP, p_shape, 2, 0).extent[1], 0);
  // tiles_touching inverts it: p rows 2-5 of slot 0 on rank 1 are tile 2 only.
  const plan::Box box{{0, 2, 0}, {1, 4, 4}};
  const auto rect = tiles_touching(grid, kConsumeP, p_shape, box, 1);
  EXPECT_EQ(rect.rows.begin, 2);
  EXPECT_EQ(rect.rows.end, 3);
  EXPECT_EQ(tiles_touching(grid, kConsumeP, p_shape, box, 0).rows.begin, 0);  // rows 2-5 on rank 0
  EXPECT_EQ(tiles_touching(grid, kConsumeP, p_shape, box, 0).rows.end, 2);
  // Without the flag, the rank is ignored.
  const TileAccess plain{"p", AccessRole::consume, 1, 2};
  const plan::Box whole{{0, 0, 0}, {2, 6, 4}};
  EXPECT_EQ(tiles_touching(grid, plain, p_shape, whole, 0).rows.end,
            tiles_touching(grid, plain, p_shape, whole, 1).rows.end);
}

using testing::lower_error;

TEST(StagedWaits, ShardExtentThatDoesNotCoverTheGridIsRefusedByName) {
  // p has 4 rows per rank, 3 ranks: 12 rows, but the GEMM has M = 13.
  auto plan = testing::hand_staged_reduce_scatter(3, 12, 4, 1);
  auto msg = lower_error(plan, {13, 4, 4, 4}, {kConsumeP});
  EXPECT_NE(msg.find("shard-mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor \"p\" has extent 4 on m_dim 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("M = 13"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m_local_shard"), std::string::npos) << msg;
  // The flag on the full tensor "c" (extent M, so W * M rows) is refused too.
  msg = lower_error(plan, {12, 4, 4, 4}, {{"c", AccessRole::produce, 1, 2, true}});
  EXPECT_NE(msg.find("shard-mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cover 36 rows"), std::string::npos) << msg;
  // A shard needs a row dim.
  msg = lower_error(plan, {12, 4, 4, 4}, {{"p", AccessRole::consume, -1, 2, true}});
  EXPECT_NE(msg.find("shard-without-m-dim"), std::string::npos) << msg;
}

TEST(StagedWaits, JsonNamesTheShardFlagOnlyWhenSet) {
  const auto plan = testing::hand_staged_reduce_scatter(2, 8, 4, 1);
  const TileGrid grid{8, 4, 4, 4};
  const std::vector<TileAccess> accesses{kProduceC, kConsumeP};
  const auto doc = nlohmann::json::parse(signal_tables_to_json(lower(plan, grid, accesses), grid, accesses));
  EXPECT_FALSE(doc.at("accesses")[0].contains("m_local_shard"));
  EXPECT_EQ(doc.at("accesses")[1].at("m_local_shard"), true);
}

}  // namespace
}  // namespace syncopate::lower
