// Pretty-printing for the JSON dumps of the lowering and the schedule: objects and arrays of objects are
// indented as usual, but arrays holding only numbers, strings, booleans or nulls, and small
// objects of such values, stay on one line, so a tile table or a tile order of thousands of
// entries stays readable and diffable.
#pragma once

#include <string>
#include <string_view>

namespace syncopate {

// `json_text` must be valid JSON (the callers pass nlohmann output). Ends with a newline.
std::string pretty_json(std::string_view json_text, int indent = 2);

}  // namespace syncopate
