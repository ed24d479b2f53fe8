#include <gtest/gtest.h>

#include <climits>

#include "syncopate/runtime/epoch.hpp"

namespace syncopate::runtime {
namespace {

TEST(Epoch, AdvancesAndWrapsLikeTheDeviceWord) {
  EXPECT_EQ(next_epoch(0), 1);
  EXPECT_EQ(next_epoch(41), 42);
  EXPECT_EQ(next_epoch(INT32_MAX), INT32_MIN);
  EXPECT_EQ(next_epoch(-1), 0);
}

TEST(Epoch, ExpectedValueIsEpochPlusOffsetTimesWriters) {
  EXPECT_EQ(expected_value(3, 0, 1), 3);
  EXPECT_EQ(expected_value(3, 0, 4), 12);
  EXPECT_EQ(expected_value(3, -1, 4), 8);  // the exit counter of the previous call
  EXPECT_EQ(expected_value(1, -1, 1), 0);  // ... which call 1 finds at 0
  // Past 2^31 the product wraps exactly like a slot that was incremented that many times.
  const std::int32_t e = INT32_MAX / 4 + 10;
  std::uint32_t slot = 0;
  for (int call = 0; call < 4; ++call) slot += static_cast<std::uint32_t>(e);
  EXPECT_EQ(expected_value(e, 0, 4), static_cast<std::int32_t>(slot));
}

TEST(Epoch, ReachedComparesModulo32Bits) {
  EXPECT_TRUE(signal_reached(5, 5));
  EXPECT_TRUE(signal_reached(6, 5));
  EXPECT_FALSE(signal_reached(4, 5));
  EXPECT_FALSE(signal_reached(0, 1));  // a fresh slot before call 1 lands
  // Across the wrap: INT32_MIN is one past INT32_MAX.
  EXPECT_TRUE(signal_reached(INT32_MIN, INT32_MAX));
  EXPECT_FALSE(signal_reached(INT32_MAX, INT32_MIN));
  EXPECT_TRUE(signal_reached(INT32_MIN + 3, INT32_MAX - 2));
  // A slot one call behind is never taken for reached, wherever the epoch is.
  for (std::int32_t e : {1, 1000, INT32_MAX, INT32_MIN, -7})
    for (std::int32_t writers : {1, 3, 64})
      EXPECT_FALSE(signal_reached(expected_value(e, -1, writers), expected_value(e, 0, writers)))
          << "epoch " << e << " writers " << writers;
}

}  // namespace
}  // namespace syncopate::runtime
