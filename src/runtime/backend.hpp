// Chunk backends behind one small interface (as NCCL's struct ncclTransport): a name and one
// function that moves a resolved chunk step on a stream and raises its landing slot.
// The executor resolves every address; a backend only moves bytes and signals.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "syncopate/plan/chunk.hpp"
#include "syncopate/runtime/box_copy.hpp"
#include "syncopate/runtime/nccl_comm.hpp"
#include "syncopate/runtime/rank_schedule.hpp"

namespace syncopate::runtime::detail {

// One chunk step with every address as this process sees it.
struct ChunkMove {
  const plan::Chunk* chunk = nullptr;
  StepRole role = StepRole::push;
  plan::DType dtype = plan::DType::bf16;
  std::vector<Copy2D> copies;           // offsets relative to src / dst below
  const std::byte* src = nullptr;       // source tensor on chunk->src
  std::byte* dst = nullptr;             // destination tensor on chunk->dst
  std::byte* staging_at_src = nullptr;  // this chunk's staging area on chunk->src (or null)
  std::byte* staging_at_dst = nullptr;  // ... on chunk->dst (or null)
  std::int32_t* landing = nullptr;      // landing slot on chunk->dst; null if the peer raises it
  const std::int32_t* epoch = nullptr;  // the raising rank's epoch word: the landing slot's value
  bool atomic_add = false;              // reduce-add: another adder may touch the box meanwhile
  // A chunk with run-time rows: its count on chunk->dst, and how its copies shrink with the
  // count (absent: the box's shape does not allow cutting it, the whole box moves). Backends
  // whose sizes are host values (copy engine, NCCL) move the whole box.
  const std::int32_t* row_count = nullptr;
  std::optional<CountedRows> counted;
};

struct BackendEnv {
  cudaStream_t stream = nullptr;
  NcclComm* nccl = nullptr;  // only the nccl backend needs it
  int sm_copy_blocks = 16;
};

struct ChunkBackend {
  std::string_view name;
  void (*move)(const ChunkMove& move, const BackendEnv& env);
};

const ChunkBackend& copy_engine_backend();
const ChunkBackend& sm_copy_backend();
const ChunkBackend& nccl_backend();
const ChunkBackend& backend_for(plan::Backend kind);

// The NCCL chunks of one group (plan::Chunk::group), all sends or recvs of this rank: packs every
// send that needs staging, posts every send and recv between one ncclGroupStart/End so they
// progress together, then unpacks or adds every recv that went through staging and raises its
// landing slot (after the whole group: the stream runs the group as one unit).
void nccl_group_move(const std::vector<ChunkMove>& moves, const BackendEnv& env);

// Shared by backends: pitched copies on the copy engine, and the landing raise: a one-thread
// kernel that release-stores the epoch word's value (a stream memory write would bake the
// value in at enqueue time, wrong on every replay of a captured graph).
void copy_engine_copies(const std::byte* src, std::byte* dst, const std::vector<Copy2D>& copies, cudaStream_t stream);
void raise_landing(const ChunkMove& move, const BackendEnv& env);

}  // namespace syncopate::runtime::detail
