// The symmetric heap: one equal-size device buffer per rank, every peer's buffer of its node
// mapped.
//
// Two modes:
//  - one process per GPU (torchrun): each process constructs its rank's heap, export_handle()
//    gives CUDA IPC handle bytes, the caller moves them between processes (Python uses
//    torch.distributed.all_gather_object) and open_peers() maps every peer;
//  - one process driving several GPUs (C++ tests, the demo): construct one heap per device and
//    call connect_local() on all of them; peers are reached through peer access.
// A region at offset X on rank r is at base(r) + X in this process (HeapLayout gives the
// offsets). device_peer_bases() is the same table on the device, for kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace syncopate::runtime {

class SymmetricHeap {
 public:
  // Allocates `bytes` (zeroed) on `device` for `rank` of `world`. Throws DeviceError.
  SymmetricHeap(int rank, int world, int device, std::size_t bytes);
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  // CUDA IPC handle of this rank's buffer, as bytes to ship to the peers.
  std::vector<std::uint8_t> export_handle() const;
  // Maps every peer from its handle bytes (indexed by rank; this rank's entry is ignored).
  // With `nodes` (the node of each rank, CommPlan::nodes; empty = one node) only the peers of
  // this rank's node are mapped: CUDA IPC does not cross hosts, and a verified plan reaches
  // other nodes only through NCCL, which sends from and receives into the local heap. Their
  // handles are not read (any bytes will do) and base() refuses them by name.
  // Throws UserError on a wrong count or size, DeviceError when CUDA refuses.
  void open_peers(const std::vector<std::vector<std::uint8_t>>& handles_by_rank, const std::vector<int>& nodes = {});
  // Same-process mode: heaps[r] is rank r's heap; enables peer access between their devices.
  static void connect_local(const std::vector<SymmetricHeap*>& heaps);

  int rank() const { return rank_; }
  int world() const { return world_; }
  int device() const { return device_; }
  std::size_t bytes() const { return bytes_; }
  bool connected() const { return connected_; }

  // Base of rank r's buffer as this process addresses it. Throws UserError when r is out of
  // range, on another node (not mapped), or peers are not mapped yet.
  std::byte* base(int r) const;
  // Device array of `world` base pointers (valid once connected; null for other nodes' ranks).
  void* const* device_peer_bases() const { return device_bases_; }

 private:
  void publish_bases();

  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  std::size_t bytes_ = 0;
  bool connected_ = false;
  std::byte* local_ = nullptr;
  std::vector<std::byte*> bases_;    // by rank
  std::vector<bool> opened_by_ipc_;  // by rank: close with cudaIpcCloseMemHandle
  std::vector<int> nodes_;           // by rank (empty: one node)
  void** device_bases_ = nullptr;
};

}  // namespace syncopate::runtime
