// The JSON dump of tile orders reads back to the same orders.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../lower/test_plans.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/schedule/tile_order_json.hpp"

namespace syncopate::schedule {
namespace {

TEST(TileOrderJson, ReadsBackToTheOrders) {
  const auto plan = testing::hand_ring_all_gather(3, {10, 4}, 0);
  const lower::TileGrid grid{10, 8, 3, 4};
  const auto tables = lower::lower(plan, grid, {{"x", lower::AccessRole::consume, 0, -1}});
  const auto arrival = estimate_arrival(plan);
  std::vector<TileOrder> orders;
  for (const auto& t : tables) orders.push_back(make_tile_order(plan, t, grid, OrderKind::grouped, arrival, 3));
  const auto doc = nlohmann::json::parse(tile_orders_to_json(orders, grid, 3, arrival));
  EXPECT_EQ(doc.at("version"), kTileOrderJsonVersion);
  EXPECT_EQ(doc.at("kind"), "tile-orders");
  EXPECT_EQ(doc.at("order"), "grouped");
  EXPECT_EQ(doc.at("group_m"), 3);
  EXPECT_EQ(doc.at("chunk_arrival").get<std::vector<double>>(), arrival);
  ASSERT_EQ(doc.at("ranks").size(), 3u);
  for (const auto& o : orders) {
    EXPECT_EQ(doc.at("ranks")[o.rank].at("rank"), o.rank);
    EXPECT_EQ(doc.at("ranks")[o.rank].at("tiles").get<std::vector<int>>(), o.tiles);
  }
  orders[1].kind = OrderKind::arrival;
  EXPECT_THROW((void)tile_orders_to_json(orders, grid, 3, arrival), InternalError);
}

}  // namespace
}  // namespace syncopate::schedule
