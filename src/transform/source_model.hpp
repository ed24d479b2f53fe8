// Internal: a Python module seen as logical lines, and the kernel function inside it.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "syncopate/transform/tokenizer.hpp"

namespace syncopate::transform::detail {

// One logical line (a simple statement or a compound statement's header), without comments.
struct LogicalLine {
  std::vector<std::size_t> code;  // indices of its code tokens (no comment/NL/INDENT/DEDENT)
  std::size_t newline = 0;        // index of its NEWLINE token
  int line = 0, end_line = 0;     // first and last physical line
  int col = 0;                    // indentation column of its first token
};

struct Module {
  std::string_view source;
  std::string_view filename;
  std::vector<Token> tokens;
  std::vector<LogicalLine> lines;

  const Token& tok(const LogicalLine& l, std::size_t i) const { return tokens[l.code[i]]; }
  const Token& first(const LogicalLine& l) const { return tokens[l.code.front()]; }
};

Module read_module(std::string_view source, std::string_view filename);

struct Param {
  std::string name;
  std::size_t token = 0;  // its NAME token
  bool has_default = false;
  bool starred = false;  // *args, **kwargs, or a bare '*'
};

// A function defined in the module: its signature and body.
struct Function {
  std::string name;
  std::size_t def_line = 0;    // index into Module::lines
  std::size_t open_paren = 0;  // token indices of the signature's brackets
  std::size_t close_paren = 0;
  std::vector<Param> params;
  std::size_t body_begin = 0, body_end = 0;  // logical line indices [begin, end)
};

struct Kernel : Function {
  int body_first_line = 0, body_last_line = 0;
};

// The parameters between a signature's brackets (token indices).
std::vector<Param> read_params(const Module& m, std::size_t open, std::size_t close);

// The function whose `def` is logical line `def_line`; nullopt when its signature cannot be read.
std::optional<Function> read_function(const Module& m, std::size_t def_line);

// Finds the `@triton.jit` (or `@jit`) function `name`. Throws TransformError when there is none,
// when the name is defined twice, or when the function is not jitted.
Kernel find_kernel(const Module& m, std::string_view name);

// Names a logical line binds: assignment targets, for/with targets, imports, def/class names,
// walrus targets. Over-approximates (x[i] = v binds x and i): it only checks that names exist.
std::set<std::string> bound_names(const Module& m, const LogicalLine& line);

// Names bound at module level (col 1) and Python builtins a kernel may use.
std::set<std::string> module_names(const Module& m);

bool is_keyword(std::string_view word);

// Index of the first logical line starting at or after physical line `line`, or lines.size().
std::size_t line_at_or_after(const Module& m, int line);

}  // namespace syncopate::transform::detail
