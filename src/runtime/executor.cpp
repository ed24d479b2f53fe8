// RankExecutor: see executor.hpp.
#include "syncopate/runtime/executor.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "backend.hpp"
#include "cuda_check.hpp"
#include "nccl_watchdog.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/runtime/device_ops.hpp"

namespace syncopate::runtime {
namespace {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    SY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) SY_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

struct RankExecutor::Impl {
  std::vector<cudaStream_t> streams;  // one per plan stream, highest priority
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  std::unique_ptr<detail::NcclWatchdog> watchdog;  // when this rank sends or receives by NCCL
  bool forked = false;                             // fork() ran and issue_chunks() has not yet
  std::int64_t calls = 0;                          // eager issue_chunks() calls, to name an NCCL timeout
};

RankExecutor::RankExecutor(plan::CommPlan plan, std::vector<lower::SignalTable> tables, SymmetricHeap& heap,
                           WaitMonitor& monitor, NcclComm* nccl, ExecutorOptions options)
    : plan_(std::move(plan)),
      tables_(std::move(tables)),
      heap_(heap),
      monitor_(monitor),
      nccl_(nccl),
      options_(options),
      layout_(make_heap_layout(plan_, tables_)),
      schedule_(make_rank_schedule(plan_, tables_, heap.rank())),
      impl_(std::make_unique<Impl>()) {
  const int r = heap_.rank();
  if (heap_.world() != plan_.world_size)
    throw UserError(fmt::format("rank {}: world-mismatch: heap of world {} for a plan of world_size {}", r,
                                heap_.world(), plan_.world_size));
  if (static_cast<std::int64_t>(heap_.bytes()) < layout_.total_bytes)
    throw UserError(fmt::format("rank {}: heap-too-small: the plan needs {} bytes, the heap has {}", r,
                                layout_.total_bytes, heap_.bytes()));
  if (!heap_.connected())
    throw UserError(fmt::format("rank {}: heap-not-connected: map the peers before building an executor", r));
  if (options_.wait_bound_ns <= 0)
    throw UserError(fmt::format("rank {}: bad-wait-bound: {} ns (must be positive)", r, options_.wait_bound_ns));
  for (int id : options_.in_place_chunks) {
    if (id < 0 || static_cast<std::size_t>(id) >= plan_.chunks.size())
      throw UserError(
          fmt::format("rank {}: in-place-chunk: chunk {} is not in the plan ({} chunks)", r, id, plan_.chunks.size()));
    const auto& c = plan_.chunks[static_cast<std::size_t>(id)];
    if (c.src != c.dst || c.op != plan::ChunkOp::copy)
      throw UserError(
          fmt::format("rank {}, chunk {}: in-place-chunk: only a local copy (src == dst) can be left to "
                      "the caller, this one is {} {} -> {}",
                      r, id, plan::to_string(c.op), c.src, c.dst));
  }
  bool uses_nccl = false;
  for (const auto& steps : schedule_.streams)
    for (const auto& step : steps) {
      const bool nccl_call = plan_.chunks[step.chunk].backend == plan::Backend::nccl && step.role != StepRole::local;
      if (nccl_call && nccl_ == nullptr)
        throw UserError(
            fmt::format("rank {}, chunk {}: nccl-without-communicator: the chunk uses the "
                        "nccl backend but no NCCL communicator was given",
                        r, step.chunk));
      uses_nccl = uses_nccl || nccl_call;
      if (step.group != plan::kNoGroup && !nccl_call)
        throw UserError(
            fmt::format("rank {}, chunk {}: group-not-nccl: only NCCL sends and recvs can be "
                        "grouped (verify the plan)",
                        r, step.chunk));
    }
  DeviceScope scope(heap_.device());
  warm_up_kernels();
  if (uses_nccl)
    impl_->watchdog = std::make_unique<detail::NcclWatchdog>(heap_.device(), *nccl_, options_.wait_bound_ns,
                                                             monitor_.device_record());
  int least = 0, greatest = 0;
  SY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  SY_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->fork, cudaEventDisableTiming));
  for (std::size_t s = 0; s < schedule_.streams.size(); ++s) {
    cudaStream_t stream = nullptr;
    SY_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                               options_.high_priority_streams ? greatest : least));
    impl_->streams.push_back(stream);
    cudaEvent_t join = nullptr;
    SY_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    impl_->joins.push_back(join);
  }
}

RankExecutor::~RankExecutor() {
  cudaSetDevice(heap_.device());
  for (auto s : impl_->streams) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  for (auto e : impl_->joins) cudaEventDestroy(e);
  if (impl_->fork != nullptr) cudaEventDestroy(impl_->fork);
}

std::byte* RankExecutor::tensor(int r, const std::string& name) const {
  return heap_.base(r) + layout_.tensor_offset(name);
}
std::int32_t* RankExecutor::signals(int r) const {
  return reinterpret_cast<std::int32_t*>(heap_.base(r) + layout_.signals_offset);
}
std::int32_t* RankExecutor::control(int r) const {
  return reinterpret_cast<std::int32_t*>(heap_.base(r) + layout_.control_offset);
}

void RankExecutor::bind_source(const std::string& name, const void* address) {
  if (plan_.tensors.find(name) == plan_.tensors.end())
    throw UserError(
        fmt::format("rank {}: unknown-tensor: bind_source(\"{}\"): the plan has no such tensor", heap_.rank(), name));
  for (const auto& c : plan_.chunks)
    if (c.tensor == name && c.src != c.dst)
      throw UserError(
          fmt::format("rank {}: unbindable-tensor: chunk {} reads \"{}\" on rank {} for rank {}; only a "
                      "tensor that local chunks alone read can live outside the heap",
                      heap_.rank(), c.id, name, c.src, c.dst));
  if (address == nullptr) {
    bound_sources_.erase(name);
  } else {
    bound_sources_[name] = static_cast<const std::byte*>(address);
  }
}

std::int32_t* RankExecutor::epoch_word() const { return control(heap_.rank()) + kEpochSlot; }

void RankExecutor::wait_all(cudaStream_t stream, const std::vector<WaitRef>& waits) {
  WaitBatch batch;
  batch.rank = heap_.rank();
  batch.bound_ns = options_.wait_bound_ns;
  batch.epoch = epoch_word();
  auto flush = [&] {
    launch_bounded_wait(stream, batch, monitor_.device_record());
    batch.count = 0;
  };
  for (const auto& w : waits) {
    batch.conditions[batch.count++] = condition(w);
    if (batch.count == kMaxWaitConditions) flush();
  }
  if (batch.count > 0) flush();
}

WaitCondition RankExecutor::condition(const WaitRef& w) const {
  WaitCondition c;
  c.addr = (w.in_control() ? control(w.rank) : signals(w.rank)) + w.slot;
  c.writers = w.writers;
  c.epoch_offset = w.epoch_offset;
  c.owner = w.rank;
  c.slot = w.slot;
  c.chunk = w.chunk;
  c.kind = static_cast<std::int32_t>(w.kind);
  return c;
}

void RankExecutor::set_control(cudaStream_t stream, int slot) {
  launch_signal_raise(stream, control(heap_.rank()) + slot, epoch_word());
}

void RankExecutor::begin(cudaStream_t stream) {
  DeviceScope scope(heap_.device());
  launch_epoch_advance(stream, epoch_word());
  wait_all(stream, schedule_.begin_waits);
}

void RankExecutor::begin_and_publish(cudaStream_t stream) {
  const auto& waits = schedule_.begin_waits;
  if (waits.size() > static_cast<std::size_t>(kMaxWaitConditions)) {  // more peers than one batch holds
    begin(stream);
    publish(stream);
    return;
  }
  DeviceScope scope(heap_.device());
  WaitBatch batch;
  batch.rank = heap_.rank();
  batch.bound_ns = options_.wait_bound_ns;
  batch.epoch = epoch_word();
  for (const auto& w : waits) batch.conditions[batch.count++] = condition(w);
  launch_begin_publish(stream, epoch_word(), batch, monitor_.device_record(), control(heap_.rank()) + kEntrySlot);
}

void RankExecutor::publish(cudaStream_t stream) {
  DeviceScope scope(heap_.device());
  set_control(stream, kEntrySlot);
}

void RankExecutor::fork(cudaStream_t stream) {
  DeviceScope scope(heap_.device());
  if (impl_->watchdog != nullptr) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status != cudaStreamCaptureStatusNone)
      throw UserError(
          fmt::format("rank {}: nccl-under-capture: this plan moves chunks with NCCL, whose calls are bounded by a "
                      "host watchdog that polls events of each call; a captured CUDA graph gives it none to poll, "
                      "so a lost peer would hang the replay. Capture plans with the copy-engine or sm-copy "
                      "backend, or run NCCL plans eagerly",
                      heap_.rank()));
  }
  SY_CUDA_CHECK(cudaEventRecord(impl_->fork, stream));
  for (cudaStream_t side : impl_->streams) SY_CUDA_CHECK(cudaStreamWaitEvent(side, impl_->fork, 0));
  impl_->forked = true;
}

void RankExecutor::issue_chunks() {
  if (!impl_->forked)
    throw UserError(
        fmt::format("rank {}: issue-before-fork: issue_chunks() needs fork() first (the side "
                    "streams would not wait for this call's begin)",
                    heap_.rank()));
  impl_->forked = false;
  ++impl_->calls;
  DeviceScope scope(heap_.device());
  for (std::size_t s = 0; s < schedule_.streams.size(); ++s) {
    cudaStream_t side = impl_->streams[s];
    const auto& steps = schedule_.streams[s];
    // A run of in-place steps without waits raises its landings in one launch (the MoE ops'
    // own slots: one per local expert), at the place of the run's first step that is not one.
    RaiseBatch raises;
    auto flush = [&] {
      launch_signal_raise_many(side, raises, epoch_word());
      raises.count = 0;
    };
    for (const auto& batch : step_batches(steps)) {
      const ChunkStep& first = steps[batch.begin];
      if (first.group == plan::kNoGroup) {
        if (in_place(first) && first.waits.empty() && first.landing_slot >= 0 && !dropped(first)) {
          raises.slots[raises.count++] = signals(heap_.rank()) + first.landing_slot;
          if (raises.count == kMaxRaisedSlots) flush();
          continue;
        }
        flush();
        issue_step(first, side);
        continue;
      }
      flush();
      std::vector<const ChunkStep*> members;
      for (auto i = batch.begin; i < batch.end; ++i) members.push_back(&steps[i]);
      issue_group(members, side);
    }
    flush();
    SY_CUDA_CHECK(cudaEventRecord(impl_->joins[s], side));
  }
}

void RankExecutor::issue(cudaStream_t stream, bool wait_landed) {
  publish(stream);
  fork(stream);
  issue_chunks();
  // The caller's stream does not join the side streams here: a consumer kernel launched after
  // issue() must run while chunks still move (it waits per tile). end() joins them.
  if (wait_landed) this->wait_landed(stream);
}

void RankExecutor::wait_landed(cudaStream_t stream) {
  DeviceScope scope(heap_.device());
  wait_all(stream, schedule_.landing_waits);
}

void RankExecutor::end(cudaStream_t stream) {
  DeviceScope scope(heap_.device());
  for (auto join : impl_->joins) SY_CUDA_CHECK(cudaStreamWaitEvent(stream, join, 0));
  set_control(stream, kExitSlot);
}

void RankExecutor::run(cudaStream_t stream) {
  begin(stream);
  issue(stream, true);
  end(stream);
}

bool RankExecutor::dropped(const ChunkStep& step) const {
  return step.chunk == options_.drop_chunk && (options_.drop_on_rank < 0 || options_.drop_on_rank == heap_.rank());
}

bool RankExecutor::in_place(const ChunkStep& step) const {
  return step.role == StepRole::local && std::find(options_.in_place_chunks.begin(), options_.in_place_chunks.end(),
                                                   step.chunk) != options_.in_place_chunks.end();
}

detail::ChunkMove RankExecutor::make_move(const ChunkStep& step) const {
  const plan::Chunk& c = plan_.chunks[step.chunk];
  const auto& src_spec = plan_.tensors.at(c.tensor);
  const auto& dst_spec = plan_.tensors.at(c.dst_tensor);
  detail::ChunkMove move;
  move.chunk = &c;
  move.role = step.role;
  move.atomic_add = step.atomic_add;
  move.dtype = dst_spec.dtype;
  move.copies = box_copies(c.box, src_spec.shape, c.dst_box, dst_spec.shape, plan::dtype_size(src_spec.dtype));
  // Each half of an NCCL chunk touches only its own rank's heap: the peer may sit on another
  // node, whose heap is not mapped here (SymmetricHeap::open_peers with nodes).
  const bool reads = step.role != StepRole::nccl_recv;
  const bool writes = step.role != StepRole::nccl_send;
  const std::int64_t staging = layout_.staging_offset_of_chunk[c.id];
  if (reads) {
    const auto bound = bound_sources_.find(c.tensor);
    move.src = bound != bound_sources_.end() && c.src == heap_.rank() ? const_cast<std::byte*>(bound->second)
                                                                      : tensor(c.src, c.tensor);
    if (staging >= 0) move.staging_at_src = heap_.base(c.src) + staging;
  }
  if (writes) {
    move.dst = tensor(c.dst, c.dst_tensor);
    if (staging >= 0) move.staging_at_dst = heap_.base(c.dst) + staging;
  }
  if (c.runtime_rows && reads && writes) {
    // The count was landed on dst by an earlier chunk from the same src (the verifier's
    // runtime-rows rules), which this step follows in stream order or behind a wait.
    move.row_count =
        reinterpret_cast<const std::int32_t*>(tensor(c.dst, c.runtime_rows->counts)) + c.runtime_rows->index;
    move.counted = counted_rows(c.box, src_spec.shape, c.dst_box, dst_spec.shape, c.runtime_rows->dim,
                                plan::dtype_size(src_spec.dtype));
  }
  if (step.landing_slot >= 0) {
    move.landing = signals(c.dst) + step.landing_slot;
    // The rank that raises a landing slot issues the step: its own epoch word is the call's.
    move.epoch = epoch_word();
  }
  return move;
}

void RankExecutor::watched(cudaStream_t stream, const std::vector<const ChunkStep*>& steps,
                           const std::function<void()>& issue) {
  detail::NcclBatch batch;
  batch.rank = heap_.rank();
  batch.call = impl_->calls;
  for (const ChunkStep* step : steps) {
    const auto& c = plan_.chunks[step->chunk];
    batch.members.push_back({step->chunk, step->role, step->role == StepRole::nccl_send ? c.dst : c.src});
  }
  impl_->watchdog->watch(stream, std::move(batch), issue);
}

void RankExecutor::issue_step(const ChunkStep& step, cudaStream_t stream) {
  wait_all(stream, step.waits);
  if (dropped(step)) return;  // test hook: the chunk goes missing
  const detail::ChunkMove move = make_move(step);
  const detail::BackendEnv env{stream, nccl_, options_.sm_copy_blocks};
  if (in_place(step)) return detail::raise_landing(move, env);  // the caller moves the data itself
  const auto& backend = detail::backend_for(move.chunk->backend);
  if (step.role == StepRole::nccl_send || step.role == StepRole::nccl_recv)
    watched(stream, {&step}, [&] { backend.move(move, env); });
  else
    backend.move(move, env);
}

void RankExecutor::issue_group(const std::vector<const ChunkStep*>& steps, cudaStream_t stream) {
  // The group starts once every member's waits hold (the verifier made sure none waits for
  // another member), then all of them are in flight at once.
  for (const ChunkStep* step : steps) wait_all(stream, step->waits);
  std::vector<const ChunkStep*> issued;
  std::vector<detail::ChunkMove> moves;
  for (const ChunkStep* step : steps) {
    if (dropped(*step)) continue;  // test hook
    issued.push_back(step);
    moves.push_back(make_move(*step));
  }
  if (moves.empty()) return;
  const detail::BackendEnv env{stream, nccl_, options_.sm_copy_blocks};
  watched(stream, issued, [&] { detail::nccl_group_move(moves, env); });
}

}  // namespace syncopate::runtime
