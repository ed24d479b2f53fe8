// The kernel-facing int32 CSR arrays hold exactly the nested lists of the SignalTable.
#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table_csr.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

TEST(Csr, EmptyAndRaggedLists) {
  const std::vector<std::vector<int>> lists{{}, {4, 7}, {}, {1}};
  const CsrLists csr = to_csr(lists);
  EXPECT_EQ(csr.offsets, (std::vector<std::int32_t>{0, 0, 2, 2, 3}));
  EXPECT_EQ(csr.items, (std::vector<std::int32_t>{4, 7, 1}));
  EXPECT_EQ(csr.rows(), 4);
  EXPECT_EQ(from_csr(csr), lists);
  EXPECT_EQ(to_csr({}).offsets, (std::vector<std::int32_t>{0}));
}

TEST(Csr, ArraysRoundTripTheTables) {
  const auto plan = testing::hand_direct_reduce_scatter(3, 7, 5);
  const auto tables = lower(plan, {7, 5, 2, 3}, {{"x", AccessRole::produce, 0, 1}, {"x", AccessRole::consume, 0, -1}});
  for (const auto& table : tables) {
    const SignalTableArrays a = to_arrays(table);
    EXPECT_EQ(a.rank, table.rank);
    ASSERT_EQ(a.num_slots, static_cast<std::int32_t>(table.slots.size()));
    for (const auto& s : table.slots) {
      EXPECT_EQ(a.slot_writers[s.slot], s.writers);
      EXPECT_EQ(a.slot_chunk[s.slot], s.chunk);
      // Landing slots are exactly 0 .. num_landing-1.
      EXPECT_EQ(s.kind == SlotKind::landing, s.slot < a.num_landing);
    }
    EXPECT_EQ(from_csr(a.waits), table.tile_waits);
    EXPECT_EQ(from_csr(a.notifies), table.tile_notifies);
    EXPECT_EQ(a.waits.rows(), 4 * 2);
  }
}

}  // namespace
}  // namespace syncopate::lower
