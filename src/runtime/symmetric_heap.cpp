// SymmetricHeap: see symmetric_heap.hpp.
#include "syncopate/runtime/symmetric_heap.hpp"

#include <cstring>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::runtime {
namespace {

// Restores the caller's current device when a scope ends: the runtime never leaves it changed.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    SY_CUDA_CHECK(cudaGetDevice(&previous_));
    SY_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

SymmetricHeap::SymmetricHeap(int rank, int world, int device, std::size_t bytes)
    : rank_(rank), world_(world), device_(device), bytes_(bytes) {
  if (world < 1 || rank < 0 || rank >= world)
    throw UserError(fmt::format("symmetric heap: rank-out-of-range: rank {} of world {}", rank, world));
  if (bytes == 0) throw UserError("symmetric heap: empty-heap: size must be positive");
  DeviceGuard guard(device);
  void* p = nullptr;
  SY_CUDA_CHECK(cudaMalloc(&p, bytes));
  local_ = static_cast<std::byte*>(p);
  SY_CUDA_CHECK(cudaMemset(p, 0, bytes));
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  bases_.assign(static_cast<std::size_t>(world), nullptr);
  opened_by_ipc_.assign(static_cast<std::size_t>(world), false);
  bases_[rank] = local_;
  if (world == 1) publish_bases();
}

SymmetricHeap::~SymmetricHeap() {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (std::size_t r = 0; r < bases_.size(); ++r)
    if (opened_by_ipc_[r] && bases_[r] != nullptr) cudaIpcCloseMemHandle(bases_[r]);
  if (device_bases_ != nullptr) cudaFree(device_bases_);
  if (local_ != nullptr) cudaFree(local_);
  cudaSetDevice(previous);
}

std::vector<std::uint8_t> SymmetricHeap::export_handle() const {
  DeviceGuard guard(device_);
  cudaIpcMemHandle_t handle{};
  SY_CUDA_CHECK(cudaIpcGetMemHandle(&handle, local_));
  std::vector<std::uint8_t> out(sizeof(handle));
  std::memcpy(out.data(), &handle, sizeof(handle));
  return out;
}

void SymmetricHeap::open_peers(const std::vector<std::vector<std::uint8_t>>& handles_by_rank,
                               const std::vector<int>& nodes) {
  if (static_cast<int>(handles_by_rank.size()) != world_)
    throw UserError(fmt::format("rank {}: symmetric heap: handle-count-mismatch: {} handles for world {}", rank_,
                                handles_by_rank.size(), world_));
  if (!nodes.empty() && static_cast<int>(nodes.size()) != world_)
    throw UserError(
        fmt::format("rank {}: symmetric heap: nodes-count: {} node ids for world {}", rank_, nodes.size(), world_));
  if (connected_) throw UserError(fmt::format("rank {}: symmetric heap: already-connected", rank_));
  nodes_ = nodes;
  DeviceGuard guard(device_);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    if (!nodes_.empty() && nodes_[r] != nodes_[rank_]) continue;  // another host: NCCL only
    const auto& bytes = handles_by_rank[r];
    if (bytes.size() != sizeof(cudaIpcMemHandle_t))
      throw UserError(
          fmt::format("rank {}: symmetric heap: bad-handle: handle of rank {} has {} bytes, "
                      "expected {}",
                      rank_, r, bytes.size(), sizeof(cudaIpcMemHandle_t)));
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, bytes.data(), sizeof(handle));
    void* p = nullptr;
    SY_CUDA_CHECK(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
    bases_[r] = static_cast<std::byte*>(p);
    opened_by_ipc_[r] = true;
  }
  publish_bases();
}

void SymmetricHeap::connect_local(const std::vector<SymmetricHeap*>& heaps) {
  const int world = static_cast<int>(heaps.size());
  for (int r = 0; r < world; ++r) {
    if (heaps[r] == nullptr || heaps[r]->rank_ != r || heaps[r]->world_ != world)
      throw UserError(fmt::format("symmetric heap: connect-local: heaps[{}] is not rank {} of world {}", r, r, world));
    if (heaps[r]->bytes_ != heaps[0]->bytes_)
      throw UserError(fmt::format("symmetric heap: size-mismatch: rank {} has {} bytes, rank 0 {}", r, heaps[r]->bytes_,
                                  heaps[0]->bytes_));
  }
  for (int r = 0; r < world; ++r) {
    auto& heap = *heaps[r];
    DeviceGuard guard(heap.device_);
    for (int p = 0; p < world; ++p) {
      const int peer_device = heaps[p]->device_;
      if (peer_device != heap.device_) {
        int can = 0;
        SY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, heap.device_, peer_device));
        if (!can)
          throw DeviceError(
              fmt::format("symmetric heap: device {} cannot access peer device {}", heap.device_, peer_device));
        const cudaError_t err = cudaDeviceEnablePeerAccess(peer_device, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // clear the sticky "already enabled" state
        } else {
          SY_CUDA_CHECK(err);
        }
      }
      heap.bases_[p] = heaps[p]->local_;
    }
    heap.publish_bases();
  }
}

std::byte* SymmetricHeap::base(int r) const {
  if (r < 0 || r >= world_)
    throw UserError(fmt::format("rank {}: symmetric heap: rank-out-of-range: peer {} of world {}", rank_, r, world_));
  if (!connected_)
    throw UserError(
        fmt::format("rank {}: symmetric heap: not-connected: call open_peers() or "
                    "connect_local() first",
                    rank_));
  if (!nodes_.empty() && nodes_[r] != nodes_[rank_])
    throw UserError(
        fmt::format("rank {}: symmetric heap: peer-off-node: rank {} is on node {}, this rank on "
                    "node {}; its heap is not mapped (only NCCL chunks reach other nodes)",
                    rank_, r, nodes_[r], nodes_[rank_]));
  return bases_[r];
}

void SymmetricHeap::publish_bases() {
  DeviceGuard guard(device_);
  if (device_bases_ == nullptr) {
    void* p = nullptr;
    SY_CUDA_CHECK(cudaMalloc(&p, sizeof(void*) * bases_.size()));
    device_bases_ = static_cast<void**>(p);
  }
  SY_CUDA_CHECK(cudaMemcpy(device_bases_, bases_.data(), sizeof(void*) * bases_.size(), cudaMemcpyHostToDevice));
  connected_ = true;
}

}  // namespace syncopate::runtime
