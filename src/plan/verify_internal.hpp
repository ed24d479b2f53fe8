// Internals shared by the verifier's rule groups (one file per group: verify_<group>.cpp).
// Not a public header: nothing outside src/plan includes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/plan/dependency_graph.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::plan::verify_detail {

// Collects violations. A pathological plan (say, 10k unordered writes to one region) could
// produce millions of them, so each rule keeps its first kMaxPerRule and finish() appends one
// line saying how many more there were.
class ViolationSink {
 public:
  static constexpr int kMaxPerRule = 500;

  explicit ViolationSink(std::vector<Violation>& out) : out_(out) {}
  void add(RuleGroup group, std::string rule, int rank, int chunk, std::string detail);
  // Same, but builds the detail only when the violation is kept: formatting half a million
  // messages that are then dropped would dominate the run time on a hostile plan.
  template <class MakeDetail>
  void add_lazy(RuleGroup group, std::string rule, int rank, int chunk, MakeDetail&& make_detail) {
    if (keeps(rule)) {
      add(group, std::move(rule), rank, chunk, make_detail());
    } else {
      add(group, std::move(rule), rank, chunk, std::string());
    }
  }
  // Whether the next violation of `rule` will be kept.
  bool keeps(std::string_view rule) const;
  // Violations seen so far, including those not kept.
  std::size_t count() const { return seen_; }
  void finish();

 private:
  std::vector<Violation>& out_;
  std::map<std::string, std::pair<RuleGroup, long long>, std::less<>> per_rule_;
  std::size_t seen_ = 0;
};

// "x[0:128, 0:64]": a box in slice notation (end exclusive). Tolerates malformed boxes.
std::string describe_box(std::string_view tensor, const Box& box);
// The overlap of two boxes of the same rank (callers check that they overlap).
Box intersect(const Box& a, const Box& b);
// "3 -> 5": a chunk's direction, for messages.
std::string describe_route(const Chunk& chunk);

// The dependency graph with its strongly connected components, computed once per verify().
struct GraphFacts {
  explicit GraphFacts(const CommPlan& plan);

  DependencyGraph graph;
  std::vector<std::vector<int>> components;  // topological order of the condensed graph
  std::vector<int> component_of;             // by chunk id: index into components
  // Every chunk in a valid execution order (smallest id first among ready chunks) when the
  // graph is acyclic; components in topological order when it is not (a deterministic best
  // effort: the deadlock group reports the cycle).
  std::vector<int> replay_order;
};

// For each pair (a, b): true when a path a ->* b or b ->* a exists (chunks of one component
// count as ordered: their cycle is a deadlock, reported on its own). Uses 64-source bit masks
// propagated over the condensed graph, so memory stays linear in the plan.
std::vector<char> ordered_pairs(const GraphFacts& facts, const std::vector<std::pair<int, int>>& pairs);

// The rule groups. Each appends its violations; coverage, ordering and deadlock require a plan
// that passed check_well_formed.
void check_well_formed(const CommPlan& plan, ViolationSink& sink);
// NCCL group rules (well-formed group too); safe on any plan (skips ids out of range).
void check_groups(const CommPlan& plan, ViolationSink& sink);
// Topology rules (well-formed group too, verify_topology.cpp): nodes per rank, no copy-engine
// or SM-copy chunk between nodes. Safe on any plan.
void check_topology(const CommPlan& plan, ViolationSink& sink);
// Run-time row counts (verify_runtime_rows.cpp): the form of Chunk::runtime_rows (well-formed
// group, safe on any plan), then, on a well-formed plan, that each count is delivered once by
// the rows' sender before the rows.
void check_runtime_rows_form(const CommPlan& plan, ViolationSink& sink);
void check_runtime_rows_counts(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink);
void check_coverage(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink);
void check_ordering(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink);
void check_deadlock(const CommPlan& plan, const GraphFacts& facts, ViolationSink& sink);

}  // namespace syncopate::plan::verify_detail
