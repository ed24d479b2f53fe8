// Logical lines, the kernel function and the names a statement binds.
#include "source_model.hpp"

#include <algorithm>
#include <array>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

constexpr std::array<std::string_view, 35> kKeywords{
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};

constexpr std::array<std::string_view, 24> kBuiltins{
    "range", "len",        "min", "max",       "abs",   "int", "float", "bool", "str",    "tuple", "list", "dict",
    "print", "isinstance", "zip", "enumerate", "round", "sum", "any",   "all",  "divmod", "pow",   "type", "getattr"};

bool preceded_by_dot(const Module& m, const LogicalLine& l, std::size_t i) {
  return i > 0 && m.tok(l, i - 1).is_op(".");
}

// Plain names of tokens [from, to) of `l`, skipping attributes and keywords.
void collect_names(const Module& m, const LogicalLine& l, std::size_t from, std::size_t to,
                   std::set<std::string>& out) {
  for (std::size_t i = from; i < to && i < l.code.size(); ++i) {
    const Token& t = m.tok(l, i);
    if (t.kind == TokenKind::name && !is_keyword(t.text) && !preceded_by_dot(m, l, i)) out.emplace(t.text);
  }
}

void import_names(const Module& m, const LogicalLine& l, std::set<std::string>& out) {
  const bool from_import = m.first(l).is_name("from");
  std::size_t i = 0;
  if (from_import) {
    while (i < l.code.size() && !m.tok(l, i).is_name("import")) ++i;
  }
  ++i;  // past `import`
  // Each item: dotted.name [as alias]; `import a.b` binds `a`, `from x import a` binds `a`.
  while (i < l.code.size()) {
    if (m.tok(l, i).is_op("(") || m.tok(l, i).is_op(")") || m.tok(l, i).is_op(",")) {
      ++i;
      continue;
    }
    std::string first(m.tok(l, i).text);
    std::size_t j = i + 1;
    while (j < l.code.size() && !m.tok(l, j).is_op(",") && !m.tok(l, j).is_name("as") && !m.tok(l, j).is_op(")")) ++j;
    if (j < l.code.size() && m.tok(l, j).is_name("as") && j + 1 < l.code.size()) {
      out.emplace(m.tok(l, j + 1).text);
      j += 2;
    } else if (first != "*") {
      out.emplace(first);
    }
    i = j;
  }
}

}  // namespace

bool is_keyword(std::string_view word) {
  return std::find(kKeywords.begin(), kKeywords.end(), word) != kKeywords.end();
}

Module read_module(std::string_view source, std::string_view filename) {
  Module m{source, filename, tokenize(source, filename), {}};
  LogicalLine cur;
  for (std::size_t i = 0; i < m.tokens.size(); ++i) {
    const Token& t = m.tokens[i];
    switch (t.kind) {
      case TokenKind::comment:
      case TokenKind::nl:
      case TokenKind::indent:
      case TokenKind::dedent:
      case TokenKind::end:
        break;
      case TokenKind::newline:
        if (!cur.code.empty()) {
          cur.newline = i;
          cur.end_line = m.tokens[cur.code.back()].end_line;
          m.lines.push_back(std::move(cur));
        }
        cur = {};
        break;
      default:
        if (cur.code.empty()) {
          cur.line = t.line;
          cur.col = t.col;
        }
        cur.code.push_back(i);
    }
  }
  return m;
}

std::size_t line_at_or_after(const Module& m, int line) {
  auto it =
      std::lower_bound(m.lines.begin(), m.lines.end(), line, [](const LogicalLine& l, int v) { return l.line < v; });
  return static_cast<std::size_t>(it - m.lines.begin());
}

namespace {

bool is_jit_decorator(const Module& m, const LogicalLine& l) {
  // @triton.jit, @triton.jit(...), @jit, @jit(...)
  if (l.code.size() < 2 || !m.tok(l, 0).is_op("@")) return false;
  if (m.tok(l, 1).is_name("jit")) return true;
  return l.code.size() >= 4 && m.tok(l, 1).is_name("triton") && m.tok(l, 2).is_op(".") && m.tok(l, 3).is_name("jit");
}

}  // namespace

std::vector<Param> read_params(const Module& m, std::size_t open, std::size_t close) {
  std::vector<Param> params;
  const int depth = m.tokens[open].depth + 1;
  bool at_item_start = true;
  bool item_has_name = false;
  for (std::size_t i = open + 1; i < close; ++i) {
    const Token& t = m.tokens[i];
    if (t.kind == TokenKind::comment || t.kind == TokenKind::nl) continue;
    if (t.depth != depth) continue;  // inside an annotation's brackets
    if (t.is_op(",")) {
      at_item_start = true;
      item_has_name = false;
      continue;
    }
    if (at_item_start && (t.is_op("*") || t.is_op("**"))) {
      params.push_back({std::string(t.text), i, false, true});
      at_item_start = false;
      item_has_name = false;
      continue;
    }
    if (t.is_op("/") && at_item_start) {
      at_item_start = false;
      item_has_name = true;
      continue;
    }
    if (t.kind == TokenKind::name && !item_has_name) {
      if (!params.empty() && params.back().starred && !at_item_start && params.back().name.size() <= 2)
        params.back().name += std::string(t.text);  // *args -> "*args"
      else
        params.push_back({std::string(t.text), i, false, false});
      item_has_name = true;
      at_item_start = false;
      continue;
    }
    if (t.is_op("=") && !params.empty()) params.back().has_default = true;
    at_item_start = false;
  }
  return params;
}

std::optional<Function> read_function(const Module& m, std::size_t def_line) {
  const LogicalLine& def = m.lines[def_line];
  // def NAME ( params ) [-> ann] :
  if (def.code.size() < 4 || !m.first(def).is_name("def") || !m.tok(def, 2).is_op("(")) return std::nullopt;
  Function f;
  f.name = std::string(m.tok(def, 1).text);
  f.def_line = def_line;
  f.open_paren = def.code[2];
  for (std::size_t i = 3; i < def.code.size(); ++i) {
    const Token& t = m.tok(def, i);
    if (t.is_op(")") && t.depth == m.tokens[f.open_paren].depth) {
      f.close_paren = def.code[i];
      break;
    }
  }
  if (f.close_paren == 0) return std::nullopt;
  f.params = read_params(m, f.open_paren, f.close_paren);
  f.body_begin = def_line + 1;
  f.body_end = f.body_begin;
  while (f.body_end < m.lines.size() && m.lines[f.body_end].col > def.col) ++f.body_end;
  return f;
}

Kernel find_kernel(const Module& m, std::string_view name) {
  std::vector<std::size_t> defs;
  std::vector<std::string> jitted;
  for (std::size_t li = 0; li < m.lines.size(); ++li) {
    const LogicalLine& l = m.lines[li];
    if (l.code.size() < 2 || !m.first(l).is_name("def")) continue;
    bool jit = false;
    for (std::size_t d = li; d > 0 && m.first(m.lines[d - 1]).is_op("@"); --d)
      jit = jit || is_jit_decorator(m, m.lines[d - 1]);
    if (jit) jitted.emplace_back(m.tok(l, 1).text);
    if (m.tok(l, 1).text == name) defs.push_back(li);
  }
  const auto where = [&](const LogicalLine& l) {
    return fmt::format("{}:{}:{}: kernel '{}'", m.filename, l.line, l.col, name);
  };
  if (defs.empty()) {
    std::string found;
    for (const auto& j : jitted) found += (found.empty() ? "" : ", ") + j;
    throw TransformError(
        fmt::format("{}:1:1: kernel '{}': no function of that name in the file (@triton.jit functions: {})", m.filename,
                    name, found.empty() ? "none" : found));
  }
  if (defs.size() > 1)
    throw TransformError(fmt::format("{}: the name is defined twice (also at line {}); rename one",
                                     where(m.lines[defs[1]]), m.lines[defs[0]].line));
  const LogicalLine& def = m.lines[defs[0]];
  if (std::find(jitted.begin(), jitted.end(), name) == jitted.end())
    throw TransformError(fmt::format("{}: is not decorated with @triton.jit", where(def)));
  const auto f = read_function(m, defs[0]);
  if (!f) throw TransformError(fmt::format("{}: cannot read the signature", where(def)));
  Kernel k;
  static_cast<Function&>(k) = *f;
  if (k.body_end == k.body_begin || m.lines[k.body_begin].line == def.end_line)
    throw TransformError(fmt::format("{}: the body must be an indented block", where(def)));
  k.body_first_line = def.end_line + 1;
  k.body_last_line = m.lines[k.body_end - 1].end_line;
  return k;
}

std::set<std::string> bound_names(const Module& m, const LogicalLine& l) {
  std::set<std::string> out;
  const Token& head = m.first(l);
  if (head.is_name("import") || head.is_name("from")) {
    import_names(m, l, out);
    return out;
  }
  if ((head.is_name("def") || head.is_name("class")) && l.code.size() > 1) {
    out.emplace(m.tok(l, 1).text);
    return out;
  }
  const int depth = head.depth;
  if (head.is_name("for") || (head.is_name("async") && l.code.size() > 1 && m.tok(l, 1).is_name("for"))) {
    std::size_t i = head.is_name("for") ? 1 : 2;
    std::size_t j = i;
    while (j < l.code.size() && !(m.tok(l, j).is_name("in") && m.tok(l, j).depth == depth)) ++j;
    collect_names(m, l, i, j, out);
  }
  for (std::size_t i = 0; i < l.code.size(); ++i) {
    const Token& t = m.tok(l, i);
    if (t.is_name("as") && i + 1 < l.code.size() && m.tok(l, i + 1).kind == TokenKind::name)
      out.emplace(m.tok(l, i + 1).text);
    if (t.is_op(":=") && i > 0) out.emplace(m.tok(l, i - 1).text);
  }
  // Targets: everything before the last top-level '=' (chained a = b = c binds a and b), or
  // the first name of an augmented assignment.
  std::size_t last_eq = l.code.size();
  for (std::size_t i = 0; i < l.code.size(); ++i) {
    const Token& t = m.tok(l, i);
    if (t.depth != depth || t.kind != TokenKind::op) continue;
    if (t.text == "=") last_eq = i;
    if (t.text.size() >= 2 && t.text.back() == '=' && t.text != "==" && t.text != "!=" && t.text != "<=" &&
        t.text != ">=" && t.text != "=" && i > 0)
      collect_names(m, l, 0, 1, out);
  }
  if (last_eq < l.code.size()) collect_names(m, l, 0, last_eq, out);
  return out;
}

std::set<std::string> module_names(const Module& m) {
  std::set<std::string> out(kBuiltins.begin(), kBuiltins.end());
  for (const auto& l : m.lines) {
    if (l.col != 1) continue;
    auto names = bound_names(m, l);
    out.insert(names.begin(), names.end());
  }
  return out;
}

}  // namespace syncopate::transform::detail
