// Reading and writing plans as versioned JSON.
//
// Every field is read through a checked accessor; a failure throws PlanParseError naming the
// source and JSON path, e.g. `plan.json: chunks[12].box.offset[1]: expected an integer, got
// "x"`. Writing then reading a plan gives back an equal CommPlan (lossless round trip).
//
// Reading is strict where a mistake could pass silently: unknown keys and repeated keys are
// errors, a `version` other than kPlanVersion is refused up front. Optional on input:
// collective.{tensor,output,dim,algorithm,split}, tensors.*.layout, chunks[].{dst_tensor,
// dst_box,deps} (dst_* default to tensor/box). Ranges and bounds are the verifier's job.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::plan {

// `source` names the input in error messages (a file name, or "<string>").
CommPlan parse_plan(std::string_view json_text, std::string_view source = "<string>");
// Refuses directories, devices and files over 1 GiB with a PlanParseError naming the path.
CommPlan load_plan(const std::filesystem::path& path);

// indent >= 0: top-level keys on their own lines, one rank and one chunk per line (golden
// files diff chunk by chunk); indent < 0: everything on one line.
std::string plan_to_json(const CommPlan& plan, int indent = 2);
void save_plan(const CommPlan& plan, const std::filesystem::path& path);

}  // namespace syncopate::plan
