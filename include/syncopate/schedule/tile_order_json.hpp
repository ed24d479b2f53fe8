// JSON form of tile orders, for `syncopate schedule -o`, golden files and inspection.
//
// {"version": 1, "kind": "tile-orders", "order": "arrival", "group_m": 8, "grid": {...},
//  "chunk_arrival": [per chunk id], "ranks": [{"rank": 0, "tiles": [tile ids in order]}]}.
#pragma once

#include <string>
#include <vector>

#include "syncopate/lower/tiling.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {

inline constexpr int kTileOrderJsonVersion = 1;

// Every order must have the same kind; throws InternalError otherwise.
std::string tile_orders_to_json(const std::vector<TileOrder>& orders, const lower::TileGrid& grid, int group_m,
                                const std::vector<double>& chunk_arrival, int indent = 2);

}  // namespace syncopate::schedule
