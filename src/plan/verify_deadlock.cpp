// Rule group "deadlock": the dependency graph must be acyclic, and NCCL sends and recvs between
// a pair of ranks on one stream must be posted in the same order on both sides (NCCL matches
// them by order; a mismatch pairs the wrong buffers or hangs).
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::deadlock;
// Long lists in messages are cut to this many entries around the first difference.
constexpr std::size_t kListWindow = 12;
// Hops of a cycle spelled out before the rest is elided.
constexpr std::size_t kMaxHops = 16;

// The rank whose stream issues `chunk` first (for NCCL: its src, which issues the send).
std::vector<int> issuing_rank(const CommPlan& plan) {
  std::vector<int> issuer(plan.chunks.size(), -1);
  for (const auto& program : plan.ranks)
    for (const auto& stream : program.streams)
      for (int id : stream) {
        const auto i = static_cast<std::size_t>(id);
        const auto& chunk = plan.chunks[i];
        if (issuer[i] < 0 || (chunk.backend == Backend::nccl && program.rank == chunk.src)) issuer[i] = program.rank;
      }
  return issuer;
}

std::string describe_hop(const CommPlan& plan, const DependencyGraph& graph, int from, int to) {
  const DependencyEdge* edge = graph.find_edge(from, to);
  if (edge == nullptr) return "?";
  if (edge->kind == EdgeKind::dep) return fmt::format("(chunk {} depends on {})", to, from);
  if (edge->kind == EdgeKind::group_dep)
    return fmt::format("(issued in one NCCL group with chunk {} on rank {} stream {}, which depends on {})", edge->via,
                       edge->rank, edge->stream, from);
  return fmt::format("(issued after {} on rank {} stream {})",
                     plan.chunks[static_cast<std::size_t>(from)].group == kNoGroup ? "it" : "its NCCL group",
                     edge->rank, edge->stream);
}

void check_cycles(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink) {
  const auto issuer = issuing_rank(plan);
  for (const auto& component : facts.components) {
    const int head = component.front();
    if (component.size() == 1 && facts.graph.find_edge(head, head) == nullptr) continue;
    // Lazy: the search costs O(plan) per knot, so only knots that get listed are searched.
    sink.add_lazy(kGroup, "dependency-cycle", issuer[head], head, [&] {
      const auto cycle = facts.graph.shortest_cycle_through(head);
      std::string detail = "cycle: ";
      for (std::size_t i = 0; i < cycle.size(); ++i) {
        if (i == kMaxHops && cycle.size() > kMaxHops + 1) {
          // A ring-long cycle would make a megabyte line; keep the start and the way back.
          detail += fmt::format("... ({} more chunks) -> ", cycle.size() - kMaxHops - 1);
          i = cycle.size() - 1;
        }
        const int id = cycle[i];
        const int next = cycle[(i + 1) % cycle.size()];
        detail += fmt::format("chunk {} (rank {}, {}) -> {} ", id, issuer[id], describe_route(plan.chunks[id]),
                              describe_hop(plan, facts.graph, id, next));
        detail += i + 1 == cycle.size() ? fmt::format("-> chunk {}", next) : "-> ";
      }
      if (component.size() > cycle.size())
        detail += fmt::format("; {} chunks are stuck in this knot in all", component.size());
      bool ungrouped_nccl = true;
      for (int id : cycle) {
        const auto& c = plan.chunks[static_cast<std::size_t>(id)];
        ungrouped_nccl = ungrouped_nccl && c.backend == Backend::nccl && c.group == kNoGroup;
      }
      if (ungrouped_nccl)
        detail +=
            "; ungrouped NCCL sends and recvs on one stream complete one at a time: give each step's "
            "send and recv one group number so they are issued together";
      return detail;
    });
  }
}

std::string window(const std::vector<int>& ids, std::size_t from) {
  const std::size_t begin = from > 2 ? from - 2 : 0;
  const std::size_t end = std::min(ids.size(), begin + kListWindow);
  std::string out = begin > 0 ? "..., " : "";
  out += fmt::format("{}", fmt::join(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                                     ids.begin() + static_cast<std::ptrdiff_t>(end), ", "));
  if (end < ids.size()) out += ", ...";
  return out;
}

void check_nccl_order(const CommPlan& plan, ViolationSink& sink) {
  // (src, dst, stream) -> chunk ids in the order the src posts sends / the dst posts recvs.
  std::map<std::tuple<int, int, int>, std::vector<int>> sends, recvs;
  for (const auto& program : plan.ranks) {
    for (std::size_t s = 0; s < program.streams.size(); ++s) {
      for (int id : program.streams[s]) {
        const auto& c = plan.chunks[static_cast<std::size_t>(id)];
        if (c.backend != Backend::nccl || c.src == c.dst) continue;
        const std::tuple key{c.src, c.dst, static_cast<int>(s)};
        (program.rank == c.src ? sends : recvs)[key].push_back(id);
      }
    }
  }
  for (const auto& [key, sent] : sends) {
    const auto [src, dst, stream] = key;
    auto it = recvs.find(key);
    if (it == recvs.end()) continue;  // well-formed guarantees both sides; nothing to compare
    const auto& received = it->second;
    const auto diff = static_cast<std::size_t>(
        std::mismatch(sent.begin(), sent.end(), received.begin(), received.end()).first - sent.begin());
    if (diff == sent.size() && sent.size() == received.size()) continue;
    const int chunk = diff < sent.size() ? sent[diff] : received[diff];
    sink.add(kGroup, "nccl-order-mismatch", src, chunk,
             fmt::format("rank {} stream {} sends chunks {} to rank {} but rank {} receives {}; "
                         "NCCL pairs the i-th send with the i-th recv, so both sides must post "
                         "them in one order",
                         src, stream, window(sent, diff), dst, dst, window(received, diff)));
  }
}

}  // namespace

void check_deadlock(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink) {
  check_nccl_order(plan, sink);
  check_cycles(plan, facts, sink);
}

}  // namespace syncopate::plan::verify_detail
