// estimate_arrival(): a byte-weighted list schedule of the plan's streams (see tile_order.hpp).
//
// Kahn's algorithm over the happens-before edges that the plan states directly: stream order
// (each stream of each rank issues its chunks one after another) and deps. A chunk's landing
// time is the latest landing among its predecessors plus its own size in bytes, so chunks deep
// in a ring or late in a stream land later, and big chunks count more than small ones.
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "syncopate/schedule/tile_order.hpp"

namespace syncopate::schedule {
namespace {

double chunk_bytes(const plan::CommPlan& plan, const plan::Chunk& chunk) {
  const auto it = plan.tensors.find(chunk.tensor);
  if (it == plan.tensors.end())
    throw UserError(fmt::format("chunks[{}]: unknown-tensor: tensor \"{}\" is not in the plan "
                                "(estimate_arrival() needs a verified plan)",
                                chunk.id, chunk.tensor));
  return static_cast<double>(chunk.box.elements()) * plan::dtype_size(it->second.dtype);
}

}  // namespace

std::vector<double> estimate_arrival(const plan::CommPlan& plan) {
  const int n = static_cast<int>(plan.chunks.size());
  std::vector<std::vector<int>> successors(n);
  std::vector<int> pending(n, 0);  // predecessors not yet scheduled
  const auto add_edge = [&](int from, int to, const std::string& where) {
    if (from < 0 || from >= n || to < 0 || to >= n)
      throw UserError(fmt::format("{}: unknown-chunk: chunk id {} -> {} with {} chunks "
                                  "(estimate_arrival() needs a verified plan)",
                                  where, from, to, n));
    successors[from].push_back(to);
    ++pending[to];
  };
  for (std::size_t r = 0; r < plan.ranks.size(); ++r)
    for (std::size_t s = 0; s < plan.ranks[r].streams.size(); ++s) {
      const auto& stream = plan.ranks[r].streams[s];
      for (std::size_t i = 1; i < stream.size(); ++i)
        add_edge(stream[i - 1], stream[i], fmt::format("ranks[{}].streams[{}][{}]", r, s, i));
    }
  for (int c = 0; c < n; ++c)
    for (std::size_t d = 0; d < plan.chunks[c].deps.size(); ++d)
      add_edge(plan.chunks[c].deps[d], c, fmt::format("chunks[{}].deps[{}]", c, d));

  std::vector<double> start(n, 0.0), arrival(n, 0.0);
  std::deque<int> ready;
  for (int c = 0; c < n; ++c)
    if (pending[c] == 0) ready.push_back(c);
  int done = 0;
  while (!ready.empty()) {
    const int c = ready.front();
    ready.pop_front();
    ++done;
    arrival[c] = start[c] + chunk_bytes(plan, plan.chunks[c]);
    for (int next : successors[c]) {
      start[next] = std::max(start[next], arrival[c]);
      if (--pending[next] == 0) ready.push_back(next);
    }
  }
  if (done != n) {
    const auto stuck = std::find_if(pending.begin(), pending.end(), [](int p) { return p > 0; });
    throw UserError(fmt::format("chunks[{}]: deadlock/cycle: this chunk never becomes ready because "
                                "stream order and deps contain a cycle (estimate_arrival() needs a "
                                "verified plan)",
                                stuck - pending.begin()));
  }
  return arrival;
}

}  // namespace syncopate::schedule
