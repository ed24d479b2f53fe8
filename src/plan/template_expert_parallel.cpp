// The MoE dispatch plan (expert_parallel.hpp): counts first, then the rows, local block first.
#include "syncopate/plan/expert_parallel.hpp"

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::plan {
namespace {

// Chunks are made in rounds i (peer src + i), each round rank by rank, each rank's counts chunk
// then its rows chunks by expert; the id of a chunk follows from that order.
int first_of(int world, int experts, int src, int dst) {
  const int round = ((dst - src) % world + world) % world;
  return (round * world + src) * (1 + experts);
}

// NCCL (capacity-sized sends, whose sizes are host values; the counts travel on the device):
// both ends list each chunk between two ranks, in one global order that every rank's list
// follows, so matching sends and recvs come in the same order on both ends:
//   1. the rank's local chunks (counts, then rows by expert): copies, no NCCL;
//   2. group 0: every counts chunk between two ranks (an all-to-all of W x E_loc integers in one
//      ncclGroupStart/End), rounds i = 1 .. W-1, each by source rank;
//   3. group i, for rounds i = 1 .. W-1: the rows chunks of round i (this rank's E_loc sends to
//      r + i and E_loc recvs from r - i), by source rank, then expert.
// A rows chunk's landing is raised after its group completes, on the stream; its count landed
// with group 0, before.
void list_nccl_streams(CommPlan& plan, int w, int experts) {
  auto list = [&](int id, int group) {
    Chunk& c = plan.chunks[static_cast<std::size_t>(id)];
    if (c.src != c.dst) c.group = group;
    plan.ranks[static_cast<std::size_t>(c.src)].streams[0].push_back(id);
    if (c.src != c.dst) plan.ranks[static_cast<std::size_t>(c.dst)].streams[0].push_back(id);
  };
  for (int r = 0; r < w; ++r) {
    list(first_of(w, experts, r, r), kNoGroup);
    for (int e = 0; e < experts; ++e) list(first_of(w, experts, r, r) + 1 + e, kNoGroup);
  }
  for (int i = 1; i < w; ++i)
    for (int r = 0; r < w; ++r) list(first_of(w, experts, r, (r + i) % w), 0);
  for (int i = 1; i < w; ++i)
    for (int r = 0; r < w; ++r)
      for (int e = 0; e < experts; ++e) list(first_of(w, experts, r, (r + i) % w) + 1 + e, i);
}

void check_positive(const char* name, std::int64_t value) {
  if (value < 1) throw ShapeError(fmt::format("MoE dispatch plan: {} must be >= 1, got {}", name, value));
}

}  // namespace

int moe_counts_chunk(int world_size, int local_experts, int src, int dst) {
  return first_of(world_size, local_experts, src, dst);
}

int moe_rows_chunk(int world_size, int local_experts, int src, int dst, int expert) {
  return first_of(world_size, local_experts, src, dst) + 1 + expert;
}

CommPlan make_moe_dispatch_plan(const MoeDispatchOptions& o) {
  check_positive("world_size", o.world_size);
  check_positive("local_experts", o.local_experts);
  check_positive("capacity", o.capacity);
  check_positive("hidden", o.hidden);
  // Chunks grow as W^2 x E_loc; the other templates' 2^24 chunk cap, as a bound on the options.
  if (static_cast<std::int64_t>(o.world_size) * o.world_size * (1 + o.local_experts) > (std::int64_t{1} << 24))
    throw ShapeError(fmt::format("MoE dispatch plan: {} ranks x {} local experts make more than 2^24 chunks",
                                 o.world_size, o.local_experts));
  if (static_cast<double>(o.world_size) * o.local_experts * static_cast<double>(o.capacity) > 9.0e15)
    throw ShapeError(fmt::format("MoE dispatch plan: {} ranks x {} experts x capacity {} rows overflow a tensor",
                                 o.world_size, o.local_experts, o.capacity));
  const int w = o.world_size, experts = o.local_experts;
  CommPlan plan;
  plan.world_size = w;
  plan.collective.kind = Collective::all_to_all;
  plan.collective.tensor = kMoeSend;
  plan.collective.output = kMoeRecv;
  plan.collective.dim = 0;
  plan.collective.algorithm = Algorithm::direct;
  plan.collective.split = experts;
  const std::vector<std::int64_t> counts_shape{w, experts}, rows_shape{w * experts * o.capacity, o.hidden};
  plan.tensors[kMoeSendCounts] = TensorSpec{counts_shape, DType::i32, "row-major"};
  plan.tensors[kMoeRecvCounts] = TensorSpec{counts_shape, DType::i32, "row-major"};
  plan.tensors[kMoeSend] = TensorSpec{rows_shape, o.dtype, "row-major"};
  plan.tensors[kMoeRecv] = TensorSpec{rows_shape, o.dtype, "row-major"};
  for (int r = 0; r < w; ++r) plan.ranks.push_back(RankProgram{r, {std::vector<int>{}}});

  const bool nccl = o.backend == Backend::nccl;
  auto push = [&](Chunk c) {
    c.id = static_cast<int>(plan.chunks.size());
    c.backend = o.backend;
    if (!nccl) plan.ranks[static_cast<std::size_t>(c.src)].streams[0].push_back(c.id);
    plan.chunks.push_back(std::move(c));
    return plan.chunks.back().id;
  };
  for (int i = 0; i < w; ++i)
    for (int r = 0; r < w; ++r) {
      const int j = (r + i) % w;
      Chunk counts;
      counts.tensor = kMoeSendCounts;
      counts.box = Box{{j, 0}, {1, experts}};
      counts.dst_tensor = kMoeRecvCounts;
      counts.dst_box = Box{{r, 0}, {1, experts}};
      counts.src = r;
      counts.dst = j;
      const int counts_id = push(std::move(counts));
      for (int e = 0; e < experts; ++e) {
        Chunk rows;
        rows.tensor = kMoeSend;
        rows.box = Box{{(j * experts + e) * o.capacity, 0}, {o.capacity, o.hidden}};
        rows.dst_tensor = kMoeRecv;
        rows.dst_box = Box{{(r * experts + e) * o.capacity, 0}, {o.capacity, o.hidden}};
        rows.src = r;
        rows.dst = j;
        // NCCL: no dep. The sender would wait for the count's landing on the peer; the
        // receiver's stream order (the counts group before the rows groups) already puts the
        // count in place before the rows land, which is what the verifier's rules ask.
        if (!nccl || r == j) rows.deps = {counts_id};
        rows.runtime_rows = RuntimeRows{0, kMoeRecvCounts, static_cast<std::int64_t>(r) * experts + e};
        push(std::move(rows));
      }
    }
  if (nccl) list_nccl_streams(plan, w, experts);
  return plan;
}

}  // namespace syncopate::plan
