// The plan layer's use of the checked JSON reader (include/syncopate/common/json_checked.hpp):
// its names under plan::detail, failures as PlanParseError, and the plan enums.
#pragma once

#include "syncopate/common/json_checked.hpp"
#include "syncopate/plan/enums.hpp"

namespace syncopate::plan::detail {

using checked_json::describe;
using checked_json::JsonNode;
using checked_json::ObjectReader;
using checked_json::parse_json_source;
using checked_json::parse_without_duplicate_keys;
using checked_json::path_join;

// One of the spellings of E (plan/enums.hpp), else a failure listing them.
template <class E>
E as_enum(const JsonNode& node) {
  if (auto parsed = parse_enum<E>(node.as_string_view())) return *parsed;
  node.fail("one of " + enum_choices<E>());
}

}  // namespace syncopate::plan::detail
