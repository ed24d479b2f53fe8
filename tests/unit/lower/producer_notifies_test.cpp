// Producer side (GEMM+RS): ready slots on the source, dst-ready slots on the destination, each
// notified by exactly the tiles that write the box, with writers equal to that tile count.
#include <gtest/gtest.h>

#include "brute_force.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

TEST(ProducerNotifies, HandCheckedDirectReduceScatter) {
  // x [4, 4] over 2 ranks: chunk 0 adds rank 0's rows [2,4) into rank 1, chunk 1 adds rank 1's
  // rows [0,2) into rank 0. Tiles of 3 rows: [0,3) and [3,4).
  const auto plan = testing::hand_direct_reduce_scatter(2, 4, 4);
  const auto tables = lower(plan, {4, 4, 3, 4}, {{"x", AccessRole::produce, 0, 1}});
  const auto& t0 = tables[0];
  ASSERT_EQ(t0.slots.size(), 3u);
  EXPECT_EQ(t0.slots[0].kind, SlotKind::landing);
  EXPECT_EQ(t0.slots[0].chunk, 1);
  EXPECT_EQ(t0.slots[1].kind, SlotKind::ready);
  EXPECT_EQ(t0.slots[1].chunk, 0);
  EXPECT_EQ(t0.slots[1].writers, 2);  // both tile rows hold part of rows [2,4)
  EXPECT_EQ(t0.slots[2].kind, SlotKind::dst_ready);
  EXPECT_EQ(t0.slots[2].chunk, 1);
  EXPECT_EQ(t0.slots[2].writers, 1);  // rows [0,2) lie in tile 0 only
  EXPECT_EQ(t0.tile_notifies[0], (std::vector<int>{1, 2}));
  EXPECT_EQ(t0.tile_notifies[1], (std::vector<int>{1}));
}

TEST(ProducerNotifies, HandPlansMatchBruteForce) {
  for (int world : {1, 2, 3, 4})
    for (std::int64_t bm : {1, 2, 3, 5, 8})
      for (std::int64_t bn : {2, 3, 5}) {
        SCOPED_TRACE(::testing::Message() << "world " << world << " tile " << bm << "x" << bn);
        const auto plan = testing::hand_direct_reduce_scatter(world, 7, 5);
        testing::expect_notifies_match_brute_force(plan, {7, 5, bm, bn}, {"x", AccessRole::produce, 0, 1});
      }
}

}  // namespace
}  // namespace syncopate::lower
