// The three chunk backends: copy engine, SM-driven copy, NCCL. See backend.hpp.
#include <fmt/format.h>

#include "backend.hpp"
#include "cuda_check.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/runtime/device_ops.hpp"

namespace syncopate::runtime::detail {
namespace {

std::byte* need(std::byte* staging, const ChunkMove& m, const char* backend) {
  if (staging == nullptr)
    throw InternalError(
        fmt::format("chunk {}: {} backend needs a staging area the layout did not give", m.chunk->id, backend));
  return staging;
}

void add_copies(const std::byte* src, std::byte* dst, const std::vector<Copy2D>& copies, const ChunkMove& m,
                const BackendEnv& env) {
  for (const auto& c : copies) launch_add_2d(env.stream, m.dtype, src, dst, c, env.sm_copy_blocks, m.atomic_add);
}

// Copy engine: cudaMemcpy2DAsync through the peer mapping; reduce-add bounces through the
// destination's staging area and an add kernel (a pulled chunk: the dst's copy engine reads the
// peer, the add is local). Then the landing slot is raised.
void copy_engine_move(const ChunkMove& m, const BackendEnv& env) {
  if (m.chunk->op == plan::ChunkOp::copy) {
    copy_engine_copies(m.src, m.dst, m.copies, env.stream);
  } else {
    std::byte* staging = need(m.staging_at_dst, m, "copy-engine");
    copy_engine_copies(m.src, staging, to_packed_dst(m.copies), env.stream);
    add_copies(staging, m.dst, from_packed_src(m.copies), m, env);
  }
  raise_landing(m, env);
}

// SM copy: a kernel on a few blocks reads and writes through the peer mapping; reduce-add adds
// straight from the source (a pulled chunk: remote 16-byte loads, local stores). A chunk with
// run-time rows moves only its counted rows (the kernel reads the count). Then the landing slot
// is raised.
void sm_copy_move(const ChunkMove& m, const BackendEnv& env) {
  if (m.chunk->op == plan::ChunkOp::copy && m.row_count != nullptr && m.counted) {
    for (const auto& c : m.copies)
      launch_copy_counted(env.stream, m.src, m.dst, c, *m.counted, m.row_count, env.sm_copy_blocks);
  } else if (m.chunk->op == plan::ChunkOp::copy) {
    for (const auto& c : m.copies) launch_copy_2d(env.stream, m.src, m.dst, c, env.sm_copy_blocks);
  } else {
    add_copies(m.src, m.dst, m.copies, m, env);
  }
  raise_landing(m, env);
}

// NCCL, in three phases so that a group can run each phase for all its members: the src rank
// packs a box that is not contiguous into staging (before the group), then sends while the dst
// rank receives (inside the group), then the dst unpacks or adds what staging received and
// raises its own landing slot (after the group: the receive has completed by then).
void nccl_check(const ChunkMove& m, const BackendEnv& env) {
  if (env.nccl == nullptr)
    throw UserError(
        fmt::format("chunk {}: nccl-without-communicator: the plan uses the nccl backend "
                    "but the executor was given no NCCL communicator",
                    m.chunk->id));
  if (m.role != StepRole::nccl_send && m.role != StepRole::nccl_recv)
    throw InternalError(fmt::format("chunk {}: nccl backend given a {} step", m.chunk->id, to_string(m.role)));
}

bool recv_in_place(const ChunkMove& m) { return m.chunk->op == plan::ChunkOp::copy && dst_contiguous(m.copies); }

void nccl_before(const ChunkMove& m, const BackendEnv& env) {
  if (m.role == StepRole::nccl_send && !src_contiguous(m.copies))
    copy_engine_copies(m.src, need(m.staging_at_src, m, "nccl"), to_packed_dst(m.copies), env.stream);
}

void nccl_post(const ChunkMove& m, const BackendEnv& env) {
  const std::int64_t bytes = total_bytes(m.copies);
  if (m.role == StepRole::nccl_send) {
    const std::byte* from =
        src_contiguous(m.copies) ? m.src + (m.copies.empty() ? 0 : m.copies.front().src_offset) : m.staging_at_src;
    env.nccl->send(from, bytes, m.chunk->dst, env.stream);
  } else {
    std::byte* into = recv_in_place(m) ? m.dst + (m.copies.empty() ? 0 : m.copies.front().dst_offset)
                                       : need(m.staging_at_dst, m, "nccl");
    env.nccl->recv(into, bytes, m.chunk->src, env.stream);
  }
}

void nccl_after(const ChunkMove& m, const BackendEnv& env) {
  if (m.role != StepRole::nccl_recv) return;
  if (!recv_in_place(m)) {
    if (m.chunk->op == plan::ChunkOp::copy)
      copy_engine_copies(m.staging_at_dst, m.dst, from_packed_src(m.copies), env.stream);
    else
      add_copies(m.staging_at_dst, m.dst, from_packed_src(m.copies), m, env);
  }
  raise_landing(m, env);
}

void nccl_move(const ChunkMove& m, const BackendEnv& env) {
  if (m.role == StepRole::local) return copy_engine_move(m, env);
  nccl_check(m, env);
  nccl_before(m, env);
  nccl_post(m, env);
  nccl_after(m, env);
}

}  // namespace

void copy_engine_copies(const std::byte* src, std::byte* dst, const std::vector<Copy2D>& copies, cudaStream_t stream) {
  for (const auto& c : copies) {
    if (c.bytes() == 0) continue;
    SY_CUDA_CHECK(cudaMemcpy2DAsync(dst + c.dst_offset, static_cast<std::size_t>(c.dst_pitch), src + c.src_offset,
                                    static_cast<std::size_t>(c.src_pitch), static_cast<std::size_t>(c.width),
                                    static_cast<std::size_t>(c.height), cudaMemcpyDefault, stream));
  }
}

void raise_landing(const ChunkMove& m, const BackendEnv& env) {
  if (m.landing == nullptr) return;
  if (m.epoch == nullptr)
    throw InternalError(fmt::format("chunk {}: landing raise without an epoch word", m.chunk->id));
  launch_signal_raise(env.stream, m.landing, m.epoch);
}

const ChunkBackend& copy_engine_backend() {
  static constexpr ChunkBackend backend{"copy-engine", copy_engine_move};
  return backend;
}
const ChunkBackend& sm_copy_backend() {
  static constexpr ChunkBackend backend{"sm-copy", sm_copy_move};
  return backend;
}
const ChunkBackend& nccl_backend() {
  static constexpr ChunkBackend backend{"nccl", nccl_move};
  return backend;
}

void nccl_group_move(const std::vector<ChunkMove>& moves, const BackendEnv& env) {
  for (const auto& m : moves) nccl_check(m, env);
  for (const auto& m : moves) nccl_before(m, env);
  env.nccl->group_start();
  try {
    for (const auto& m : moves) nccl_post(m, env);
  } catch (...) {
    // Close the group NCCL holds open on this thread before the error leaves; its own error,
    // if any, is secondary to the one being thrown.
    try {
      env.nccl->group_end();
    } catch (...) {
    }
    throw;
  }
  env.nccl->group_end();
  for (const auto& m : moves) nccl_after(m, env);
}

const ChunkBackend& backend_for(plan::Backend kind) {
  switch (kind) {
    case plan::Backend::copy_engine:
      return copy_engine_backend();
    case plan::Backend::sm_copy:
      return sm_copy_backend();
    case plan::Backend::nccl:
      return nccl_backend();
  }
  throw InternalError("unknown backend");
}

}  // namespace syncopate::runtime::detail
