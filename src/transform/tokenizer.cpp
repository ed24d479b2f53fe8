// Python tokenizer: lexical rules of the Python 3.12 reference, enough to rewrite kernels.
#include "syncopate/transform/tokenizer.hpp"

#include <array>
#include <cctype>
#include <utility>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform {

std::string_view to_string(TokenKind kind) {
  switch (kind) {
    case TokenKind::name:
      return "NAME";
    case TokenKind::number:
      return "NUMBER";
    case TokenKind::string:
      return "STRING";
    case TokenKind::op:
      return "OP";
    case TokenKind::comment:
      return "COMMENT";
    case TokenKind::newline:
      return "NEWLINE";
    case TokenKind::nl:
      return "NL";
    case TokenKind::indent:
      return "INDENT";
    case TokenKind::dedent:
      return "DEDENT";
    case TokenKind::end:
      return "ENDMARKER";
  }
  return "?";
}

namespace {

bool is_ident_start(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalpha(u) || c == '_' || u >= 0x80;
}
bool is_ident_char(char c) { return is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Lower-cased string prefixes Python accepts (t-strings of 3.14 included).
bool is_string_prefix(std::string_view word) {
  if (word.empty() || word.size() > 2) return false;
  std::string lower;
  for (char c : word) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr std::array<std::string_view, 11> kPrefixes{"r",  "u",  "b",  "f",  "t", "br",
                                                              "rb", "fr", "rf", "tr", "rt"};
  for (auto p : kPrefixes)
    if (lower == p) return true;
  return false;
}

bool prefix_has(std::string_view prefix, char lower_letter) {
  for (char c : prefix)
    if (std::tolower(static_cast<unsigned char>(c)) == lower_letter) return true;
  return false;
}

constexpr std::array<std::string_view, 5> kOps3{"**=", "//=", ">>=", "<<=", "..."};
constexpr std::array<std::string_view, 19> kOps2{
    "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", ":="};
constexpr std::string_view kOps1 = "+-*/%@&|^~<>()[]{},:;.=!";

struct OpenBracket {
  char ch;
  int line, col;
};

class Lexer {
 public:
  Lexer(std::string_view src, std::string_view file) : src_(src), file_(file) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (at_line_start_) {
        if (!brackets_.empty()) {
          at_line_start_ = false;  // a continuation line: its indentation means nothing
        } else {
          handle_indentation();
          if (pos_ >= src_.size()) break;
        }
      }
      const char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++pos_;
      } else if (c == '\n' || c == '\r') {
        end_physical_line();
      } else if (c == '\\') {
        continuation();
      } else if (c == '#') {
        std::size_t end = pos_;
        while (end < src_.size() && src_[end] != '\n' && src_[end] != '\r') ++end;
        emit(TokenKind::comment, pos_, end, line_);
      } else if (is_ident_start(c)) {
        name_or_string();
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))) {
        number();
      } else if (c == '"' || c == '\'') {
        string_literal(pos_, pos_);
      } else {
        op();
      }
    }
    if (!brackets_.empty()) {
      const auto& b = brackets_.back();
      fail(b.line, b.col, fmt::format("'{}' was never closed", b.ch));
    }
    if (logical_has_code_) emit(TokenKind::newline, pos_, pos_, line_);
    while (indents_.size() > 1) {
      indents_.pop_back();
      emit(TokenKind::dedent, pos_, pos_, line_);
    }
    emit(TokenKind::end, pos_, pos_, line_);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(int line, int col, const std::string& rule) const {
    throw TransformError(fmt::format("{}:{}:{}: python syntax: {}", file_, line, col, rule));
  }
  int col_of(std::size_t offset) const { return static_cast<int>(offset - line_start_) + 1; }

  void emit(TokenKind kind, std::size_t begin, std::size_t end, int start_line, int start_col = 0) {
    Token t;
    t.kind = kind;
    t.text = src_.substr(begin, end - begin);
    t.offset = begin;
    t.line = start_line;
    t.col = start_col > 0 ? start_col : col_of(begin);
    t.end_line = line_;
    t.depth = static_cast<int>(brackets_.size());
    t.first_on_line = !physical_has_token_ && kind != TokenKind::indent && kind != TokenKind::dedent;
    if (kind != TokenKind::indent && kind != TokenKind::dedent && kind != TokenKind::nl && kind != TokenKind::newline)
      physical_has_token_ = true;
    if (kind != TokenKind::comment && kind != TokenKind::nl && kind != TokenKind::newline &&
        kind != TokenKind::indent && kind != TokenKind::dedent && kind != TokenKind::end)
      logical_has_code_ = true;
    pos_ = end;
    out_.push_back(t);
  }

  // Python compares indentation twice, with tabs to multiples of 8 and with tabs as 1 column;
  // when the two comparisons disagree the file depends on the tab size: a TabError.
  void handle_indentation() {
    at_line_start_ = false;
    int width8 = 0, width1 = 0;
    std::size_t p = pos_;
    for (; p < src_.size(); ++p) {
      const char c = src_[p];
      if (c == ' ') {
        ++width8;
        ++width1;
      } else if (c == '\t') {
        width8 = (width8 / 8 + 1) * 8;
        ++width1;
      } else if (c == '\f') {
        width8 = width1 = 0;
      } else {
        break;
      }
    }
    pos_ = p;
    if (p >= src_.size() || src_[p] == '\n' || src_[p] == '\r' || src_[p] == '#') return;
    const int col = col_of(p);
    const auto [top8, top1] = indents_.back();
    if (width8 == top8) {
      if (width1 != top1) fail(line_, col, "inconsistent use of tabs and spaces in indentation");
    } else if (width8 > top8) {
      if (width1 <= top1) fail(line_, col, "inconsistent use of tabs and spaces in indentation");
      indents_.emplace_back(width8, width1);
      emit(TokenKind::indent, line_start_, p, line_, 1);
    } else {
      while (indents_.size() > 1 && width8 < indents_.back().first) {
        indents_.pop_back();
        emit(TokenKind::dedent, p, p, line_);
      }
      if (width8 != indents_.back().first) fail(line_, col, "unindent does not match any outer indentation level");
      if (width1 != indents_.back().second) fail(line_, col, "inconsistent use of tabs and spaces in indentation");
    }
  }

  std::size_t newline_length(std::size_t p) const {
    if (src_[p] == '\r' && p + 1 < src_.size() && src_[p + 1] == '\n') return 2;
    return 1;
  }
  void next_line(std::size_t after_newline) {
    ++line_;
    line_start_ = after_newline;
    physical_has_token_ = false;
  }

  void end_physical_line() {
    const std::size_t len = newline_length(pos_);
    const bool logical_end = brackets_.empty() && logical_has_code_;
    const int line = line_;
    Token t;
    t.kind = logical_end ? TokenKind::newline : TokenKind::nl;
    t.text = src_.substr(pos_, len);
    t.offset = pos_;
    t.line = t.end_line = line;
    t.col = col_of(pos_);
    t.depth = static_cast<int>(brackets_.size());
    t.first_on_line = !physical_has_token_;
    out_.push_back(t);
    if (logical_end) logical_has_code_ = false;
    pos_ += len;
    next_line(pos_);
    at_line_start_ = true;
  }

  void continuation() {
    const std::size_t p = pos_ + 1;
    if (p >= src_.size()) fail(line_, col_of(pos_), "unexpected end of file after line continuation");
    if (src_[p] != '\n' && src_[p] != '\r')
      fail(line_, col_of(pos_), "unexpected character after line continuation character");
    pos_ = p + newline_length(p);
    next_line(pos_);
  }

  void name_or_string() {
    std::size_t end = pos_;
    while (end < src_.size() && is_ident_char(src_[end])) ++end;
    if (end < src_.size() && (src_[end] == '"' || src_[end] == '\'') &&
        is_string_prefix(src_.substr(pos_, end - pos_))) {
      string_literal(pos_, end);
      return;
    }
    emit(TokenKind::name, pos_, end, line_);
  }

  void number() {
    std::size_t end = pos_;
    const bool radix = src_[end] == '0' && end + 1 < src_.size() &&
                       std::string_view("xXoObB").find(src_[end + 1]) != std::string_view::npos;
    while (end < src_.size()) {
      const char c = src_[end];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (c == '.' && !radix)) {
        ++end;
      } else if ((c == '+' || c == '-') && !radix && (src_[end - 1] == 'e' || src_[end - 1] == 'E')) {
        ++end;
      } else {
        break;
      }
    }
    emit(TokenKind::number, pos_, end, line_);
  }

  // Scans a string whose prefix starts at `begin` and whose opening quote is at `quote`;
  // returns the offset after the closing quote. Emits a token only for top-level strings.
  std::size_t scan_string(std::size_t begin, std::size_t quote, int start_line, int start_col) {
    const std::string_view prefix = src_.substr(begin, quote - begin);
    const bool formatted = prefix_has(prefix, 'f') || prefix_has(prefix, 't');
    const char q = src_[quote];
    const bool triple = quote + 2 < src_.size() && src_[quote + 1] == q && src_[quote + 2] == q;
    std::size_t p = quote + (triple ? 3 : 1);
    const auto unterminated = [&] {
      fail(start_line, start_col, triple ? "unterminated triple-quoted string literal" : "unterminated string literal");
    };
    for (;;) {
      if (p >= src_.size()) unterminated();
      const char c = src_[p];
      if (c == '\\') {
        if (p + 1 >= src_.size()) unterminated();
        if (src_[p + 1] == '\n' || src_[p + 1] == '\r') {
          p += 1 + newline_length(p + 1);
          next_line(p);
        } else if (formatted && (src_[p + 1] == '{' || src_[p + 1] == '}')) {
          ++p;  // a backslash does not escape an f-string brace (rf'\{{' is '\' then '{{')
        } else {
          p += 2;  // an escape; in a raw string the pair stays as written but the quote
                   // after a backslash still does not end the string
        }
      } else if (c == '\n' || c == '\r') {
        if (!triple) unterminated();
        p += newline_length(p);
        next_line(p);
      } else if (c == q) {
        if (!triple) return p + 1;
        if (p + 2 < src_.size() && src_[p + 1] == q && src_[p + 2] == q) return p + 3;
        ++p;
      } else if (formatted && c == '{') {
        if (p + 1 < src_.size() && src_[p + 1] == '{') {
          p += 2;
        } else {
          p = scan_replacement_field(p + 1, start_line, start_col, triple);
        }
      } else {
        ++p;
      }
    }
  }

  // An f-string replacement field `{expr!r:spec}`: nested brackets and strings (Python 3.12
  // lets them reuse the outer quote); nested `{...}` in the format spec count as brackets.
  std::size_t scan_replacement_field(std::size_t p, int start_line, int start_col, bool triple) {
    int depth = 0;
    for (;;) {
      if (p >= src_.size()) fail(start_line, start_col, "f-string: expecting '}' before the end of the file");
      const char c = src_[p];
      if (c == '{' || c == '(' || c == '[') {
        ++depth;
        ++p;
      } else if (c == '}' || c == ')' || c == ']') {
        if (depth == 0) {
          if (c != '}') fail(line_, col_of(p), fmt::format("f-string: unmatched '{}'", c));
          return p + 1;
        }
        --depth;
        ++p;
      } else if (c == '"' || c == '\'') {
        p = scan_string(p, p, line_, col_of(p));
      } else if (is_ident_start(c)) {
        std::size_t end = p;
        while (end < src_.size() && is_ident_char(src_[end])) ++end;
        if (end < src_.size() && (src_[end] == '"' || src_[end] == '\'') && is_string_prefix(src_.substr(p, end - p)))
          p = scan_string(p, end, line_, col_of(p));
        else
          p = end;
      } else if (c == '\n' || c == '\r') {
        if (!triple && depth == 0) fail(start_line, start_col, "unterminated f-string literal");
        p += newline_length(p);
        next_line(p);
      } else {  // anything else, '#' in a format spec ("{x:#x}") included
        ++p;
      }
    }
  }

  void string_literal(std::size_t begin, std::size_t quote) {
    const int start_line = line_;
    const int start_col = col_of(begin);
    const bool first = !physical_has_token_;
    const std::size_t end = scan_string(begin, quote, start_line, start_col);
    emit(TokenKind::string, begin, end, start_line, start_col);
    out_.back().first_on_line = first;
  }

  void op() {
    const std::string_view rest = src_.substr(pos_);
    for (auto o : kOps3)
      if (rest.substr(0, 3) == o) return emit(TokenKind::op, pos_, pos_ + 3, line_);
    for (auto o : kOps2)
      if (rest.substr(0, 2) == o) return emit(TokenKind::op, pos_, pos_ + 2, line_);
    const char c = src_[pos_];
    if (kOps1.find(c) == std::string_view::npos) {
      const auto u = static_cast<unsigned char>(c);
      if (std::isprint(u)) fail(line_, col_of(pos_), fmt::format("invalid character '{}'", c));
      fail(line_, col_of(pos_), fmt::format("invalid character (byte 0x{:02x})", static_cast<int>(u)));
    }
    if (c == '(' || c == '[' || c == '{') {
      emit(TokenKind::op, pos_, pos_ + 1, line_);
      brackets_.push_back({c, out_.back().line, out_.back().col});
      return;
    }
    if (c == ')' || c == ']' || c == '}') {
      const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets_.empty()) fail(line_, col_of(pos_), fmt::format("unmatched '{}'", c));
      const auto open = brackets_.back();
      if (open.ch != want)
        fail(line_, col_of(pos_),
             fmt::format("closing '{}' does not match '{}' opened at line {}:{}", c, open.ch, open.line, open.col));
      brackets_.pop_back();
      emit(TokenKind::op, pos_, pos_ + 1, line_);
      out_.back().depth = static_cast<int>(brackets_.size());
      return;
    }
    emit(TokenKind::op, pos_, pos_ + 1, line_);
  }

  std::string_view src_;
  std::string_view file_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::size_t line_start_ = 0;
  bool at_line_start_ = true;
  bool physical_has_token_ = false;
  bool logical_has_code_ = false;
  std::vector<std::pair<int, int>> indents_{{0, 0}};  // (width with tab 8, width with tab 1)
  std::vector<OpenBracket> brackets_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, std::string_view filename) {
  return Lexer(source, filename).run();
}

}  // namespace syncopate::transform
