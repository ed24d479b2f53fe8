// The verifier's entry points: runs the four rule groups in order and formats the report.
// Each group lives in its own file (verify_well_formed.cpp, verify_coverage.cpp,
// verify_ordering.cpp, verify_deadlock.cpp). The rules, by the names violations carry:
//  well-formed  unsupported-version world-size rank-count rank-index chunk-id rank-out-of-range
//               bad-tensor-shape unknown-tensor box-rank negative-offset non-positive-extent
//               box-out-of-bounds extent-mismatch dtype-mismatch collective-tensor
//               collective-dim collective-output collective-input collective-indivisible op-not-allowed
//               unknown-dep self-dep unknown-chunk-in-stream chunk-not-issued
//               chunk-issued-twice issuer-not-endpoint stream-mismatch stream-out-of-range
//               nccl-unpaired
//               (NCCL groups, verify_groups.cpp) group-out-of-range group-not-nccl
//               group-local-chunk group-split-across-streams group-not-consecutive
//               group-dep-inside-group groups-too-complex
//               (topology, verify_topology.cpp) nodes-count node-id cross-node-chunk
//               dep-off-node
//               (run-time rows, verify_runtime_rows.cpp) runtime-rows-dim runtime-rows-counts
//               runtime-rows-op
//  coverage     missing-shard wrong-data shard-delivered-twice own-shard-overwritten
//               contribution-missing contribution-counted-twice coverage-too-complex
//               count-not-delivered count-delivered-twice count-wrong-source
//  ordering     forward-race write-race ordering-too-complex count-unordered counts-too-complex
//  deadlock     dependency-cycle nccl-order-mismatch
// The *-too-complex rules fire when a (hostile) plan would take the verifier minutes; they
// reject the plan rather than pass it unproven. Each rule lists at most 500 violations, then
// one line with the count of the rest.
#include "syncopate/plan/verify.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "syncopate/common/error.hpp"
#include "verify_internal.hpp"

namespace syncopate::plan {

std::string_view to_string(RuleGroup group) {
  switch (group) {
    case RuleGroup::well_formed:
      return "well-formed";
    case RuleGroup::coverage:
      return "coverage";
    case RuleGroup::ordering:
      return "ordering";
    case RuleGroup::deadlock:
      return "deadlock";
  }
  return "?";
}

std::string Violation::format(std::string_view plan_name) const {
  std::string where(plan_name);
  if (rank >= 0) where += fmt::format(": rank {}", rank);
  if (chunk >= 0) where += fmt::format("{} chunk {}", rank >= 0 ? "," : ":", chunk);
  return fmt::format("{}: {}/{}: {}", where, to_string(group), rule, detail);
}

std::string VerifyReport::format(std::string_view plan_name) const {
  std::string out;
  for (const auto& v : violations) {
    out += v.format(plan_name);
    out += '\n';
  }
  return out;
}

VerifyReport verify(const CommPlan& plan) {
  using namespace verify_detail;
  VerifyReport report;
  ViolationSink sink(report.violations);
  check_well_formed(plan, sink);
  check_groups(plan, sink);
  check_topology(plan, sink);
  check_runtime_rows_form(plan, sink);
  // The later groups index tensors, ranks and chunks freely; they need a well-formed plan.
  if (sink.count() == 0) {
    const GraphFacts facts(plan);
    check_coverage(plan, facts, sink);
    check_runtime_rows_counts(plan, facts, sink);
    check_ordering(plan, facts, sink);
    check_deadlock(plan, facts, sink);
  }
  sink.finish();
  return report;
}

void verify_or_throw(const CommPlan& plan, std::string_view plan_name) {
  const VerifyReport report = verify(plan);
  if (report.ok()) return;
  throw PlanVerifyError(fmt::format("{}: plan is not safe ({} violation{}):\n{}", plan_name, report.violations.size(),
                                    report.violations.size() == 1 ? "" : "s", report.format(plan_name)));
}

namespace verify_detail {

void ViolationSink::add(RuleGroup group, std::string rule, int rank, int chunk, std::string detail) {
  ++seen_;
  auto it = per_rule_.find(rule);
  if (it == per_rule_.end()) it = per_rule_.emplace(rule, std::pair{group, 0LL}).first;
  if (++it->second.second > kMaxPerRule) return;
  out_.push_back({group, std::move(rule), rank, chunk, std::move(detail)});
}

bool ViolationSink::keeps(std::string_view rule) const {
  auto it = per_rule_.find(rule);
  return it == per_rule_.end() || it->second.second < kMaxPerRule;
}

void ViolationSink::finish() {
  for (const auto& [rule, entry] : per_rule_) {
    const auto [group, total] = entry;
    if (total > kMaxPerRule) {
      out_.push_back(
          {group, rule, -1, -1,
           fmt::format("{} more violations of this rule not listed ({} in all)", total - kMaxPerRule, total)});
    }
  }
  per_rule_.clear();
}

std::string describe_box(std::string_view tensor, const Box& box) {
  std::string out(tensor);
  out += '[';
  const std::size_t dims = std::max(box.offset.size(), box.extent.size());
  for (std::size_t d = 0; d < dims; ++d) {
    if (d > 0) out += ", ";
    const bool has_offset = d < box.offset.size();
    const bool has_extent = d < box.extent.size();
    if (has_offset && has_extent) {
      // Printed as begin:end; the sum cannot overflow for a box that passed the range checks,
      // and for one that did not the raw numbers are more useful than a wrapped end.
      const auto begin = box.offset[d];
      const auto extent = box.extent[d];
      std::int64_t end = 0;
      if (__builtin_add_overflow(begin, extent, &end)) {
        out += fmt::format("{}:+{}", begin, extent);
      } else {
        out += fmt::format("{}:{}", begin, end);
      }
    } else if (has_offset) {
      out += fmt::format("{}:?", box.offset[d]);
    } else {
      out += fmt::format("?:+{}", box.extent[d]);
    }
  }
  out += ']';
  return out;
}

Box intersect(const Box& a, const Box& b) {
  Box out;
  for (std::size_t d = 0; d < a.offset.size() && d < b.offset.size(); ++d) {
    const auto begin = std::max(a.offset[d], b.offset[d]);
    const auto end = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    out.offset.push_back(begin);
    out.extent.push_back(end - begin);
  }
  return out;
}

std::string describe_route(const Chunk& chunk) { return fmt::format("{} -> {}", chunk.src, chunk.dst); }

GraphFacts::GraphFacts(const CommPlan& plan) : graph(plan), components(graph.strongly_connected_components()) {
  component_of.assign(static_cast<std::size_t>(graph.size()), -1);
  for (std::size_t c = 0; c < components.size(); ++c)
    for (int chunk : components[c]) component_of[chunk] = static_cast<int>(c);
  // Smallest id first among the ready chunks: plans list chunks roughly in the order they run,
  // so when a race leaves the order open, the replay follows the order the author meant and
  // the race is reported alone, not also as the coverage problem one outcome of it would be.
  if (auto order = graph.topological_order()) {
    replay_order = std::move(*order);
    return;
  }
  for (const auto& component : components) replay_order.insert(replay_order.end(), component.begin(), component.end());
}

}  // namespace verify_detail
}  // namespace syncopate::plan
