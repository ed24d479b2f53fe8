// Small in-memory plans for the verifier tests (verify_test.cpp, verify_errors_test.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan::testing_plans {

// A plan over one tensor "x" of shape rows x 4, every rank with `streams` streams; chunks move
// whole rows. Each chunk is issued by `issuer` (its src unless told otherwise).
struct TinyPlan {
  CommPlan plan;

  TinyPlan(Collective kind, int world, std::int64_t rows, int streams = 1) {
    plan.collective.kind = kind;
    plan.collective.tensor = "x";
    plan.world_size = world;
    plan.tensors["x"] = TensorSpec{{rows, 4}, DType::bf16, "row-major"};
    for (int r = 0; r < world; ++r)
      plan.ranks.push_back({r, std::vector<std::vector<int>>(static_cast<std::size_t>(streams))});
  }
  int add(int src, int dst, std::int64_t row, std::int64_t rows, ChunkOp op = ChunkOp::copy, std::vector<int> deps = {},
          int stream = 0, int issuer = -1, Backend backend = Backend::copy_engine) {
    Chunk c;
    c.id = static_cast<int>(plan.chunks.size());
    c.tensor = c.dst_tensor = "x";
    c.box = c.dst_box = Box{{row, 0}, {rows, 4}};
    c.src = src;
    c.dst = dst;
    c.op = op;
    c.stream = stream;
    c.deps = std::move(deps);
    c.backend = backend;
    plan.chunks.push_back(c);
    if (backend == Backend::nccl && src != dst) {
      plan.ranks[src].streams[stream].push_back(c.id);
      plan.ranks[dst].streams[stream].push_back(c.id);
    } else {
      plan.ranks[issuer < 0 ? src : issuer].streams[stream].push_back(c.id);
    }
    return c.id;
  }
};

// Ring all-gather on 3 ranks, 2 rows per shard: step 0 sends own shards, step 1 forwards.
inline TinyPlan ring_all_gather_3() {
  TinyPlan t(Collective::all_gather, 3, 6);
  for (int r = 0; r < 3; ++r) t.add(r, (r + 1) % 3, 2 * r, 2);  // chunks 0, 1, 2
  // Rank r forwards shard r-1, brought by chunk (r+2)%3.
  for (int r = 0; r < 3; ++r) t.add(r, (r + 1) % 3, 2 * ((r + 2) % 3), 2, ChunkOp::copy, {(r + 2) % 3});
  return t;
}

// The first violation of `rule` in the report, or nullptr.
inline const Violation* find_rule(const VerifyReport& report, std::string_view rule) {
  for (const auto& v : report.violations)
    if (v.rule == rule) return &v;
  return nullptr;
}

}  // namespace syncopate::plan::testing_plans
