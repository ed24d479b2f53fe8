// pretty_json(): indent JSON, keeping arrays of scalars on one line (see json_text.hpp).
#include "syncopate/common/json_text.hpp"

#include <nlohmann/json.hpp>

namespace syncopate {
namespace {

// Arrays of scalars, and small objects of scalars (a slot, a grid), print on one line.
bool is_flat(const nlohmann::json& value) {
  if (!value.is_structured()) return false;
  if (value.is_object() && value.size() > 8) return false;
  for (const auto& item : value)
    if (item.is_structured()) return false;
  return true;
}

void write(const nlohmann::json& value, int indent, int depth, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent * (depth + 1)), ' ');
  const std::string close_pad(static_cast<std::size_t>(indent * depth), ' ');
  if (value.is_object() && !value.empty() && !is_flat(value)) {
    out += "{\n";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + nlohmann::json(key).dump() + ": ";
      write(item, indent, depth + 1, out);
    }
    out += "\n" + close_pad + "}";
  } else if (value.is_array() && !value.empty() && !is_flat(value)) {
    out += "[\n";
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ",\n";
      out += pad;
      write(value[i], indent, depth + 1, out);
    }
    out += "\n" + close_pad + "]";
  } else if (value.is_array()) {
    out += "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i > 0 ? ", " : "") + value[i].dump();
    out += "]";
  } else if (value.is_object()) {
    out += "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      out += (first ? "" : ", ") + nlohmann::json(key).dump() + ": " + item.dump();
      first = false;
    }
    out += "}";
  } else {
    out += value.dump();
  }
}

}  // namespace

std::string pretty_json(std::string_view json_text, int indent) {
  std::string out;
  write(nlohmann::json::parse(json_text), indent, 0, out);
  out += "\n";
  return out;
}

}  // namespace syncopate
