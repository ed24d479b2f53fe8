// HostFlag: see host_flag.hpp.
#include "syncopate/runtime/host_flag.hpp"

#include <atomic>

#include "cuda_check.hpp"

namespace syncopate::runtime {

HostFlag::HostFlag() {
  void* p = nullptr;
  // Pinned: a copy into pageable memory would be synchronous and cannot be captured.
  SY_CUDA_CHECK(cudaHostAlloc(&p, sizeof(std::int64_t), cudaHostAllocPortable));
  host_word_ = static_cast<std::int64_t*>(p);
  *host_word_ = 0;
}

HostFlag::~HostFlag() {
  if (host_word_ != nullptr) cudaFreeHost(host_word_);
}

void HostFlag::enqueue_copy(const void* device_word, cudaStream_t stream) {
  SY_CUDA_CHECK(cudaMemcpyAsync(host_word_, device_word, sizeof(std::int64_t), cudaMemcpyDeviceToHost, stream));
}

std::int64_t HostFlag::value() const {
  const std::int64_t v = *static_cast<volatile std::int64_t*>(host_word_);
  std::atomic_thread_fence(std::memory_order_acquire);
  return v;
}

void HostFlag::clear() {
  *static_cast<volatile std::int64_t*>(host_word_) = 0;
  std::atomic_thread_fence(std::memory_order_release);
}

}  // namespace syncopate::runtime
