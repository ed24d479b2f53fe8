// estimate_arrival(): a byte-weighted list schedule of the plan's streams (see tile_order.hpp).
//
// Walks the plan's dependency graph (stream order of every rank's issue lists, NCCL send and
// recv both, and deps) in topological order. A chunk's landing time is the latest landing among
// its predecessors plus its own size in bytes, so chunks deep in a ring or late in a stream land
// later, and big chunks count more than small ones.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {
namespace {

double chunk_bytes(const plan::CommPlan& plan, const plan::Chunk& chunk) {
  const auto it = plan.tensors.find(chunk.tensor);
  if (it == plan.tensors.end())
    throw UserError(
        fmt::format("chunks[{}]: unknown-tensor: tensor \"{}\" is not in the plan "
                    "(estimate_arrival() needs a verified plan)",
                    chunk.id, chunk.tensor));
  return static_cast<double>(chunk.box.elements()) * plan::dtype_size(it->second.dtype);
}

}  // namespace

std::vector<double> estimate_arrival(const plan::CommPlan& plan) {
  const plan::DependencyGraph graph(plan);
  const auto order = graph.topological_order();
  if (!order) {
    const auto cycle = graph.find_cycle();
    throw UserError(
        fmt::format("chunks[{}]: deadlock/cycle: stream order and deps form the cycle "
                    "{} (estimate_arrival() needs a verified plan)",
                    cycle.empty() ? -1 : cycle.front(), fmt::join(cycle, " -> ")));
  }
  std::vector<double> arrival(plan.chunks.size(), 0.0);
  for (int c : *order) {
    double start = 0.0;
    for (int pred : graph.predecessors(c)) start = std::max(start, arrival[pred]);
    arrival[c] = start + chunk_bytes(plan, plan.chunks[c]);
  }
  return arrival;
}

}  // namespace syncopate::schedule
