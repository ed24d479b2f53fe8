// Bounded NCCL calls (internal to the runtime).
//
// A bounded-wait kernel cannot guard an NCCL send or recv: the wait happens inside NCCL's own
// kernel, which spins until the peer posts its half. So the executor brackets every NCCL batch
// (one chunk, or one group) on its stream with two events, and a host thread per rank polls
// them, as PyTorch's NCCL watchdog does. Once the `before` event has completed (the batch is
// running), the `after` event must complete within the bound. If it does not, the watchdog
// writes a WaitRecord (kind nccl: rank, the chunk, the peer as its owner) into the
// WaitMonitor's record, unless a device wait got there first, and aborts the communicator:
// NCCL's kernels return, the stream drains, and the host raises WaitTimeoutError from
// WaitMonitor::check() like any other timed-out wait. The communicator is unusable afterwards.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "syncopate/runtime/nccl_comm.hpp"
#include "syncopate/runtime/rank_schedule.hpp"
#include "syncopate/runtime/wait_record.hpp"

namespace syncopate::runtime::detail {

// One NCCL call or group of one rank, as the timeout will name it.
struct NcclBatch {
  struct Member {
    int chunk = -1;
    StepRole role = StepRole::nccl_send;
    int peer = -1;
  };
  int rank = 0;
  std::int64_t call = 0;  // the executor's count of eager issues, for the message
  std::vector<Member> members;
};

// "NCCL group of chunk 5 (recv from rank 0) and chunk 6 (send to rank 2)"
std::string describe(const NcclBatch& batch);

class NcclWatchdog {
 public:
  // `record` is WaitMonitor::device_record(): pinned, mapped host memory, whose device address
  // is also its host address under unified addressing (every 64-bit CUDA platform); `device` is
  // the GPU the events live on.
  NcclWatchdog(int device, NcclComm& comm, std::int64_t bound_ns, WaitRecord* record);
  ~NcclWatchdog();  // stops the thread; batches still pending are no longer watched
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Records `before` on `stream`, calls issue() (which enqueues the batch's NCCL calls on
  // `stream`), records `after`, and watches the pair.
  void watch(cudaStream_t stream, NcclBatch batch, const std::function<void()>& issue);

  // Whether a batch timed out (and the communicator was aborted).
  bool fired() const;

 private:
  struct Entry {
    NcclBatch batch;
    cudaEvent_t before = nullptr;
    cudaEvent_t after = nullptr;
    bool started = false;
    std::chrono::steady_clock::time_point started_at{};
  };
  void run();
  // Fills the WaitRecord (if still empty) for a batch past its bound; returns the abort reason.
  std::string report(const Entry& entry);
  void release(const Entry& entry);

  int device_;
  NcclComm& comm_;
  std::chrono::nanoseconds bound_;
  WaitRecord* record_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> pending_;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace syncopate::runtime::detail
