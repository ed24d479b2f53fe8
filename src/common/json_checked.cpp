// Checked JSON accessors: type and range checks with the JSON path in every message.
#include "syncopate/common/json_checked.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::checked_json {

void raise(ErrorClass errors, std::string message) {
  if (errors == ErrorClass::calibration) throw CalibrationError(std::move(message));
  throw PlanParseError(std::move(message));
}

namespace {

using nlohmann::json;

constexpr std::size_t kMaxQuotedChars = 48;  // longer strings/numbers are cut in messages

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Quotes and escapes a string; invalid UTF-8 (impossible after parsing, possible in keys
// built elsewhere) is replaced rather than thrown on.
std::string json_quoted(std::string_view text) {
  std::string cut(text.substr(0, kMaxQuotedChars));
  std::string out = json(cut).dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxQuotedChars) out.insert(out.size() - 1, "...");
  return out;
}

const char* plural(std::size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// Follows the parser through the document: one frame per open object or array, holding the
// keys seen so far (objects) or the index of the current element (arrays).
class DuplicateKeyGuard {
 public:
  DuplicateKeyGuard(std::string_view source, ErrorClass errors) : source_(source), errors_(errors) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        enter_value();
        frames_.push_back({true, {}, {}, 0});
        break;
      case json::parse_event_t::array_start:
        enter_value();
        frames_.push_back({false, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.key).second)
          raise(errors_, fmt::format("{}: {}: expected each key once in an object, got it again", source_, path()));
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::value:
        enter_value();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    std::size_t next_index;
  };

  void enter_value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().next_index;
  }
  std::string path() const {
    std::string out;
    for (const Frame& f : frames_)
      out = f.object ? path_join(out, f.key) : fmt::format("{}[{}]", out, f.next_index - 1);
    return out;
  }

  std::string_view source_;
  ErrorClass errors_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_without_duplicate_keys(std::string_view text, std::string_view source, ErrorClass errors) {
  DuplicateKeyGuard guard(source, errors);
  return json::parse(text.begin(), text.end(), std::ref(guard));
}

json parse_json_source(std::string_view text, std::string_view source, ErrorClass errors) {
  try {
    return parse_without_duplicate_keys(text, source, errors);
  } catch (const json::parse_error& e) {
    raise(errors, fmt::format("{}: JSON syntax at byte {}: {}", source, e.byte, e.what()));
  }
}

std::string path_join(std::string_view parent, std::string_view key) {
  if (is_identifier(key)) return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
  return fmt::format("{}[{}]", parent, json_quoted(key));
}

std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return json_quoted(value.get_ref<const std::string&>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return value.dump();
    case json::value_t::array:
      return fmt::format("an array of {} {}", value.size(), plural(value.size(), "element", "elements"));
    case json::value_t::object:
      return fmt::format("an object with {} {}", value.size(), plural(value.size(), "key", "keys"));
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "a discarded value";
  }
  return "an unknown value";
}

void JsonNode::fail(std::string_view expected) const {
  raise(errors_, fmt::format("{}: {}: expected {}, got {}", source_, path_.empty() ? "(root)" : path_, expected,
                             describe(*value_)));
}

std::int64_t JsonNode::as_int64() const {
  constexpr std::string_view kWhat = "an integer";
  if (value_->is_number_unsigned()) {
    const auto v = value_->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail("an integer that fits in 64 bits");
    return static_cast<std::int64_t>(v);
  }
  if (value_->is_number_integer()) return value_->get<std::int64_t>();
  fail(kWhat);
}

int JsonNode::as_int() const {
  if (!value_->is_number_integer()) fail("an integer");
  const bool fits = value_->is_number_unsigned()
                        ? value_->get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                        : value_->get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                              value_->get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits)
    fail(fmt::format("an integer in [{}, {}]", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  return static_cast<int>(value_->get<std::int64_t>());
}

std::string_view JsonNode::as_string_view() const {
  if (!value_->is_string()) fail("a string");
  return value_->get_ref<const std::string&>();
}

std::string JsonNode::as_string() const { return std::string(as_string_view()); }

std::vector<JsonNode> JsonNode::elements() const {
  if (!value_->is_array()) fail("an array");
  std::vector<JsonNode> out;
  out.reserve(value_->size());  // bounded by the input text, not by a number in it
  for (std::size_t i = 0; i < value_->size(); ++i)
    out.emplace_back((*value_)[i], fmt::format("{}[{}]", path_, i), source_, errors_);
  return out;
}

// Integer lists (boxes, deps, streams) are most of a plan: read their elements in place and
// only build an element's path when it is wrong.
std::vector<std::int64_t> JsonNode::as_int64_list() const {
  if (!value_->is_array()) fail("an array");
  std::vector<std::int64_t> out;
  out.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) {
    const json& v = (*value_)[i];
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      out.push_back(static_cast<std::int64_t>(v.get<std::uint64_t>()));
    else
      out.push_back(JsonNode(v, fmt::format("{}[{}]", path_, i), source_, errors_).as_int64());
  }
  return out;
}

std::vector<int> JsonNode::as_int_list() const {
  if (!value_->is_array()) fail("an array");
  std::vector<int> out;
  out.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) {
    const json& v = (*value_)[i];
    if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
      out.push_back(static_cast<int>(v.get<std::uint64_t>()));
    else
      out.push_back(JsonNode(v, fmt::format("{}[{}]", path_, i), source_, errors_).as_int());
  }
  return out;
}

JsonNode JsonNode::child(std::string_view key) const {
  if (!value_->is_object()) fail("an object");
  const auto it = value_->find(key);
  if (it == value_->end()) throw InternalError(fmt::format("child '{}' of {} looked up without a check", key, path_));
  return JsonNode(*it, path_join(path_, key), source_, errors_);
}

ObjectReader::ObjectReader(const JsonNode& node, std::string_view what, std::initializer_list<std::string_view> keys)
    : node_(node), what_(what), keys_(keys) {
  if (!node_.value().is_object()) node_.fail(fmt::format("a {} object", what_));
}

std::optional<JsonNode> ObjectReader::optional(std::string_view key) {
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
    throw InternalError(fmt::format("key '{}' of a {} is not in its key list", key, what_));
  if (!node_.value().contains(key)) return std::nullopt;
  return node_.child(key);
}

JsonNode ObjectReader::required(std::string_view key) {
  if (auto found = optional(key)) return *found;
  raise(node_.errors(), fmt::format("{}: {}: expected the required key of a {}, got nothing (the key is missing)",
                                    node_.source(), path_join(node_.path(), key), what_));
}

void ObjectReader::finish() const {
  for (const auto& [key, value] : node_.value().items()) {
    if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
    std::string accepted;
    for (auto k : keys_) accepted += (accepted.empty() ? "" : ", ") + std::string(k);
    raise(node_.errors(), fmt::format("{}: {}: expected one of the {} keys ({}), got an unknown key", node_.source(),
                                      path_join(node_.path(), key), what_, accepted));
  }
}

}  // namespace syncopate::checked_json
