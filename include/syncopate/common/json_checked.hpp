// Checked access to a parsed JSON document: the one reader of plans (plan layer) and simulator
// calibrations (sim layer).
//
// Every accessor knows the JSON path of the value it reads, and every failure throws the
// document's error class (PlanParseError or CalibrationError) as `<source>: <path>: expected
// <what>, got <what was there>`. Container values are described ("an array of 3 elements"),
// never dumped, so an error message stays short and describing a deeply nested value cannot
// recurse.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "syncopate/common/error.hpp"

namespace syncopate::checked_json {

// Which error class a document's failures throw.
enum class ErrorClass { plan_parse, calibration };

// Throws `message` as `errors`' class.
[[noreturn]] void raise(ErrorClass errors, std::string message);

// A value of the document together with where it sits.
class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path, std::string_view source,
           ErrorClass errors = ErrorClass::plan_parse)
      : value_(&value), path_(std::move(path)), source_(source), errors_(errors) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  std::string_view source() const { return source_; }
  ErrorClass errors() const { return errors_; }

  [[noreturn]] void fail(std::string_view expected) const;

  std::int64_t as_int64() const;
  // An integer that fits in an int (ids, ranks, counts): bigger values are refused here so
  // that no later layer narrows them silently.
  int as_int() const;
  std::string as_string() const;
  std::vector<std::int64_t> as_int64_list() const;
  std::vector<int> as_int_list() const;
  std::string_view as_string_view() const;

  // Each element (of an array node), with paths like `chunks[3]`.
  std::vector<JsonNode> elements() const;
  // The child under `key` (of an object node), with a path like `chunks[3].box`.
  JsonNode child(std::string_view key) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
  std::string_view source_;
  ErrorClass errors_;
};

// Reads the fields of one JSON object: each key may be taken once; finish() then refuses any
// key nobody asked for, so a misspelt optional field cannot pass silently.
class ObjectReader {
 public:
  // `what` names the object in messages ("chunk", "box"); `keys` lists every accepted key.
  ObjectReader(const JsonNode& node, std::string_view what, std::initializer_list<std::string_view> keys);

  JsonNode required(std::string_view key);
  std::optional<JsonNode> optional(std::string_view key);
  void finish() const;

 private:
  JsonNode node_;
  std::string what_;
  std::vector<std::string_view> keys_;
};

// Parses `text`, refusing an object that repeats a key (the JSON standard leaves it open and
// nlohmann keeps the last value, so `{"deps":[3],"deps":[]}` would silently drop a dep).
// Syntax errors propagate as nlohmann::json::exception; a repeated key throws `errors`' class
// naming its path.
nlohmann::json parse_without_duplicate_keys(std::string_view text, std::string_view source,
                                            ErrorClass errors = ErrorClass::plan_parse);

// parse_without_duplicate_keys, with a syntax error thrown as `errors`' class too:
// "<source>: JSON syntax at byte N: <nlohmann's message>".
nlohmann::json parse_json_source(std::string_view text, std::string_view source,
                                 ErrorClass errors = ErrorClass::plan_parse);

// `a.b`, or `a["odd key"]` when the key is not a plain identifier.
std::string path_join(std::string_view parent, std::string_view key);

// A short description of a value for "got ..." in error messages.
std::string describe(const nlohmann::json& value);

}  // namespace syncopate::checked_json
