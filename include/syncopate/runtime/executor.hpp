// The executor: issues one rank's share of a plan on CUDA streams, honouring stream order,
// deps, ready/dst-ready gates and the epoch protocol of rank_schedule.hpp.
//
// It takes a const plan and the per-rank SignalTables (lower::lower) and never changes them
// (plan = data, executor = execution, as mscclpp's ExecutionPlan vs Executor). All buffers
// live in a SymmetricHeap laid out by make_heap_layout(); every wait is bounded and reports
// through the WaitMonitor. Calls are asynchronous on the caller's stream: after synchronising
// it, call monitor.check() to turn a timed-out wait into a WaitTimeoutError.
//
// One executor per rank. In the single-process mode give each rank's executor its own host
// thread (the nccl backend needs it: NCCL calls of different ranks must not serialise on one
// thread).
//
// NCCL chunks of one group (plan::Chunk::group) are issued together: their waits, then their
// sends and recvs between one ncclGroupStart/End, then their landing raises. Every NCCL call or
// group is bounded by `wait_bound_ns` too: a watchdog thread aborts the communicator when one
// has not completed that long after it started, and records the timeout for monitor.check()
// (WaitKind::nccl, naming rank, chunk and peer). The communicator is unusable after that.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "syncopate/lower/signal_table.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/runtime/heap_layout.hpp"
#include "syncopate/runtime/nccl_comm.hpp"
#include "syncopate/runtime/rank_schedule.hpp"
#include "syncopate/runtime/symmetric_heap.hpp"
#include "syncopate/runtime/wait_monitor.hpp"

namespace syncopate::runtime {

namespace detail {
struct ChunkMove;  // backend.hpp
}  // namespace detail

struct WaitCondition;  // device_ops.hpp

struct ExecutorOptions {
  std::int64_t wait_bound_ns = 10'000'000'000;  // every wait gives up after this long
  int drop_chunk = -1;                          // test hook: this chunk is never moved, so its waiters time out
  int drop_on_rank = -1;                        // with drop_chunk: only this rank skips its part (an NCCL send whose
                                                // recv is still posted); -1: every rank
  int sm_copy_blocks = 16;                      // blocks of the SM-copy and add kernels
  // Local copy chunks (src == dst) the caller moves itself: each moves nothing, its landing is
  // raised in its place in the stream, after its waits. The caller reads or writes the data in
  // place (the MoE dispatch packs its own rows straight into x_recv's local slots; the MoE
  // combine gathers its own rows from y_send); the plan and every wait are unchanged. The
  // constructor refuses, naming the chunk, an id that is not a local copy of the plan.
  std::vector<int> in_place_chunks;
  bool high_priority_streams = true;  // the plan's streams at the device's greatest priority
};

class RankExecutor {
 public:
  // Throws UserError when the heap is smaller than the layout, the tables do not match the
  // plan, or a chunk uses nccl and `nccl` is null.
  RankExecutor(plan::CommPlan plan, std::vector<lower::SignalTable> tables, SymmetricHeap& heap, WaitMonitor& monitor,
               NcclComm* nccl, ExecutorOptions options = {});
  ~RankExecutor();
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  // One call, all on `stream` (see rank_schedule.hpp). Nothing the host enqueues depends on
  // which call it is: the epoch lives on the device (epoch.hpp), so the whole sequence can be
  // captured in a CUDA graph once and replayed for every later call.
  //   begin     advances this rank's epoch, then waits until every peer's exit counter shows
  //             the previous call done (nobody still reads or writes this call's buffers);
  //   (the caller puts its inputs in place)
  //   publish   raises the entry counter: peers may now read this rank's inputs;
  //   fork      the plan's side streams (highest priority) start after what `stream` holds so
  //             far, and not after anything enqueued on it later;
  //   (the caller launches its kernel at once: it waits per tile on the device, so it need not
  //    wait for the host to issue the chunks)
  //   issue_chunks  enqueues every chunk step on the side streams (the host's longest part);
  //   wait_landed   (optional) `stream` waits until every chunk landing here has landed;
  //   end       joins the side streams into `stream`, then raises the exit counter: call it once
  //             nothing reads or writes the plan's buffers any more.
  void begin(cudaStream_t stream);
  void publish(cudaStream_t stream);
  //   begin_and_publish  begin then publish where the caller has no inputs to put in place in
  //             between: one kernel (device_ops.hpp, begin_publish) instead of two or three
  //             dependent ones, so the GEMM launched next starts a node earlier.
  void begin_and_publish(cudaStream_t stream);
  void fork(cudaStream_t stream);
  void issue_chunks();
  void wait_landed(cudaStream_t stream);
  void end(cudaStream_t stream);
  // publish + fork + issue_chunks, then wait_landed if asked: for when no kernel runs beside
  // the chunks, or the kernel is launched after them.
  void issue(cudaStream_t stream, bool wait_landed = true);
  // begin + issue + end, for when the inputs are already in place.
  void run(cudaStream_t stream);
  // Ranks sharing a GPU in one process (docs/RUNTIME.md, "Ranks sharing a GPU") call publish()
  // on every rank, then a host barrier, then fork() + issue_chunks(): each entry write is then
  // enqueued ahead of every operation that waits for it, so no hardware queue shared by two
  // ranks can hold a waiter in front of the write it waits for.

  // Makes this rank's chunks that read plan tensor `name` read it at `address` (device memory
  // of this process, laid out as the plan's tensor) instead of from the heap; nullptr undoes it.
  // Meant for an all-gather's input (comm_plan.hpp): the caller's shard is read in place by
  // the local chunk, with no copy into the heap before the consumer starts. Takes effect from
  // the next issue_chunks(); a graph captures the address of its call. Throws UserError
  // (unbindable-tensor) when a chunk reads `name` from another rank: only the local chunks
  // may, since the address is not mapped by the peers.
  void bind_source(const std::string& name, const void* address);

  // This rank's epoch word (device memory): transformed kernels read it (`sy_epoch`).
  std::int32_t* epoch_word() const;

  int rank() const { return heap_.rank(); }
  const plan::CommPlan& plan() const { return plan_; }
  const std::vector<lower::SignalTable>& tables() const { return tables_; }
  const HeapLayout& layout() const { return layout_; }
  const RankSchedule& schedule() const { return schedule_; }
  const ExecutorOptions& options() const { return options_; }
  // Addresses in this process of tensor `name`, the signal slots and the control counters of
  // rank r.
  std::byte* tensor(int r, const std::string& name) const;
  std::int32_t* signals(int r) const;
  std::int32_t* control(int r) const;

 private:
  struct Impl;
  void wait_all(cudaStream_t stream, const std::vector<WaitRef>& waits);
  WaitCondition condition(const WaitRef& w) const;
  void set_control(cudaStream_t stream, int slot);
  void issue_step(const ChunkStep& step, cudaStream_t stream);
  void issue_group(const std::vector<const ChunkStep*>& steps, cudaStream_t stream);
  bool dropped(const ChunkStep& step) const;
  bool in_place(const ChunkStep& step) const;
  detail::ChunkMove make_move(const ChunkStep& step) const;
  // Issues the NCCL calls `issue` enqueues on `stream` under the watchdog (see above).
  void watched(cudaStream_t stream, const std::vector<const ChunkStep*>& steps, const std::function<void()>& issue);

  plan::CommPlan plan_;
  std::vector<lower::SignalTable> tables_;
  SymmetricHeap& heap_;
  WaitMonitor& monitor_;
  NcclComm* nccl_;
  ExecutorOptions options_;
  HeapLayout layout_;
  RankSchedule schedule_;
  std::map<std::string, const std::byte*> bound_sources_;  // bind_source
  std::unique_ptr<Impl> impl_;                             // CUDA streams, events, driver entry points
};

}  // namespace syncopate::runtime
