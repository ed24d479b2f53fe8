// Well-formed rules for the plan's topology (CommPlan::nodes): one node id per rank, no
// copy-engine or SM-copy chunk between ranks of different nodes, and no dep that only another
// node could observe. Copy engine and SM copy read and write the peer's memory through CUDA IPC
// mappings, which exist only between GPUs of one host; across hosts only NCCL (its network
// transports) moves data, and signals are read only within a node.
#include <fmt/format.h>

#include "verify_internal.hpp"

namespace syncopate::plan::verify_detail {
namespace {

constexpr RuleGroup kGroup = RuleGroup::well_formed;

// A chunk waits for its deps by reading their landing signals, which live in the heap of the
// rank each dep lands on. Its issuers (both ends of an NCCL chunk; the one node of any other
// chunk) can read only heaps of their own node.
void check_deps(const CommPlan& plan, const Chunk& chunk, int chunks, ViolationSink& sink) {
  const int src_node = node_of(plan, chunk.src), dst_node = node_of(plan, chunk.dst);
  for (int d : chunk.deps) {
    if (d < 0 || d >= chunks) continue;  // unknown-dep says so
    const Chunk& dep = plan.chunks[static_cast<std::size_t>(d)];
    if (dep.dst < 0 || dep.dst >= plan.world_size) continue;
    const int at = node_of(plan, dep.dst);
    if (at == src_node || (chunk.backend == Backend::nccl && at == dst_node)) continue;
    sink.add(kGroup, "dep-off-node", chunk.src, chunk.id,
             fmt::format("chunk {} ({}, nodes {} -> {}) depends on chunk {}, which lands on rank {} on node {}: a "
                         "chunk can wait only for chunks landing on the node of one of its issuers (their "
                         "landing signals are read through that node's memory)",
                         chunk.id, describe_route(chunk), src_node, dst_node, d, dep.dst, at));
  }
}

}  // namespace

void check_topology(const CommPlan& plan, ViolationSink& sink) {
  if (plan.nodes.empty()) return;  // every rank on one node
  if (static_cast<int>(plan.nodes.size()) != plan.world_size) {
    sink.add(kGroup, "nodes-count", -1, -1,
             fmt::format("nodes lists {} node ids but world_size is {}: give one node id per rank (or leave "
                         "nodes out for a single node)",
                         plan.nodes.size(), plan.world_size));
    return;
  }
  bool ids_ok = true;
  for (int r = 0; r < plan.world_size; ++r)
    if (plan.nodes[static_cast<std::size_t>(r)] < 0) {
      sink.add(kGroup, "node-id", r, -1,
               fmt::format("rank {} is on node {}: node ids are >= 0", r, plan.nodes[static_cast<std::size_t>(r)]));
      ids_ok = false;
    }
  if (!ids_ok) return;
  const int chunks = static_cast<int>(plan.chunks.size());
  for (const Chunk& chunk : plan.chunks) {
    const bool in_range =
        chunk.src >= 0 && chunk.src < plan.world_size && chunk.dst >= 0 && chunk.dst < plan.world_size;
    if (!in_range) continue;  // rank-out-of-range says so
    check_deps(plan, chunk, chunks, sink);
    if (chunk.backend == Backend::nccl) continue;
    const int from = node_of(plan, chunk.src), to = node_of(plan, chunk.dst);
    if (from == to) continue;
    sink.add(kGroup, "cross-node-chunk", chunk.src, chunk.id,
             fmt::format("chunk {} ({}) is a {} chunk from rank {} on node {} to rank {} on node {}: {} reaches "
                         "only GPUs of its own node; a chunk between nodes must use backend nccl",
                         chunk.id, describe_route(chunk), to_string(chunk.backend), chunk.src, from, chunk.dst, to,
                         to_string(chunk.backend)));
  }
}

}  // namespace syncopate::plan::verify_detail
