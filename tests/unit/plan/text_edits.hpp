// Edits of the hand-written import inputs (tests/unit/plan/import_good/) for the refusal tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace syncopate::plan::test_edits {

using Edit = std::function<void(std::string&)>;

inline std::string read_good(const std::string& format, const std::string& file) {
  const auto path = std::filesystem::path(SYNCOPATE_SOURCE_DIR) / "tests/unit/plan/import_good" / format / file;
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Replaces the first `from` (which must be there: a stale edit would test nothing).
inline Edit replace(std::string from, std::string to) {
  return [from = std::move(from), to = std::move(to)](std::string& text) {
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << "the edit does not apply: " << from;
    text.replace(at, from.size(), to);
  };
}

// Parses the text as JSON, lets `fn` change it, writes it back.
inline Edit edit_json(std::function<void(nlohmann::json&)> fn) {
  return [fn = std::move(fn)](std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    fn(j);
    text = j.dump(1);
  };
}

}  // namespace syncopate::plan::test_edits
