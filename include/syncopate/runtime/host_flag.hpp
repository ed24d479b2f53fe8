// A word of pinned host memory that a stream copies a device word into, so the host can look at
// it later without synchronizing.
//
// The fused kernel keeps its wait-timeout record in device memory. Each op call ends by
// enqueueing a copy of the record's flag word here (a plain cudaMemcpyAsync into pinned memory,
// which a CUDA graph captures as a memcpy node and replays with the call). The next call reads
// value() before it enqueues anything: a call whose wait timed out is reported one or two calls
// later without any call synchronizing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace syncopate::runtime {

class HostFlag {
 public:
  HostFlag();  // throws DeviceError
  ~HostFlag();
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;

  // Enqueues the copy of the 8-byte word at `device_word` (device memory) on `stream`.
  void enqueue_copy(const void* device_word, cudaStream_t stream);
  // The word as the last completed copy left it (0 until then, or after clear()).
  std::int64_t value() const;
  void clear();

 private:
  std::int64_t* host_word_ = nullptr;
};

}  // namespace syncopate::runtime
