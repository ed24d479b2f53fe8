// Test helper: one process driving `world` ranks on the visible GPUs (rank r on device
// r % device_count, so a world of 2 also runs on one GPU), each rank with its heap, stream,
// executor and host thread. Inputs are integer-valued f32, so sums are exact in any order.
#pragma once

#include <barrier>
#include <functional>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "syncopate/plan/templates.hpp"
#include "syncopate/runtime/executor.hpp"

namespace syncopate::gpu_test {

int device_count();

class LocalGroup {
 public:
  LocalGroup(const plan::CommPlan& plan, runtime::ExecutorOptions options = {});
  ~LocalGroup();

  int world() const { return world_; }
  bool distinct_devices() const { return distinct_; }
  runtime::RankExecutor& executor(int r) { return *executors_[r]; }
  runtime::WaitMonitor& monitor() { return *monitor_; }
  cudaStream_t stream(int r) const { return streams_[r]; }
  int device(int r) const { return heaps_[r]->device(); }

  // Runs fn(rank) on one host thread per rank (each with its device current) and joins.
  // Rethrows the first exception a rank threw.
  void on_every_rank(const std::function<void(int)>& fn);

  // Inside on_every_rank(): returns once every rank's thread has called it (a rank that threw
  // no longer counts). For ranks sharing a GPU: whatever a rank enqueued before the barrier is
  // ahead, in every hardware queue, of what any rank enqueues after it, so a wait enqueued after
  // the barrier cannot hold up the write it waits for (docs/RUNTIME.md, "Ranks sharing a GPU").
  void barrier();

  // A device copy of `values` on rank r's GPU, freed with the group. Call it from the main
  // thread before on_every_rank(): allocation and pageable copies can synchronise the whole
  // device, and a rank thread blocked there while a rank sharing its GPU waits for it would
  // stall both until the wait bound (seen with several ranks per GPU).
  const float* upload(int r, const std::vector<float>& values);

  // Host <-> device copies of tensor `name` on rank r (synchronous).
  void write(int r, const std::string& name, const std::vector<float>& values);
  std::vector<float> read(int r, const std::string& name);

 private:
  int world_ = 1;
  bool distinct_ = true;
  std::unique_ptr<runtime::WaitMonitor> monitor_;
  std::vector<std::unique_ptr<runtime::SymmetricHeap>> heaps_;
  std::vector<std::unique_ptr<runtime::NcclComm>> nccl_;
  std::vector<std::unique_ptr<runtime::RankExecutor>> executors_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::pair<int, void*>> uploads_;  // (device, buffer)
  std::unique_ptr<std::barrier<>> barrier_;     // of the running on_every_rank(), else null
};

}  // namespace syncopate::gpu_test
