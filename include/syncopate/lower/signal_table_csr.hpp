// The kernel-facing form of a SignalTable: flat int32 arrays a GPU kernel can index directly.
//
// For tile t, its wait slots are waits.items[waits.offsets[t] .. waits.offsets[t + 1]) and its
// notify slots notifies.items[notifies.offsets[t] .. notifies.offsets[t + 1]). slot_writers[s]
// gives the expected value per epoch (call e waits for signal[s] >= e * slot_writers[s]) and
// slot_chunk[s] the chunk a slot tracks, so a timed-out wait can name it.
#pragma once

#include <cstdint>
#include <vector>

#include "syncopate/lower/signal_table.hpp"

namespace syncopate::lower {

struct CsrLists {
  std::vector<std::int32_t> offsets;  // rows + 1 entries, offsets[0] == 0
  std::vector<std::int32_t> items;

  std::int32_t rows() const { return offsets.empty() ? 0 : static_cast<std::int32_t>(offsets.size() - 1); }
};

struct SignalTableArrays {
  std::int32_t rank = 0;
  std::int32_t num_slots = 0;
  std::int32_t num_landing = 0;  // landing slots are 0 .. num_landing-1
  std::vector<std::int32_t> slot_writers;
  std::vector<std::int32_t> slot_chunk;
  CsrLists waits;
  CsrLists notifies;
};

// Throws InternalError if a list entry does not fit in int32.
CsrLists to_csr(const std::vector<std::vector<int>>& lists);
std::vector<std::vector<int>> from_csr(const CsrLists& csr);

SignalTableArrays to_arrays(const SignalTable& table);

}  // namespace syncopate::lower
