// JSON form of lowered signal tables, for `syncopate lower -o`, golden files and inspection.
//
// {"version": 1, "kind": "signal-tables", "grid": {...}, "accesses": [{"tensor", "role", "m_dim",
//  "n_dim", "m_local_shard" (only when true)}], "ranks": [{"rank",
//  "slots": [{"slot", "kind", "chunk", "writers"}], "tile_waits": [[slot...] per tile],
//  "tile_notifies": [...], "csr": {"slot_writers", "slot_chunk", "num_landing", "wait_offsets",
//  "wait_slots", "notify_offsets", "notify_slots"}}]}. Output is deterministic.
#pragma once

#include <string>
#include <vector>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/lower/tiling.hpp"

namespace syncopate::lower {

inline constexpr int kSignalTableJsonVersion = 1;

std::string signal_tables_to_json(const std::vector<SignalTable>& tables, const TileGrid& grid,
                                  const std::vector<TileAccess>& accesses, int indent = 2);

}  // namespace syncopate::lower
