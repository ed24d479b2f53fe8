// Writing signal tables as JSON (see signal_table_json.hpp).
#include "syncopate/lower/signal_table_json.hpp"

#include <nlohmann/json.hpp>

#include "syncopate/common/json_text.hpp"
#include "syncopate/lower/signal_table_csr.hpp"
#include "syncopate/lower/spelling.hpp"

namespace syncopate::lower {

namespace {

nlohmann::json grid_json(const TileGrid& grid) {
  return {{"m", grid.m},
          {"n", grid.n},
          {"block_m", grid.block_m},
          {"block_n", grid.block_n},
          {"tiles_m", grid.tiles_m()},
          {"tiles_n", grid.tiles_n()}};
}

nlohmann::json rank_json(const SignalTable& table) {
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& s : table.slots)
    slots.push_back(
        {{"slot", s.slot}, {"kind", std::string(plan::to_string(s.kind))}, {"chunk", s.chunk}, {"writers", s.writers}});
  const SignalTableArrays arrays = to_arrays(table);
  nlohmann::json csr = {{"num_landing", arrays.num_landing},    {"slot_writers", arrays.slot_writers},
                        {"slot_chunk", arrays.slot_chunk},      {"wait_offsets", arrays.waits.offsets},
                        {"wait_slots", arrays.waits.items},     {"notify_offsets", arrays.notifies.offsets},
                        {"notify_slots", arrays.notifies.items}};
  return {{"rank", table.rank},
          {"slots", std::move(slots)},
          {"tile_waits", table.tile_waits},
          {"tile_notifies", table.tile_notifies},
          {"csr", std::move(csr)}};
}

}  // namespace

std::string signal_tables_to_json(const std::vector<SignalTable>& tables, const TileGrid& grid,
                                  const std::vector<TileAccess>& accesses, int indent) {
  nlohmann::json access_list = nlohmann::json::array();
  for (const auto& a : accesses) {
    nlohmann::json entry = {
        {"tensor", a.tensor}, {"role", std::string(plan::to_string(a.role))}, {"m_dim", a.m_dim}, {"n_dim", a.n_dim}};
    if (a.m_local_shard) entry["m_local_shard"] = true;  // absent = false (older files stay as they were)
    access_list.push_back(std::move(entry));
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& table : tables) ranks.push_back(rank_json(table));
  const nlohmann::json doc = {{"version", kSignalTableJsonVersion},
                              {"kind", "signal-tables"},
                              {"grid", grid_json(grid)},
                              {"accesses", std::move(access_list)},
                              {"ranks", std::move(ranks)}};
  return pretty_json(doc.dump(), indent);
}

}  // namespace syncopate::lower
