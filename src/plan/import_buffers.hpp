// The buffers of MSCCL and MSCCL++ plans as boxes of plan tensors (internal to the plan layer).
//
// Both formats count in chunks: a collective of N chunks per loop ("nchunksperloop", or the
// per-GPU input/output chunk counts) cuts the op's tensor into N equal boxes along `dim`, and a
// buffer reference (buffer, index, count) names `count` consecutive ones. Per collective, on
// rank r with c = N / world chunks per rank:
//   all-gather      input i -> tensor chunks r*c + i (the rank's own shard: the plan's tensor
//                   holds it in place, whether the source is in-place or not); output i -> i
//   reduce-scatter  input i -> i; output i -> r*c + i (the reduced shard, in place)
//   all-reduce      input i and output i -> i (in place: the IR reduces the tensor itself)
//   all-to-all      input i -> tensor chunk i; output i -> output tensor chunk i
//   scratch         i -> scratch tensor chunk i (one tensor as large as the largest scratch)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "import_model.hpp"

namespace syncopate::plan::import_detail {

// "allgather" / "reducescatter" / "reduce_scatter" / "allreduce" / "alltoall" (MSCCL and
// MSCCL++ spellings); refuses any other collective naming `element`.
Collective chunk_collective(std::string_view name, std::string_view source, std::string_view element);

class ChunkBuffers {
 public:
  // Checks the options against the collective (shape, dim, divisibility by N and world).
  ChunkBuffers(Collective kind, int world, std::int64_t chunks_per_loop, const ImportOptions& options,
               std::string_view element);

  // The chunk counts one GPU declares: each at most what the collective's buffer holds.
  void declare(int rank, std::int64_t input, std::int64_t output, std::int64_t scratch, std::string_view element);

  // Buffer 'i', 'o' or 's' of `rank`, chunks [index, index + count), as a place of a tensor.
  Place place(int rank, char buffer, std::int64_t index, std::int64_t count, std::string_view element) const;

  // The header of the plan: collective, world, tensors (the scratch tensor when declared).
  CommPlan header() const;

  std::int64_t chunks_per_loop() const { return n_; }

 private:
  std::int64_t capacity(char buffer) const;  // chunks the collective's buffer holds

  Collective kind_;
  int world_;
  std::int64_t n_;
  const ImportOptions& o_;
  std::int64_t unit_ = 1;                               // elements along dim per chunk
  std::vector<std::int64_t> input_, output_, scratch_;  // declared, by rank
};

}  // namespace syncopate::plan::import_detail
