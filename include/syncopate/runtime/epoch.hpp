// Epoch arithmetic, one definition for the host and the device.
//
// Each rank keeps its epoch (the number of the call in flight) in device memory (control slot
// kEpochSlot of its heap) and every call advances it on the device, first thing. Waits compute
// what they expect from it on the device, and landing slots and entry/exit counters are raised
// to its value, so nothing the host enqueues depends on which call it is: the same work
// captured once in a CUDA graph is right on every replay. Slots and the epoch are int32 and
// wrap around; comparisons are modulo 2^32, which is right while no waiter is 2^31 increments
// behind (so there is no limit on the number of calls). Plain C++: unit-tested on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SY_HOST_DEVICE __host__ __device__
#else
#define SY_HOST_DEVICE
#endif

namespace syncopate::runtime {

// The epoch after `epoch` (wraps from INT32_MAX to INT32_MIN).
SY_HOST_DEVICE constexpr std::int32_t next_epoch(std::int32_t epoch) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(epoch) + 1u);
}

// What a slot with `writers` increments per call holds once call (epoch + offset) is done,
// modulo 2^32 (unsigned arithmetic: no signed overflow).
SY_HOST_DEVICE constexpr std::int32_t expected_value(std::int32_t epoch, std::int32_t offset, std::int32_t writers) {
  return static_cast<std::int32_t>((static_cast<std::uint32_t>(epoch) + static_cast<std::uint32_t>(offset)) *
                                   static_cast<std::uint32_t>(writers));
}

// Whether a slot holding `seen` has reached `expected`: seen - expected >= 0 modulo 2^32.
SY_HOST_DEVICE constexpr bool signal_reached(std::int32_t seen, std::int32_t expected) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(seen) - static_cast<std::uint32_t>(expected)) >= 0;
}

}  // namespace syncopate::runtime
