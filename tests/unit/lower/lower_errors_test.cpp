// Bad inputs to lower() get a UserError that names what is wrong and the rule.
#include <string>

#include <gtest/gtest.h>

#include "syncopate/common/error.hpp"
#include "syncopate/lower/signal_table.hpp"
#include "lower_error.hpp"
#include "test_plans.hpp"

namespace syncopate::lower {
namespace {

using testing::lower_error;

class LowerErrors : public ::testing::Test {
 protected:
  plan::CommPlan plan = testing::hand_ring_all_gather(2, {8, 4}, 0);  // x [8, 4]
  TileGrid grid{8, 16, 4, 4};
};

TEST_F(LowerErrors, UnknownTensor) {
  const auto msg = lower_error(plan, grid, {{"a", AccessRole::consume, 0, -1}});
  EXPECT_NE(msg.find("unknown-tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"a\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"x\""), std::string::npos) << msg;  // lists what exists
}

TEST_F(LowerErrors, DimOutOfRange) {
  auto msg = lower_error(plan, grid, {{"x", AccessRole::consume, 2, -1}});
  EXPECT_NE(msg.find("dim-out-of-range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m_dim is 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 dims"), std::string::npos) << msg;
  msg = lower_error(plan, grid, {{"x", AccessRole::consume, 0, -2}});
  EXPECT_NE(msg.find("n_dim is -2"), std::string::npos) << msg;
}

TEST_F(LowerErrors, SameDimTwice) {
  const auto msg = lower_error(plan, {8, 8, 4, 4}, {{"x", AccessRole::consume, 0, 0}});
  EXPECT_NE(msg.find("same-dim"), std::string::npos) << msg;
}

TEST_F(LowerErrors, GridDoesNotMatchTensor) {
  auto msg = lower_error(plan, {9, 16, 4, 4}, {{"x", AccessRole::consume, 0, -1}});
  EXPECT_NE(msg.find("grid-mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("extent 8 on m_dim 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("M = 9"), std::string::npos) << msg;
  msg = lower_error(plan, {8, 5, 4, 4}, {{"x", AccessRole::produce, 0, 1}});
  EXPECT_NE(msg.find("extent 4 on n_dim 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("N = 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("produce"), std::string::npos) << msg;
}

TEST_F(LowerErrors, BadGrid) {
  auto msg = lower_error(plan, {0, 16, 4, 4}, {});
  EXPECT_NE(msg.find("empty-gemm"), std::string::npos) << msg;
  msg = lower_error(plan, {8, 16, 0, 4}, {});
  EXPECT_NE(msg.find("bad-tile"), std::string::npos) << msg;
}

TEST_F(LowerErrors, UnverifiedPlanIsRejectedNotIndexedOutOfRange) {
  plan.chunks[1].dst = 7;
  auto msg = lower_error(plan, grid, {{"x", AccessRole::consume, 0, -1}});
  EXPECT_NE(msg.find("chunks[1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank-out-of-range"), std::string::npos) << msg;
  plan = testing::hand_ring_all_gather(2, {8, 4}, 0);
  plan.chunks[0].dst_box.offset.pop_back();
  msg = lower_error(plan, grid, {{"x", AccessRole::consume, 0, -1}});
  EXPECT_NE(msg.find("chunks[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("box-rank-mismatch"), std::string::npos) << msg;
}

}  // namespace
}  // namespace syncopate::lower
