// NcclComm over a dlopen'ed NCCL: see nccl_comm.hpp.
#include "syncopate/runtime/nccl_comm.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::runtime {

// The slice of NCCL's stable C ABI the backend uses (nccl.h, NCCL 2.x): declared here so the
// build needs no NCCL headers.
namespace nccl_abi {
using Result = int;  // ncclResult_t, 0 == ncclSuccess
using Comm = void*;  // ncclComm_t
struct UniqueId { char internal[128]; };
constexpr int kUint8 = 1;  // ncclUint8
}  // namespace nccl_abi

class NcclLibrary {
 public:
  NcclLibrary() {
    const char* env = std::getenv("SYNCOPATE_NCCL_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle_ == nullptr)
      throw DeviceError(fmt::format("nccl backend: cannot load {}: {} (set SYNCOPATE_NCCL_LIBRARY)",
                                    path, dlerror()));
    get_unique_id = load<decltype(get_unique_id)>("ncclGetUniqueId");
    comm_init_rank = load<decltype(comm_init_rank)>("ncclCommInitRank");
    comm_init_all = load<decltype(comm_init_all)>("ncclCommInitAll");
    comm_destroy = load<decltype(comm_destroy)>("ncclCommDestroy");
    send = load<decltype(send)>("ncclSend");
    recv = load<decltype(recv)>("ncclRecv");
    error_string = load<decltype(error_string)>("ncclGetErrorString");
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

 private:
  template <class Fn>
  Fn load(const char* name) {
    void* sym = dlsym(handle_, name);
    if (sym == nullptr) throw DeviceError(fmt::format("nccl backend: {} not found in NCCL", name));
    return reinterpret_cast<Fn>(sym);
  }
  void* handle_ = nullptr;
};

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
    throw UserError(fmt::format("rank {}: nccl backend: bad-unique-id: {} bytes, expected {}", rank,
                                id.size(), sizeof(nccl_abi::UniqueId)));
  nccl_abi::UniqueId uid{};
  std::memcpy(&uid, id.data(), sizeof(uid));
  int previous = 0;
  SY_CUDA_CHECK(cudaGetDevice(&previous));
  SY_CUDA_CHECK(cudaSetDevice(device));
  nccl_abi::Comm comm = nullptr;
  const auto r = lib_->comm_init_rank(&comm, world, uid, rank);
  cudaSetDevice(previous);
  lib_->check(r, "ncclCommInitRank");
  comm_ = comm;
}

std::vector<std::unique_ptr<NcclComm>> NcclComm::init_all(const std::vector<int>& devices) {
  auto lib = std::make_shared<const NcclLibrary>();
  std::vector<nccl_abi::Comm> comms(devices.size(), nullptr);
  lib->check(lib->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
             "ncclCommInitAll");
  std::vector<std::unique_ptr<NcclComm>> out;
  for (std::size_t r = 0; r < comms.size(); ++r)
    out.emplace_back(new NcclComm(lib, comms[r], static_cast<int>(devices.size()), static_cast<int>(r)));
  return out;
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) lib_->comm_destroy(comm_);
}

void NcclComm::send(const void* data, std::int64_t bytes, int peer, cudaStream_t stream) {
  lib_->check(lib_->send(data, static_cast<std::size_t>(bytes), nccl_abi::kUint8, peer, comm_, stream),
              "ncclSend");
}

void NcclComm::recv(void* data, std::int64_t bytes, int peer, cudaStream_t stream) {
  lib_->check(lib_->recv(data, static_cast<std::size_t>(bytes), nccl_abi::kUint8, peer, comm_, stream),
              "ncclRecv");
}

}  // namespace syncopate::runtime
