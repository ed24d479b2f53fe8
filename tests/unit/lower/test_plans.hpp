// Plans for lowering and scheduling tests: every template case, and a tiny builder for plans
// written by hand (so some tests do not depend on the template code they are not testing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::testing {

// One template plan, the grid of a GEMM over its communicated tensor and how tiles access it.
struct TemplateCase {
  plan::TemplateOptions options;
  std::string name;
};

// collective x algorithm x world {1,2,3,4,7,8} x split {1,2,4}, communicated along dim 0 of a
// [rows, 6] tensor (rows uneven, except for all-to-all whose blocks must be equal).
inline std::vector<TemplateCase> all_template_cases() {
  std::vector<TemplateCase> cases;
  for (auto collective : {plan::Collective::all_gather, plan::Collective::reduce_scatter, plan::Collective::all_reduce,
                          plan::Collective::all_to_all})
    for (auto algorithm : {plan::Algorithm::ring, plan::Algorithm::direct, plan::Algorithm::bidir})
      for (int world : {1, 2, 3, 4, 7, 8})
        for (int split : {1, 2, 4}) {
          plan::TemplateOptions o;
          o.collective = collective;
          o.algorithm = algorithm;
          o.world_size = world;
          o.split = split;
          // all-to-all needs equal blocks (and sub-blocks); the others get an uneven row count.
          const std::int64_t rows = collective == plan::Collective::all_to_all ? std::int64_t{world} * world * split
                                                                               : std::int64_t{world} * split * 2 + 1;
          o.shape = {rows, 6};
          o.dim = 0;
          cases.push_back(
              {o, fmt::format("{}/{}/w{}/s{}", plan::to_string(collective), plan::to_string(algorithm), world, split)});
        }
  return cases;
}

// The tensor a kernel reads after the collective (all-to-all: its output).
inline std::string consumed_tensor(const plan::TemplateOptions& o) {
  return o.collective == plan::Collective::all_to_all ? o.output : o.tensor;
}

// Builds plans chunk by chunk; chunk ids are dense in insertion order.
class PlanBuilder {
 public:
  PlanBuilder(int world, plan::Collective kind = plan::Collective::custom) {
    plan_.world_size = world;
    plan_.collective.kind = kind;
    for (int r = 0; r < world; ++r) plan_.ranks.push_back({r, {}});
  }
  PlanBuilder& tensor(const std::string& name, std::vector<std::int64_t> shape, plan::DType dtype = plan::DType::bf16) {
    plan_.tensors[name] = {std::move(shape), dtype, "row-major"};
    if (plan_.collective.tensor.empty()) plan_.collective.tensor = name;
    return *this;
  }
  // Moves `box` of `tensor` from src to the same box on dst; issued by src on `stream`.
  int chunk(const std::string& tensor, plan::Box box, int src, int dst, int stream = 0, std::vector<int> deps = {},
            plan::ChunkOp op = plan::ChunkOp::copy) {
    plan::Chunk c;
    c.id = static_cast<int>(plan_.chunks.size());
    c.tensor = c.dst_tensor = tensor;
    c.box = c.dst_box = std::move(box);
    c.src = src;
    c.dst = dst;
    c.stream = stream;
    c.deps = std::move(deps);
    c.op = op;
    auto& streams = plan_.ranks[src].streams;
    if (static_cast<int>(streams.size()) <= stream) streams.resize(stream + 1);
    streams[stream].push_back(c.id);
    plan_.chunks.push_back(c);
    return c.id;
  }
  // Moves `box` of `tensor` on src into `dst_box` of `dst_tensor` on dst; issued by `issuer`
  // (src or dst) on `stream`.
  int copy_into(const std::string& tensor, plan::Box box, const std::string& dst_tensor, plan::Box dst_box, int src,
                int dst, int issuer, int stream) {
    plan::Chunk c;
    c.id = static_cast<int>(plan_.chunks.size());
    c.tensor = tensor;
    c.dst_tensor = dst_tensor;
    c.box = std::move(box);
    c.dst_box = std::move(dst_box);
    c.src = src;
    c.dst = dst;
    c.stream = stream;
    auto& streams = plan_.ranks[issuer].streams;
    if (static_cast<int>(streams.size()) <= stream) streams.resize(stream + 1);
    streams[stream].push_back(c.id);
    plan_.chunks.push_back(c);
    return c.id;
  }
  plan::CommPlan& mutable_plan() { return plan_; }
  const plan::CommPlan& plan() const { return plan_; }

 private:
  plan::CommPlan plan_;
};

inline plan::Box rows_box(std::int64_t begin, std::int64_t count, std::int64_t cols) {
  return {{begin, 0}, {count, cols}};
}

}  // namespace syncopate::testing

namespace syncopate::testing {

// A ring all-gather written by hand: `x` of `shape` is sharded along `dim` by even_split; at step
// s rank r sends shard (r - s) mod W to rank r + 1, after the chunk that brought it landed.
// Chunk id = s * W + r.
inline plan::CommPlan hand_ring_all_gather(int world, std::vector<std::int64_t> shape, int dim) {
  PlanBuilder b(world, plan::Collective::all_gather);
  b.tensor("x", shape);
  for (int s = 0; s + 1 < world; ++s)
    for (int r = 0; r < world; ++r) {
      const int shard = ((r - s) % world + world) % world;
      const auto span = plan::even_split(shape[dim], world, shard);
      plan::Box box{std::vector<std::int64_t>(shape.size(), 0), shape};
      box.offset[dim] = span.begin;
      box.extent[dim] = span.size;
      std::vector<int> deps;
      if (s > 0) deps.push_back((s - 1) * world + (r - 1 + world) % world);
      b.chunk("x", box, r, (r + 1) % world, 0, deps);
    }
  return b.plan();
}

// A direct reduce-scatter written by hand: rank r adds its partial of row shard j into rank j,
// for every j != r, all on stream 0 in order of j. x is [rows, cols].
inline plan::CommPlan hand_direct_reduce_scatter(int world, std::int64_t rows, std::int64_t cols) {
  PlanBuilder b(world, plan::Collective::reduce_scatter);
  b.tensor("x", {rows, cols});
  for (int r = 0; r < world; ++r)
    for (int j = 0; j < world; ++j) {
      if (j == r) continue;
      const auto span = plan::even_split(rows, world, j);
      b.chunk("x", rows_box(span.begin, span.size, cols), r, j, 0, {}, plan::ChunkOp::reduce_add);
    }
  return b.plan();
}

// A staged GEMM+RS written by hand (docs: the staged design): "c" [1, M, N] holds every rank's
// partials, "p" [W, M/W, N] is the staging tensor. For every ordered pair s != r and sub-chunk k
// of `split`: copy c[0, r*Ms + k0 .. +rows_k, :] on s into p[s, k0 .. +rows_k, :] on r, pulled
// by r on stream (s - r - 1) mod W (one stream per peer). M must divide by W.
inline plan::CommPlan hand_staged_reduce_scatter(int world, std::int64_t m, std::int64_t n, int split) {
  PlanBuilder b(world, plan::Collective::reduce_scatter);
  const std::int64_t ms = m / world;
  b.tensor("c", {1, m, n});
  b.tensor("p", {world, ms, n});
  auto& spec = b.mutable_plan().collective;
  spec.tensor = "c";
  spec.output = "p";
  spec.dim = 1;
  spec.algorithm = plan::Algorithm::direct;
  spec.split = split;
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < split; ++k)
      for (int d = 1; d < world; ++d) {
        const int s = (r + d) % world;
        const auto rows = plan::even_split(ms, split, k);
        b.copy_into("c", {{0, r * ms + rows.begin, 0}, {1, rows.size, n}}, "p", {{s, rows.begin, 0}, {1, rows.size, n}},
                    s, r, r, d - 1);
      }
  return b.plan();
}

}  // namespace syncopate::testing
