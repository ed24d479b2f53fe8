// Epoch arithmetic: signals are never reset, call e waits for slot >= e * writers. Replays the
// increments of five back-to-back calls against a counter and checks when each wait is released.
#include <gtest/gtest.h>

#include "syncopate/lower/signal_table.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

TEST(Epochs, ExpectedIsEpochTimesWriters) {
  SignalTable table;
  table.slots = {{0, SlotKind::landing, 3, 1}, {1, SlotKind::ready, 4, 6}};
  for (std::int64_t e = 1; e <= 5; ++e) {
    EXPECT_EQ(table.expected(0, e), e);
    EXPECT_EQ(table.expected(1, e), 6 * e);
  }
  EXPECT_THROW((void)table.expected(2, 1), std::out_of_range);
}

TEST(Epochs, WaitsReleaseOnlyWhenEveryWriterOfThatCallIsDone) {
  // Rank 0's ready slot for chunk 0 (rows [4,8) of x [8, 6]) is written by the 2 x 2 tiles of
  // 2 rows x 3 columns that cover it: 4 writers.
  const auto plan = testing::hand_direct_reduce_scatter(2, 8, 6);
  const auto tables = lower(plan, {8, 6, 2, 3}, {{"x", AccessRole::produce, 0, 1}});
  const auto& table = tables[0];
  const int slot = table.ready_slot_of_chunk[0];
  ASSERT_GE(slot, 0);
  const int writers = table.slots[slot].writers;
  ASSERT_EQ(writers, 4);

  std::int64_t counter = 0;  // the device signal; never reset
  for (std::int64_t e = 1; e <= 5; ++e) {
    for (int w = 0; w < writers; ++w) {
      // Before this call's last writer, the call-e wait must hold; the previous call's wait is
      // satisfied (counter only grows), the next call's wait certainly holds.
      EXPECT_LT(counter, table.expected(slot, e)) << "epoch " << e << " writer " << w;
      EXPECT_GE(counter, table.expected(slot, e - 1));
      ++counter;
    }
    EXPECT_GE(counter, table.expected(slot, e)) << "epoch " << e;
    EXPECT_LT(counter, table.expected(slot, e + 1)) << "epoch " << e;
  }
  // A slow waiter of call 3 that checks after call 5 finished is still released.
  EXPECT_GE(counter, table.expected(slot, 3));
}

TEST(Epochs, LandingSlotsHaveOneWriterPerCall) {
  const auto plan = testing::hand_ring_all_gather(4, {8, 2}, 0);
  const auto tables = lower(plan, {8, 2, 2, 2}, {{"x", AccessRole::consume, 0, -1}});
  for (const auto& table : tables)
    for (const auto& slot : table.slots) {
      ASSERT_EQ(slot.kind, SlotKind::landing);
      for (std::int64_t e = 1; e <= 5; ++e) EXPECT_EQ(table.expected(slot.slot, e), e);
    }
}

}  // namespace
}  // namespace syncopate::lower
