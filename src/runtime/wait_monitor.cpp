// WaitMonitor: see wait_monitor.hpp.
#include "syncopate/runtime/wait_monitor.hpp"

#include <atomic>

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"

namespace syncopate::runtime {

WaitMonitor::WaitMonitor() {
  void* p = nullptr;
  SY_CUDA_CHECK(cudaHostAlloc(&p, sizeof(WaitRecord), cudaHostAllocMapped | cudaHostAllocPortable));
  host_record_ = new (p) WaitRecord{};
  void* d = nullptr;
  SY_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  device_record_ = static_cast<WaitRecord*>(d);
}

WaitMonitor::~WaitMonitor() {
  if (host_record_ != nullptr) cudaFreeHost(host_record_);
}

WaitRecord WaitMonitor::snapshot() const {
  // The device writes the fields, then the flag; read the flag first, then the fields.
  const volatile WaitRecord* r = host_record_;
  WaitRecord out;
  out.flag = r->flag;
  std::atomic_thread_fence(std::memory_order_acquire);
  out.rank = r->rank;
  out.owner = r->owner;
  out.slot = r->slot;
  out.chunk = r->chunk;
  out.kind = r->kind;
  out.expected = r->expected;
  out.seen = r->seen;
  out.bound_ns = r->bound_ns;
  return out;
}

bool WaitMonitor::timed_out() const {
  const volatile WaitRecord* r = host_record_;
  return r->flag != 0;
}

void WaitMonitor::check() {
  const WaitRecord r = snapshot();
  if (r.flag == 0) return;
  clear();
  throw_if_timed_out(r);
}

void WaitMonitor::clear() {
  volatile WaitRecord* r = host_record_;
  r->flag = 0;
  std::atomic_thread_fence(std::memory_order_release);
}

}  // namespace syncopate::runtime
