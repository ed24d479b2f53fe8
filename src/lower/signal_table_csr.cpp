// Flattening signal tables into int32 CSR arrays (see signal_table_csr.hpp).
#include "syncopate/lower/signal_table_csr.hpp"

#include <cstddef>
#include <limits>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"

namespace syncopate::lower {
namespace {

std::int32_t narrow(std::size_t value, const char* what) {
  if (value > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw InternalError(fmt::format("signal table: {} {} does not fit in int32", what, value));
  return static_cast<std::int32_t>(value);
}

}  // namespace

CsrLists to_csr(const std::vector<std::vector<int>>& lists) {
  CsrLists csr;
  csr.offsets.reserve(lists.size() + 1);
  csr.offsets.push_back(0);
  for (const auto& list : lists) {
    for (int v : list) csr.items.push_back(v);
    csr.offsets.push_back(narrow(csr.items.size(), "list length"));
  }
  return csr;
}

std::vector<std::vector<int>> from_csr(const CsrLists& csr) {
  std::vector<std::vector<int>> lists(static_cast<std::size_t>(csr.rows()));
  for (std::int32_t r = 0; r < csr.rows(); ++r)
    lists[r].assign(csr.items.begin() + csr.offsets[r], csr.items.begin() + csr.offsets[r + 1]);
  return lists;
}

SignalTableArrays to_arrays(const SignalTable& table) {
  SignalTableArrays out;
  out.rank = table.rank;
  out.num_slots = narrow(table.slots.size(), "slot count");
  for (const auto& slot : table.slots) {
    out.slot_writers.push_back(slot.writers);
    out.slot_chunk.push_back(slot.chunk);
    if (slot.kind == SlotKind::landing) ++out.num_landing;
  }
  out.waits = to_csr(table.tile_waits);
  out.notifies = to_csr(table.tile_notifies);
  return out;
}

}  // namespace syncopate::lower
