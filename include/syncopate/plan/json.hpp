// Reading and writing plans as versioned JSON.
//
// Every field is read through a checked accessor; a failure throws PlanParseError naming the
// source and JSON path, e.g. `plan.json: chunks[12].box.offset[1]: expected an integer, got
// "x"`. Writing then reading a plan gives back an equal CommPlan (lossless round trip).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

// `source` names the input in error messages (a file name, or "<string>").
CommPlan parse_plan(std::string_view json_text, std::string_view source = "<string>");
CommPlan load_plan(const std::filesystem::path& path);

std::string plan_to_json(const CommPlan& plan, int indent = 2);
void save_plan(const CommPlan& plan, const std::filesystem::path& path);

}  // namespace syncopate::plan
