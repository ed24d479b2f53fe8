// NcclComm over a dlopen'ed NCCL: see nccl_comm.hpp.
#include "syncopate/runtime/nccl_comm.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/common/settings.hpp"

namespace syncopate::runtime {

// The slice of NCCL's stable C ABI the backend uses (nccl.h, NCCL 2.x): declared here so the
// build needs no NCCL headers.
namespace nccl_abi {
using Result = int;  // ncclResult_t, 0 == ncclSuccess
using Comm = void*;  // ncclComm_t
struct UniqueId {
  char internal[128];
};
constexpr int kUint8 = 1;  // ncclUint8
}  // namespace nccl_abi

class NcclLibrary {
 public:
  NcclLibrary() {
    const std::string path = settings::nccl_library();
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle_ == nullptr)
      throw DeviceError(fmt::format("nccl backend: cannot load {}: {} (set SYNCOPATE_NCCL_LIBRARY)", path, dlerror()));
    get_unique_id = load<decltype(get_unique_id)>("ncclGetUniqueId");
    comm_init_rank = load<decltype(comm_init_rank)>("ncclCommInitRank");
    comm_init_all = load<decltype(comm_init_all)>("ncclCommInitAll");
    comm_destroy = load<decltype(comm_destroy)>("ncclCommDestroy");
    send = load<decltype(send)>("ncclSend");
    recv = load<decltype(recv)>("ncclRecv");
    error_string = load<decltype(error_string)>("ncclGetErrorString");
    group_start = load<decltype(group_start)>("ncclGroupStart");
    group_end = load<decltype(group_end)>("ncclGroupEnd");
    comm_finalize = load<decltype(comm_finalize)>("ncclCommFinalize");
    comm_abort = load<decltype(comm_abort)>("ncclCommAbort");
  }
  ~NcclLibrary() = default;  // never dlclose: NCCL keeps threads that outlive us
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  void check(nccl_abi::Result r, const char* what) const {
    if (r != 0) throw DeviceError(fmt::format("{} failed: {} (ncclResult {})", what, error_string(r), r));
  }

  nccl_abi::Result (*get_unique_id)(nccl_abi::UniqueId*) = nullptr;
  nccl_abi::Result (*comm_init_rank)(nccl_abi::Comm*, int, nccl_abi::UniqueId, int) = nullptr;
  nccl_abi::Result (*comm_init_all)(nccl_abi::Comm*, int, const int*) = nullptr;
  nccl_abi::Result (*comm_destroy)(nccl_abi::Comm) = nullptr;
  nccl_abi::Result (*send)(const void*, std::size_t, int, int, nccl_abi::Comm, cudaStream_t) = nullptr;
  nccl_abi::Result (*recv)(void*, std::size_t, int, int, nccl_abi::Comm, cudaStream_t) = nullptr;
  const char* (*error_string)(nccl_abi::Result) = nullptr;
  nccl_abi::Result (*group_start)() = nullptr;
  nccl_abi::Result (*group_end)() = nullptr;
  nccl_abi::Result (*comm_finalize)(nccl_abi::Comm) = nullptr;
  nccl_abi::Result (*comm_abort)(nccl_abi::Comm) = nullptr;

 private:
  template <class Fn>
  Fn load(const char* name) {
    void* sym = dlsym(handle_, name);
    if (sym == nullptr) throw DeviceError(fmt::format("nccl backend: {} not found in NCCL", name));
    return reinterpret_cast<Fn>(sym);
  }
  void* handle_ = nullptr;
};

namespace {

// NCCL connects point-to-point peers lazily, inside the first send/recv, and the host thread
// blocks there until the peer connects too. Issuing a rank's chunks one by one could then
// block the host on a connection its peer makes only later. So every communicator exchanges
// one grouped send/recv with every peer right after init: all connections exist before the
// first chunk. kConnectBytes is large enough for NCCL to use all its p2p channels.
constexpr std::int64_t kConnectBytes = std::int64_t{1} << 20;

struct ConnectBuffers {
  int device = 0;
  void* send = nullptr;
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
};

ConnectBuffers make_connect_buffers(int device, int world) {
  ConnectBuffers b;
  b.device = device;
  SY_CUDA_CHECK(cudaSetDevice(device));
  SY_CUDA_CHECK(cudaMalloc(&b.send, kConnectBytes));
  SY_CUDA_CHECK(cudaMalloc(&b.recv, kConnectBytes * world));
  SY_CUDA_CHECK(cudaMemset(b.send, 0, kConnectBytes));
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  return b;
}

void free_connect_buffers(const ConnectBuffers& b) {
  cudaSetDevice(b.device);
  cudaStreamSynchronize(b.stream);
  cudaStreamDestroy(b.stream);
  cudaFree(b.send);
  cudaFree(b.recv);
}

void post_exchange(const NcclLibrary& lib, void* comm, int rank, int world, const ConnectBuffers& b) {
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    lib.check(lib.send(b.send, kConnectBytes, nccl_abi::kUint8, p, comm, b.stream), "ncclSend (connect)");
    lib.check(
        lib.recv(static_cast<char*>(b.recv) + kConnectBytes * p, kConnectBytes, nccl_abi::kUint8, p, comm, b.stream),
        "ncclRecv (connect)");
  }
}

}  // namespace

std::vector<std::uint8_t> NcclComm::unique_id() {
  const NcclLibrary lib;
  nccl_abi::UniqueId id{};
  lib.check(lib.get_unique_id(&id), "ncclGetUniqueId");
  std::vector<std::uint8_t> out(sizeof(id));
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclComm::NcclComm(std::shared_ptr<const NcclLibrary> lib, void* comm, int world, int rank)
    : lib_(std::move(lib)), comm_(comm), world_(world), rank_(rank) {}

NcclComm::NcclComm(const std::vector<std::uint8_t>& id, int world, int rank, int device)
    : lib_(std::make_shared<const NcclLibrary>()), world_(world), rank_(rank) {
  if (id.size() != sizeof(nccl_abi::UniqueId))
    throw UserError(fmt::format("rank {}: nccl backend: bad-unique-id: {} bytes, expected {}", rank, id.size(),
                                sizeof(nccl_abi::UniqueId)));
  nccl_abi::UniqueId uid{};
  std::memcpy(&uid, id.data(), sizeof(uid));
  int previous = 0;
  SY_CUDA_CHECK(cudaGetDevice(&previous));
  SY_CUDA_CHECK(cudaSetDevice(device));
  nccl_abi::Comm comm = nullptr;
  const auto r = lib_->comm_init_rank(&comm, world, uid, rank);
  lib_->check(r, "ncclCommInitRank");
  comm_ = comm;
  if (world > 1) {
    const ConnectBuffers b = make_connect_buffers(device, world);
    lib_->check(lib_->group_start(), "ncclGroupStart");
    post_exchange(*lib_, comm_, rank, world, b);
    lib_->check(lib_->group_end(), "ncclGroupEnd");
    free_connect_buffers(b);
  }
  cudaSetDevice(previous);
}

std::vector<std::unique_ptr<NcclComm>> NcclComm::init_all(const std::vector<int>& devices) {
  auto lib = std::make_shared<const NcclLibrary>();
  std::vector<nccl_abi::Comm> comms(devices.size(), nullptr);
  lib->check(lib->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  const int world = static_cast<int>(devices.size());
  if (world > 1) {
    int previous = 0;
    SY_CUDA_CHECK(cudaGetDevice(&previous));
    std::vector<ConnectBuffers> buffers;
    for (int r = 0; r < world; ++r) buffers.push_back(make_connect_buffers(devices[r], world));
    // One thread drives every rank here, so the exchange of all ranks is one group.
    lib->check(lib->group_start(), "ncclGroupStart");
    for (int r = 0; r < world; ++r) post_exchange(*lib, comms[r], r, world, buffers[r]);
    lib->check(lib->group_end(), "ncclGroupEnd");
    for (const auto& b : buffers) free_connect_buffers(b);
    cudaSetDevice(previous);
  }
  std::vector<std::unique_ptr<NcclComm>> out;
  for (std::size_t r = 0; r < comms.size(); ++r)
    out.emplace_back(new NcclComm(lib, comms[r], static_cast<int>(devices.size()), static_cast<int>(r)));
  return out;
}

NcclComm::~NcclComm() {
  // An aborted communicator is already freed by ncclCommAbort.
  if (comm_ != nullptr && !aborted()) lib_->comm_destroy(comm_);
}

void NcclComm::abort(const std::string& why) {
  if (comm_ == nullptr) return;
  static std::mutex abort_mutex;  // one abort per communicator, whichever thread comes first
  const std::lock_guard<std::mutex> lock(abort_mutex);
  if (aborted()) return;
  abort_reason_ = why;
  aborted_.store(true, std::memory_order_release);
  lib_->comm_abort(comm_);  // its result does not matter: the communicator is gone either way
}

void NcclComm::check_usable() const {
  if (aborted())
    throw DeviceError(
        fmt::format("rank {}: nccl backend: the communicator was aborted ({}); build a new one", rank_, abort_reason_));
}

void NcclComm::finalize_all(const std::vector<std::unique_ptr<NcclComm>>& comms) {
  if (comms.empty()) return;
  const auto& lib = *comms.front()->lib_;
  bool any_aborted = false;
  for (const auto& c : comms) any_aborted = any_aborted || (c != nullptr && c->aborted());
  if (any_aborted) {
    for (const auto& c : comms)
      if (c != nullptr) c->abort("a peer's communicator was aborted");
    return;
  }
  // Finalizing is collective: one thread holding every rank must do it in one group, or the
  // first finalize waits for ranks that this thread has not reached yet.
  lib.check(lib.group_start(), "ncclGroupStart");
  for (const auto& c : comms)
    if (c != nullptr) lib.check(lib.comm_finalize(c->comm_), "ncclCommFinalize");
  lib.check(lib.group_end(), "ncclGroupEnd");
}

void NcclComm::send(const void* data, std::int64_t bytes, int peer, cudaStream_t stream) {
  check_usable();
  lib_->check(lib_->send(data, static_cast<std::size_t>(bytes), nccl_abi::kUint8, peer, comm_, stream), "ncclSend");
}

void NcclComm::recv(void* data, std::int64_t bytes, int peer, cudaStream_t stream) {
  check_usable();
  lib_->check(lib_->recv(data, static_cast<std::size_t>(bytes), nccl_abi::kUint8, peer, comm_, stream), "ncclRecv");
}

void NcclComm::group_start() {
  check_usable();
  lib_->check(lib_->group_start(), "ncclGroupStart");
}

void NcclComm::group_end() { lib_->check(lib_->group_end(), "ncclGroupEnd"); }

}  // namespace syncopate::runtime
