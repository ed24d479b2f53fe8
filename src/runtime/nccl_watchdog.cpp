// NcclWatchdog: see nccl_watchdog.hpp.
#include "nccl_watchdog.hpp"

#include <atomic>
#include <cstdio>

#include <fmt/format.h>

#include "cuda_check.hpp"

namespace syncopate::runtime::detail {
namespace {

// How often a running batch is polled: well under any sensible bound, cheap for one thread.
constexpr auto kPoll = std::chrono::microseconds(200);

std::string describe_member(const NcclBatch::Member& m) {
  return fmt::format("chunk {} ({} rank {})", m.chunk, m.role == StepRole::nccl_recv ? "recv from" : "send to", m.peer);
}

// The member a timeout names: a recv waits for its peer's send, so it is the likelier culprit.
const NcclBatch::Member& named_member(const NcclBatch& batch) {
  for (const auto& m : batch.members)
    if (m.role == StepRole::nccl_recv) return m;
  return batch.members.front();
}

}  // namespace

std::string describe(const NcclBatch& batch) {
  std::string out = batch.members.size() > 1 ? "NCCL group of " : "NCCL ";
  for (std::size_t i = 0; i < batch.members.size(); ++i) {
    if (i > 0) out += i + 1 == batch.members.size() ? " and " : ", ";
    out += describe_member(batch.members[i]);
  }
  return out;
}

NcclWatchdog::NcclWatchdog(int device, NcclComm& comm, std::int64_t bound_ns, WaitRecord* record)
    : device_(device), comm_(comm), bound_(bound_ns), record_(record), thread_([this] { run(); }) {}

NcclWatchdog::~NcclWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (const auto& e : pending_) release(e);
}

bool NcclWatchdog::fired() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return fired_;
}

void NcclWatchdog::watch(cudaStream_t stream, NcclBatch batch, const std::function<void()>& issue) {
  Entry e;
  e.batch = std::move(batch);
  SY_CUDA_CHECK(cudaEventCreateWithFlags(&e.before, cudaEventDisableTiming));
  SY_CUDA_CHECK(cudaEventCreateWithFlags(&e.after, cudaEventDisableTiming));
  SY_CUDA_CHECK(cudaEventRecord(e.before, stream));
  try {
    issue();
  } catch (...) {
    release(e);
    throw;
  }
  SY_CUDA_CHECK(cudaEventRecord(e.after, stream));
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(e));
  }
  wake_.notify_all();
}

void NcclWatchdog::release(const Entry& e) {
  if (e.before != nullptr) cudaEventDestroy(e.before);
  if (e.after != nullptr) cudaEventDestroy(e.after);
}

void NcclWatchdog::run() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    // Batches on one stream finish in order, so the oldest one is the only one to time.
    Entry& e = pending_.front();
    const cudaError_t done = cudaEventQuery(e.after);
    if (done != cudaErrorNotReady) {
      // Done, or a CUDA error that synchronising the stream will report: not ours to time.
      release(e);
      pending_.pop_front();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!e.started && cudaEventQuery(e.before) != cudaErrorNotReady) {
      e.started = true;
      e.started_at = now;
    }
    if (e.started && now - e.started_at > bound_) {
      const std::string why = report(e);
      // The abort ends every NCCL call of this communicator; nothing left to watch.
      for (const auto& rest : pending_) release(rest);
      pending_.clear();
      fired_ = true;
      // ncclCommAbort waits for NCCL's kernels and threads: not under the lock, so the issuing
      // thread is never held up behind it.
      lock.unlock();
      std::fprintf(stderr, "syncopate: %s; aborting the NCCL communicator\n", why.c_str());
      std::fflush(stderr);
      comm_.abort(why);
      lock.lock();
      continue;
    }
    wake_.wait_for(lock, kPoll, [this] { return stop_; });
  }
}

std::string NcclWatchdog::report(const Entry& e) {
  const auto& m = named_member(e.batch);
  const auto bound_ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound_).count();
  const std::string why = fmt::format("rank {}: {} did not complete within {} ms of starting (call {})", e.batch.rank,
                                      describe(e.batch), bound_ms, e.batch.call);
  // Same record as a device wait's; the first timeout wins, so a device wait that already
  // reported (say, the landing wait of this very chunk) keeps its record.
  volatile WaitRecord* r = record_;
  if (r->flag == 0) {
    r->rank = e.batch.rank;
    r->owner = m.peer;
    r->slot = -1;
    r->chunk = m.chunk;
    r->kind = static_cast<std::int32_t>(WaitKind::nccl);
    r->expected = e.batch.call;
    r->seen = 0;
    r->bound_ns = bound_.count();
    std::atomic_thread_fence(std::memory_order_release);
    r->flag = 1;
  }
  return why;
}

}  // namespace syncopate::runtime::detail
