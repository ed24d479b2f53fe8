// The happens-before graph of a plan: which chunk must have landed before which one starts.
//
// Nodes are chunk ids. An edge a -> b means "a has landed before b starts". Edges come from:
//  - stream order: consecutive *steps* of one (rank, stream) issue list run one after the other.
//    A step is one chunk, or an NCCL group (a run of consecutive chunks with one `group`
//    number): every member of a step has an edge to every member of the next step, and the
//    members of one group have no edges among themselves (they progress together);
//  - deps: every id in b.deps gives an edge dep -> b;
//  - group deps: a rank issues a group once the deps of its members that it waits for (those it
//    sends: the src side reads the forwarded data) have landed, so such a dep d of member m gives
//    d -> every other member of m's group on that rank (a dep inside its own group is a cycle);
//  - NCCL rendezvous: an NCCL chunk is listed in its src's stream (the send) and in its dst's
//    stream (the recv), so it gets the stream predecessor and successor of both lists; a send
//    cannot complete until the matching recv is posted, and vice versa. (An NCCL chunk with
//    src == dst is a local copy, listed once.)
// The simulator, the schedule and the runtime reuse this graph; the verifier proves it acyclic.
//
// When it may be built: on any plan, without crashing (ids out of range in streams or deps are
// skipped), but it only means something on a plan that passed the verifier's well-formed group
// (dense ids, each chunk issued exactly once by the right ranks, deps that exist).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

enum class EdgeKind : std::uint8_t { stream_order, dep, group_dep };

// Why an edge exists. For stream_order, `rank`/`stream` name the issue list that orders the two
// chunks; for group_dep they name the list holding the group, and `via` is the member whose dep
// `from` is; otherwise they are -1. When two reasons give the same edge, the first one found
// (stream order, then deps, then group deps) is kept.
struct DependencyEdge {
  int from = 0;
  int to = 0;
  EdgeKind kind = EdgeKind::stream_order;
  int rank = -1;
  int stream = -1;
  int via = -1;
};

// The steps of one issue list: runs of consecutive ids with one group number (kNoGroup chunks
// are steps of their own), as [begin, end) positions into the list. An id out of range is a
// step of its own. Shared by the graph and the verifier; the runtime batches its steps the same
// way (runtime::step_batches).
struct IssueStep {
  std::size_t begin = 0;
  std::size_t end = 0;
};
std::vector<IssueStep> issue_steps(const CommPlan& plan, const std::vector<int>& stream);

class DependencyGraph {
 public:
  explicit DependencyGraph(const CommPlan& plan);

  int size() const { return static_cast<int>(succ_offsets_.size()) - 1; }
  // Distinct chunks that must land right after / right before `chunk` (no duplicates).
  std::span<const int> successors(int chunk) const;
  std::span<const int> predecessors(int chunk) const;
  // Every distinct edge, sorted by (from, to).
  const std::vector<DependencyEdge>& edges() const { return edges_; }
  // The edge from -> to, or nullptr if there is none.
  const DependencyEdge* find_edge(int from, int to) const;

  // A topological order (ties broken by smallest chunk id), or nullopt when there is a cycle.
  std::optional<std::vector<int>> topological_order() const;

  // The chunks of one cycle in edge order c0 -> c1 -> ... -> ck-1 -> c0, rotated so that c0 is
  // the smallest id on it; empty when the graph is acyclic. A self-edge gives {c}.
  std::vector<int> find_cycle() const;

  // Strongly connected components in topological order of the condensed graph (a component
  // comes before every component it has an edge to); ids inside a component are ascending.
  // A component of more than one chunk, or one chunk with a self-edge, is a deadlock.
  std::vector<std::vector<int>> strongly_connected_components() const;

  // The shortest cycle through `chunk` (in edge order, starting at `chunk`), or empty if none.
  std::vector<int> shortest_cycle_through(int chunk) const;

 private:
  std::vector<DependencyEdge> edges_;  // sorted by (from, to), unique
  std::vector<int> succ_offsets_;      // CSR over edges_: successors of v at [off[v], off[v+1])
  std::vector<int> succ_;
  std::vector<int> pred_offsets_;
  std::vector<int> pred_;
};

}  // namespace syncopate::plan
