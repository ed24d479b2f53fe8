// What a bounded wait leaves behind when it runs past its bound, and the error the host raises.
//
// Every device-side wait (the runtime's wait kernel and the Triton `wait` primitive) spins with
// a time bound. The first waiter to time out fills a WaitRecord (host-mapped memory for the
// runtime, a device int64[8] for Triton kernels) and sets `flag`; every other waiter that sees
// the flag stops waiting, so a missing chunk costs one bound, not one per waiter. After the
// stream is synchronised the host turns the record into a WaitTimeoutError naming rank, slot,
// expected and seen values and the chunk. Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <string>

namespace syncopate::runtime {

// Layout shared with device code: keep it plain, 8-byte aligned, no padding surprises.
struct WaitRecord {
  std::int32_t flag = 0;    // 0: nothing timed out; 1: the fields below describe a timeout
  std::int32_t rank = -1;   // the rank that waited
  std::int32_t owner = -1;  // the rank whose slot it read
  std::int32_t slot = -1;
  std::int32_t chunk = -1;  // the chunk the slot tracks, -1 for entry/exit counters
  std::int32_t kind = 0;    // a WaitKind (rank_schedule.hpp)
  std::int64_t expected = 0;
  std::int64_t seen = 0;
  std::int64_t bound_ns = 0;
};
static_assert(sizeof(WaitRecord) == 48, "WaitRecord is shared with device code");

// "rank 1: wait timed out after 200 ms: landing slot 3 on rank 1 (chunk 5) expected >= 7, seen 6
//  (the chunk never landed: its backend did not run, or a peer stopped)"
std::string format_timeout(const WaitRecord& record);

// Throws WaitTimeoutError with format_timeout() when record.flag is set.
void throw_if_timed_out(const WaitRecord& record);

}  // namespace syncopate::runtime
