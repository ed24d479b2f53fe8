// estimate_arrival(): hand-computed landing times on small plans, and its ordering guarantees
// (later in a stream or deeper in deps lands later) on every template.
#include <string>

#include <gtest/gtest.h>

#include "../lower/test_plans.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {
namespace {

TEST(EstimateArrival, HandComputedStreamsDepsAndBytes) {
  testing::PlanBuilder b(3);
  b.tensor("x", {10, 4}, plan::DType::bf16);                                // 2 bytes per element, 8 bytes per row
  const int a = b.chunk("x", testing::rows_box(0, 2, 4), 0, 1, 0);          // 16 bytes: 0 -> 16
  const int c = b.chunk("x", testing::rows_box(2, 3, 4), 0, 2, 0);          // after a: 16 -> 40
  const int d = b.chunk("x", testing::rows_box(5, 1, 4), 0, 1, 1);          // own stream: 0 -> 8
  const int e = b.chunk("x", testing::rows_box(0, 2, 4), 1, 2, 0, {a});     // after a: 16 -> 32
  const int f = b.chunk("x", testing::rows_box(6, 4, 4), 2, 0, 0, {c, e});  // after c: 40 -> 72
  const auto arrival = estimate_arrival(b.plan());
  ASSERT_EQ(arrival.size(), 5u);
  EXPECT_DOUBLE_EQ(arrival[a], 16);
  EXPECT_DOUBLE_EQ(arrival[c], 40);
  EXPECT_DOUBLE_EQ(arrival[d], 8);
  EXPECT_DOUBLE_EQ(arrival[e], 32);
  EXPECT_DOUBLE_EQ(arrival[f], 72);
}

TEST(EstimateArrival, LaterInStreamAndDeeperInDepsLandsLater) {
  for (const auto& tc : testing::all_template_cases()) {
    SCOPED_TRACE(tc.name);
    const auto plan = plan::make_plan(tc.options);
    const auto arrival = estimate_arrival(plan);
    ASSERT_EQ(arrival.size(), plan.chunks.size());
    EXPECT_EQ(arrival, estimate_arrival(plan));  // deterministic
    for (const auto& c : plan.chunks) {
      EXPECT_GT(arrival[c.id], 0.0);
      for (int dep : c.deps) EXPECT_GT(arrival[c.id], arrival[dep]) << "chunk " << c.id;
    }
    for (const auto& rank : plan.ranks)
      for (const auto& stream : rank.streams)
        for (std::size_t i = 1; i < stream.size(); ++i) EXPECT_GT(arrival[stream[i]], arrival[stream[i - 1]]);
  }
}

TEST(EstimateArrival, CycleIsAUserError) {
  testing::PlanBuilder b(2);
  b.tensor("x", {4, 4});
  b.chunk("x", testing::rows_box(0, 2, 4), 0, 1, 0, {1});
  b.chunk("x", testing::rows_box(2, 2, 4), 1, 0, 0, {0});
  try {
    (void)estimate_arrival(b.plan());
    FAIL() << "a cycle was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunks["), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace syncopate::schedule
