// The verifier: proves a plan safe before anything runs.
//
// Four rule groups: well-formed, coverage, ordering, deadlock freedom.
// It never throws on a bad plan; it returns every violation it finds, each naming the rank,
// the chunk and the rule.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

enum class RuleGroup { well_formed, coverage, ordering, deadlock };
std::string_view to_string(RuleGroup group);

struct Violation {
  RuleGroup group = RuleGroup::well_formed;
  std::string rule;    // short kebab-case name, e.g. "box-out-of-bounds", "missing-shard"
  int rank = -1;       // -1 when not about one rank
  int chunk = -1;      // -1 when not about one chunk
  std::string detail;  // human-readable; a cycle lists its chunks in order

  // "plan.json: rank 2, chunk 17: coverage/missing-shard: ..."
  std::string format(std::string_view plan_name) const;
};

struct VerifyReport {
  std::vector<Violation> violations;
  bool ok() const { return violations.empty(); }
  std::string format(std::string_view plan_name) const;  // one violation per line
};

VerifyReport verify(const CommPlan& plan);

// Throws PlanVerifyError with the formatted report when the plan is not safe.
void verify_or_throw(const CommPlan& plan, std::string_view plan_name = "<plan>");

}  // namespace syncopate::plan
