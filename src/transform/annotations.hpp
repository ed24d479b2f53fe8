// Internal: reading `# @sy.<kind>(args)` comments into checked annotation records.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "source_model.hpp"

namespace syncopate::transform::detail {

enum class AnnotationKind { tile, end, consume, produce, consume_block };

struct AnnotationArg {
  std::string key;    // empty for a positional argument
  std::string value;  // source text of the value
  int col = 0;        // column of the value in the file
  bool is_name = false;
  bool is_int = false;
  bool is_string = false;
};

struct Annotation {
  AnnotationKind kind = AnnotationKind::tile;
  std::string text;  // "@sy.consume(a_ptr, m=pid_m)", for messages
  std::size_t token = 0;
  int line = 0, col = 0;
  std::vector<AnnotationArg> args;

  const AnnotationArg* arg(std::string_view key) const;
  const AnnotationArg* positional() const;
  [[noreturn]] void fail(std::string_view filename, const std::string& rule, int col = 0) const;
};

// The text after '#' starts with "@sy" (spaces allowed before it)?
bool looks_like_annotation(std::string_view comment);

// Parses and checks the shape of one annotation comment (token `index` of `m`): known kind,
// allowed keywords, required arguments, names where names are needed. Throws TransformError.
Annotation parse_annotation(const Module& m, std::size_t index);

}  // namespace syncopate::transform::detail
