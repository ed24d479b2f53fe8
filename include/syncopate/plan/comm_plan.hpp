// The plan IR: what moves where, in what order, for one collective on all ranks.
//
// A CommPlan is plain data. It says nothing about how it is executed; the verifier proves it
// safe, lowering turns it into signal tables, the runtime executes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "syncopate/plan/chunk.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::plan {

inline constexpr int kPlanVersion = 1;

struct TensorSpec {
  std::vector<std::int64_t> shape;
  DType dtype = DType::bf16;
  std::string layout = "row-major";

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

// What the plan promises; the verifier's coverage rules are derived from it.
//  all-gather     `tensor` is [.., S, ..] on every rank; rank r starts with shard r along `dim`
//                 and must end with every shard, each delivered exactly once.
//  all-gather with `input` set (the input tensor I, [.., S / world, ..], S % world == 0)
//                 rank r starts with its shard in I instead, and shard r of `tensor` on rank r
//                 must be delivered exactly once too (a local chunk I -> shard r): the consumer
//                 can start before its own rows are in place, waiting for them like any chunk.
//                 I is never written by a chunk.
//  reduce-scatter `tensor` holds each rank's partial; rank r must end with shard r along `dim`
//                 holding the sum of all world_size partials, each counted exactly once.
//  all-reduce     like reduce-scatter, but every rank must end with the whole tensor reduced.
//  all-to-all     rank r's block j of `tensor` (along `dim`) must land in block r of `output`
//                 on rank j, exactly once (the own block too, by a local chunk src == dst).
//  staged reduce-scatter (reduce-scatter with `output` set: the staging tensor P)
//                 `tensor` is [1, ..., S, ...] with dim > 0 and S % world == 0, P is
//                 [world, ..., S / world, ...] (same dtype). On rank r, slot P[s] (s != r) must
//                 hold rank s's shard r of `tensor`, delivered exactly once by copies; slot P[r]
//                 and `tensor` itself are never written by a chunk (the consumer adds the slots
//                 to its own partial and writes `tensor`).
//  staged all-reduce (all-reduce with `output` set): P as for the staged reduce-scatter, and
//                 on rank r every shard q != r of `tensor` must hold rank q's shard q (what its
//                 consumer wrote: the reduced result), delivered exactly once; shard r of rank
//                 r is never written by a chunk.
//  custom         no coverage promise; well-formedness, ordering and deadlock rules still apply.
// Shards and blocks split S as evenly as possible: the first S % world shards get one extra.
struct CollectiveSpec {
  Collective kind = Collective::custom;
  std::string tensor;
  std::string output;  // all-to-all: the output; reduce-scatter, all-reduce: staging (optional)
  int dim = 0;
  Algorithm algorithm = Algorithm::ring;  // how the plan was made (informational)
  int split = 1;                          // sub-chunks per shard (informational)
  std::string input;                      // all-gather: the tensor holding the own shard (optional, above)

  // A staged reduce-scatter / all-reduce: `output` names the staging tensor (see above).
  bool staged() const {
    return (kind == Collective::reduce_scatter || kind == Collective::all_reduce) && !output.empty();
  }
  // An all-gather whose own shard arrives from `input` by a local chunk (see above).
  bool gathers_from_input() const { return kind == Collective::all_gather && !input.empty(); }

  friend bool operator==(const CollectiveSpec&, const CollectiveSpec&) = default;
};

// One rank's program: per stream (channel), the chunk ids it issues in order.
struct RankProgram {
  int rank = 0;
  std::vector<std::vector<int>> streams;

  friend bool operator==(const RankProgram&, const RankProgram&) = default;
};

struct CommPlan {
  int version = kPlanVersion;
  CollectiveSpec collective;
  int world_size = 1;
  std::map<std::string, TensorSpec> tensors;  // ordered: JSON output is deterministic
  std::vector<RankProgram> ranks;             // ranks[r].rank == r
  std::vector<Chunk> chunks;                  // chunks[i].id == i
  // Topology: the node (host) of each rank, nodes[r] for rank r; empty means every rank on one
  // node. Ranks of one node are NVLink peers (copy engine, SM copy, NCCL); ranks of different
  // nodes reach each other only through NCCL (the verifier's cross-node-chunk rule).
  std::vector<int> nodes;

  friend bool operator==(const CommPlan&, const CommPlan&) = default;
};

// The node of `rank` (0 when the plan names no topology).
inline int node_of(const CommPlan& plan, int rank) {
  if (plan.nodes.empty()) return 0;
  return plan.nodes[static_cast<std::size_t>(rank)];
}

// Start and size of shard `index` when `size` is split into `parts` as evenly as possible
// (the first size % parts shards get one more). Shared by templates, verifier and lowering.
struct Span {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};
inline Span even_split(std::int64_t size, int parts, int index) {
  const std::int64_t base = size / parts;
  const std::int64_t rem = size % parts;
  const std::int64_t begin = index * base + (index < rem ? index : rem);
  return {begin, base + (index < rem ? 1 : 0)};
}

}  // namespace syncopate::plan
