// LocalGroup: see local_group.hpp.
#include "local_group.hpp"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "syncopate/lower/signal_table.hpp"

namespace syncopate::gpu_test {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

bool uses_nccl(const plan::CommPlan& plan) {
  for (const auto& c : plan.chunks)
    if (c.backend == plan::Backend::nccl && c.src != c.dst) return true;
  return false;
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

LocalGroup::LocalGroup(const plan::CommPlan& plan, runtime::ExecutorOptions options) : world_(plan.world_size) {
  const int devices = device_count();
  if (devices < 1) throw std::runtime_error("no CUDA device");
  distinct_ = world_ <= devices;
  monitor_ = std::make_unique<runtime::WaitMonitor>();
  // Landing slots only: no local kernel takes part in these tests.
  const auto tables = lower::lower(plan, lower::TileGrid{1, 1, 1, 1}, {});
  const auto layout = runtime::make_heap_layout(plan, tables);
  std::vector<runtime::SymmetricHeap*> raw;
  std::vector<int> device_of_rank;
  for (int r = 0; r < world_; ++r) {
    device_of_rank.push_back(r % devices);
    heaps_.push_back(
        std::make_unique<runtime::SymmetricHeap>(r, world_, r % devices, static_cast<std::size_t>(layout.total_bytes)));
    raw.push_back(heaps_.back().get());
  }
  runtime::SymmetricHeap::connect_local(raw);
  if (uses_nccl(plan)) {
    if (!distinct_) throw std::runtime_error("the nccl backend needs one GPU per rank");
    nccl_ = runtime::NcclComm::init_all(device_of_rank);
  }
  for (int r = 0; r < world_; ++r) {
    check(cudaSetDevice(device_of_rank[r]), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    streams_.push_back(s);
    executors_.push_back(std::make_unique<runtime::RankExecutor>(plan, tables, *heaps_[r], *monitor_,
                                                                 nccl_.empty() ? nullptr : nccl_[r].get(), options));
  }
}

LocalGroup::~LocalGroup() {
  for (int r = 0; r < world_; ++r) {
    cudaSetDevice(heaps_[r]->device());
    cudaStreamSynchronize(streams_[r]);
  }
  executors_.clear();
  try {
    runtime::NcclComm::finalize_all(nccl_);
  } catch (const std::exception&) {
    // a failed finalize leaves destroy to clean up what it can
  }
  nccl_.clear();
  for (int r = 0; r < world_; ++r) {
    cudaSetDevice(heaps_[r]->device());
    cudaStreamDestroy(streams_[r]);
  }
  for (auto [device, p] : uploads_) {
    cudaSetDevice(device);
    cudaFree(p);
  }
}

void LocalGroup::on_every_rank(const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mutex;
  barrier_ = std::make_unique<std::barrier<>>(world_);
  for (int r = 0; r < world_; ++r) {
    threads.emplace_back([&, r] {
      try {
        check(cudaSetDevice(heaps_[r]->device()), "cudaSetDevice");
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
      // A finished (or failed) rank stops counting, so the others never wait for it.
      barrier_->arrive_and_drop();
    });
  }
  for (auto& t : threads) t.join();
  barrier_.reset();
  if (first) std::rethrow_exception(first);
}

void LocalGroup::barrier() {
  if (!barrier_) throw std::logic_error("LocalGroup::barrier() called outside on_every_rank()");
  barrier_->arrive_and_wait();
}

const float* LocalGroup::upload(int r, const std::vector<float>& values) {
  check(cudaSetDevice(heaps_[r]->device()), "cudaSetDevice");
  void* p = nullptr;
  check(cudaMalloc(&p, values.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(p, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  uploads_.emplace_back(heaps_[r]->device(), p);
  return static_cast<const float*>(p);
}

void LocalGroup::write(int r, const std::string& name, const std::vector<float>& values) {
  check(cudaSetDevice(heaps_[r]->device()), "cudaSetDevice");
  check(
      cudaMemcpy(executors_[r]->tensor(r, name), values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
      "write");
}

std::vector<float> LocalGroup::read(int r, const std::string& name) {
  check(cudaSetDevice(heaps_[r]->device()), "cudaSetDevice");
  const auto& spec = executors_[r]->plan().tensors.at(name);
  std::vector<float> out(static_cast<std::size_t>(spec.elements()));
  check(cudaMemcpy(out.data(), executors_[r]->tensor(r, name), out.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "read");
  return out;
}

}  // namespace syncopate::gpu_test
