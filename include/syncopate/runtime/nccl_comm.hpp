// NCCL for the nccl chunk backend, loaded at run time (dlopen "libnccl.so.2", or the path in
// SYNCOPATE_NCCL_LIBRARY): the runtime links no NCCL, so it loads where NCCL is absent and uses
// whichever NCCL the process already has (under PyTorch, PyTorch's own).
//
// Communicators: one process per GPU calls unique_id() on rank 0, ships the 128 bytes to the
// others (Python: torch.distributed) and every rank constructs NcclComm(id, world, rank,
// device); one process driving several GPUs calls NcclComm::init_all(devices).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace syncopate::runtime {

class NcclLibrary;  // the dlopen'ed functions (nccl_comm.cpp)

class NcclComm {
 public:
  static std::vector<std::uint8_t> unique_id();  // throws DeviceError when NCCL is missing
  NcclComm(const std::vector<std::uint8_t>& id, int world, int rank, int device);
  static std::vector<std::unique_ptr<NcclComm>> init_all(const std::vector<int>& devices);
  // Single-process mode: finalizes every communicator of init_all() in one group; call it before
  // destroying them from one thread. If any of them was aborted, aborts the others instead
  // (finalizing waits for peers, and an aborted peer never comes).
  static void finalize_all(const std::vector<std::unique_ptr<NcclComm>>& comms);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  // Byte-wise send/recv on `stream` (the peer must post the matching call, same order).
  // Both throw DeviceError once the communicator was aborted.
  void send(const void* data, std::int64_t bytes, int peer, cudaStream_t stream);
  void recv(void* data, std::int64_t bytes, int peer, cudaStream_t stream);
  // ncclGroupStart / ncclGroupEnd: the sends and recvs between them are issued as one group and
  // progress together (a ring step's send and recv), instead of one rendezvous at a time.
  void group_start();
  void group_end();

  // ncclCommAbort: stops every NCCL operation of this communicator still running or queued
  // (their kernels return), frees it, and leaves it unusable. Safe from another thread while
  // the owner is inside an NCCL call (that is what it is for: a peer that never posts its half
  // would otherwise hang the stream forever). Idempotent; `why` is kept for later errors.
  void abort(const std::string& why);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  NcclComm(std::shared_ptr<const NcclLibrary> lib, void* comm, int world, int rank);
  std::shared_ptr<const NcclLibrary> lib_;
  void check_usable() const;
  void* comm_ = nullptr;
  int world_ = 1;
  int rank_ = 0;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // written before aborted_ is set
};

}  // namespace syncopate::runtime
