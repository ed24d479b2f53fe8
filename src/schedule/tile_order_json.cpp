// Writing tile orders as JSON (see tile_order_json.hpp).
#include "syncopate/schedule/tile_order_json.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"
#include "syncopate/common/json_text.hpp"

namespace syncopate::schedule {

std::string tile_orders_to_json(const std::vector<TileOrder>& orders, const lower::TileGrid& grid, int group_m,
                                const std::vector<double>& chunk_arrival, int indent) {
  const OrderKind kind = orders.empty() ? OrderKind::arrival : orders.front().kind;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& order : orders) {
    if (order.kind != kind)
      throw InternalError(fmt::format("tile_orders_to_json: rank {} has order {}, rank {} has {}", orders.front().rank,
                                      to_string(kind), order.rank, to_string(order.kind)));
    ranks.push_back({{"rank", order.rank}, {"tiles", order.tiles}});
  }
  const nlohmann::json doc = {{"version", kTileOrderJsonVersion},
                              {"kind", "tile-orders"},
                              {"order", std::string(to_string(kind))},
                              {"group_m", group_m},
                              {"grid",
                               {{"m", grid.m},
                                {"n", grid.n},
                                {"block_m", grid.block_m},
                                {"block_n", grid.block_n},
                                {"tiles_m", grid.tiles_m()},
                                {"tiles_n", grid.tiles_n()}}},
                              {"chunk_arrival", chunk_arrival},
                              {"ranks", std::move(ranks)}};
  return pretty_json(doc.dump(), indent);
}

}  // namespace syncopate::schedule
