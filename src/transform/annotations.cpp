// Reading `# @sy.` annotation comments. The argument list is tokenized with the same Python
// tokenizer as the kernel, so strings and nested brackets in `index=` expressions are safe.
#include "annotations.hpp"

#include <array>
#include <cctype>
#include <utility>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

struct KindSpec {
  AnnotationKind kind;
  std::string_view name;
  bool positional;                           // takes one positional kernel parameter
  std::array<std::string_view, 6> keywords;  // allowed keywords ("" pads)
  std::array<std::string_view, 2> required;  // required keywords ("" pads)
};

// The one table of annotation kinds; parsing and the "known kinds" message both read it.
constexpr std::array<KindSpec, 5> kKinds{{
    {AnnotationKind::tile, "tile", false, {"index", "m", "n", "", "", ""}, {"index", "m"}},
    {AnnotationKind::end, "end", false, {"", "", "", "", "", ""}, {"", ""}},
    {AnnotationKind::consume, "consume", true, {"m", "n", "tensor", "m_dim", "n_dim", "m_local_shard"}, {"", ""}},
    {AnnotationKind::produce, "produce", true, {"m", "n", "tensor", "m_dim", "n_dim", "m_local_shard"}, {"", ""}},
    // A wait inside the loop over a tensor's blocks (attention's K/V loop): block_loops.cpp.
    {AnnotationKind::consume_block, "consume_block", true, {"block", "n", "tensor", "dim", "order", ""}, {"block", ""}},
}};

std::string known_kinds() {
  std::string out;
  for (const auto& k : kKinds) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view word) {
  for (auto w : list)
    if (!w.empty() && w == word) return true;
  return false;
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

const AnnotationArg* Annotation::arg(std::string_view key) const {
  for (const auto& a : args)
    if (a.key == key) return &a;
  return nullptr;
}

const AnnotationArg* Annotation::positional() const {
  for (const auto& a : args)
    if (a.key.empty()) return &a;
  return nullptr;
}

void Annotation::fail(std::string_view filename, const std::string& rule, int at_col) const {
  throw TransformError(fmt::format("{}:{}:{}: {}: {}", filename, line, at_col > 0 ? at_col : col, text, rule));
}

bool looks_like_annotation(std::string_view comment) {
  std::size_t i = 1;  // past '#'
  while (i < comment.size() && (comment[i] == ' ' || comment[i] == '\t')) ++i;
  return comment.substr(i, 3) == "@sy";
}

Annotation parse_annotation(const Module& m, std::size_t index) {
  const Token& c = m.tokens[index];
  std::size_t i = 1;
  while (i < c.text.size() && (c.text[i] == ' ' || c.text[i] == '\t')) ++i;
  Annotation a;
  a.token = index;
  a.line = c.line;
  a.col = c.col;
  a.text = std::string(trim_right(c.text.substr(i)));

  std::size_t p = i + 3;  // past "@sy"
  if (p >= c.text.size() || c.text[p] != '.')
    a.fail(m.filename, "malformed annotation: expected '@sy.<kind>' with kind one of " + known_kinds());
  ++p;
  const std::size_t kind_begin = p;
  while (p < c.text.size() && (std::isalnum(static_cast<unsigned char>(c.text[p])) || c.text[p] == '_')) ++p;
  const std::string_view kind_name = c.text.substr(kind_begin, p - kind_begin);
  const KindSpec* spec = nullptr;
  for (const auto& k : kKinds)
    if (k.name == kind_name) spec = &k;
  if (spec == nullptr)
    a.fail(m.filename, fmt::format("unknown annotation '@sy.{}' (known: {})", kind_name, known_kinds()));
  a.kind = spec->kind;

  const std::string_view rest = trim_right(c.text.substr(p));
  const int rest_col = c.col + static_cast<int>(p);
  if (!rest.empty()) {
    if (rest.front() != '(')
      a.fail(m.filename, fmt::format("malformed annotation: expected '(' after '@sy.{}'", kind_name), rest_col);
    std::vector<Token> toks;
    try {
      toks = tokenize(rest, m.filename);
    } catch (const TransformError& e) {
      const std::string what = e.what();
      const auto at = what.find("python syntax: ");
      a.fail(m.filename, "malformed annotation: " + (at == std::string::npos ? what : what.substr(at + 15)));
    }
    // toks: '(' args ')' NEWLINE END; split the args on commas at depth 1.
    std::size_t close = 0;
    for (std::size_t t = 1; t < toks.size(); ++t)
      if (toks[t].is_op(")") && toks[t].depth == 0) {
        close = t;
        break;
      }
    for (std::size_t t = close + 1; t < toks.size(); ++t)
      if (toks[t].kind != TokenKind::newline && toks[t].kind != TokenKind::end)
        a.fail(m.filename, "malformed annotation: unexpected text after ')'",
               rest_col + static_cast<int>(toks[t].offset));
    std::size_t start = 1;
    for (std::size_t t = 1; t <= close; ++t) {
      if (!(t == close || (toks[t].is_op(",") && toks[t].depth == 1))) continue;
      if (t == start) {
        if (t == close && a.args.empty() && t == 1) break;  // "()"
        if (t == close) break;                              // trailing comma
        a.fail(m.filename, "malformed annotation: empty argument", rest_col + static_cast<int>(toks[t].offset));
      }
      AnnotationArg arg;
      std::size_t v = start;
      if (t - start >= 2 && toks[start].kind == TokenKind::name && toks[start + 1].is_op("=")) {
        arg.key = std::string(toks[start].text);
        v = start + 2;
        if (v == t)
          a.fail(m.filename, fmt::format("malformed annotation: '{}=' has no value", arg.key),
                 rest_col + static_cast<int>(toks[start].offset));
      }
      const std::size_t vb = toks[v].offset;
      const std::size_t ve = toks[t - 1].offset + toks[t - 1].text.size();
      arg.value = std::string(rest.substr(vb, ve - vb));
      arg.col = rest_col + static_cast<int>(vb);
      arg.is_name = t - v == 1 && toks[v].kind == TokenKind::name && !is_keyword(toks[v].text);
      arg.is_int = t - v == 1 && toks[v].kind == TokenKind::number &&
                   arg.value.find_first_not_of("0123456789") == std::string::npos;
      arg.is_string = t - v == 1 && toks[v].kind == TokenKind::string;
      a.args.push_back(std::move(arg));
      start = t + 1;
    }
  }

  // Shape rules of this kind.
  int positional = 0;
  for (const auto& arg : a.args) {
    if (arg.key.empty()) {
      ++positional;
      if (!spec->positional || positional > 1)
        a.fail(m.filename,
               fmt::format("'@sy.{}' takes {} positional argument{}", spec->name, spec->positional ? "one" : "no",
                           spec->positional ? "" : "s"),
               arg.col);
      if (!arg.is_name) a.fail(m.filename, fmt::format("'{}' must name a kernel parameter", arg.value), arg.col);
      continue;
    }
    if (!contains(spec->keywords, arg.key))
      a.fail(m.filename, fmt::format("'@sy.{}' has no argument '{}'", spec->name, arg.key), arg.col);
    for (const auto& other : a.args)
      if (&other != &arg && other.key == arg.key)
        a.fail(m.filename, fmt::format("argument '{}' given twice", arg.key), other.col);
    if ((arg.key == "m" || arg.key == "n") && !arg.is_name)
      a.fail(m.filename, fmt::format("'{}=' must be a variable name, got '{}'", arg.key, arg.value), arg.col);
    if ((arg.key == "m_dim" || arg.key == "n_dim" || arg.key == "dim") && !arg.is_int)
      a.fail(m.filename, fmt::format("'{}=' must be a non-negative integer, got '{}'", arg.key, arg.value), arg.col);
    if (arg.key == "m_local_shard" && arg.value != "True" && arg.value != "False" && arg.value != "1" &&
        arg.value != "0")
      a.fail(m.filename, fmt::format("'m_local_shard=' must be True, False, 1 or 0, got '{}'", arg.value), arg.col);
    if (arg.key == "order" && arg.value != "arrival" && arg.value != "source" && arg.value != "\"arrival\"" &&
        arg.value != "\"source\"" && arg.value != "'arrival'" && arg.value != "'source'")
      a.fail(m.filename, fmt::format("'order=' must be arrival or source, got '{}'", arg.value), arg.col);
    if (arg.key == "tensor" && !arg.is_name && !arg.is_string)
      a.fail(m.filename, fmt::format("'tensor=' must be a name or a string, got '{}'", arg.value), arg.col);
  }
  if (spec->positional && positional == 0)
    a.fail(m.filename, fmt::format("'@sy.{}' needs the kernel parameter it reads or writes first", spec->name), a.col);
  for (auto req : spec->required)
    if (!req.empty() && a.arg(req) == nullptr)
      a.fail(m.filename, fmt::format("'@sy.{}' needs '{}='", spec->name, req), a.col);
  return a;
}

}  // namespace syncopate::transform::detail
