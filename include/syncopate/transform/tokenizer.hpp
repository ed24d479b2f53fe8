// A Python tokenizer, enough to rewrite Triton kernels safely.
//
// It follows the language reference's lexical rules rather than matching lines: strings of every
// kind (prefixes r/b/u/f and their mixes, triple quotes, f-strings whose replacement fields hold
// nested strings), comments, explicit (`\`) and implicit (inside brackets) line continuation,
// and INDENT/DEDENT with Python's tab rules. The transformer decides where a statement starts
// and ends, which comments are annotations and which names a kernel binds from these tokens.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace syncopate::transform {

enum class TokenKind {
  name,  // identifiers and keywords
  number,
  string,   // one whole literal, prefix and quotes included (an f-string too)
  op,       // operators and delimiters
  comment,  // '#' to the end of the line, without the newline
  newline,  // end of a logical line
  nl,       // a newline that ends no logical line (blank line, comment line, inside brackets)
  indent,
  dedent,
  end,  // end of input
};

struct Token {
  TokenKind kind = TokenKind::end;
  std::string_view text;       // a view into the tokenized source
  std::size_t offset = 0;      // byte offset of the first character
  int line = 1, col = 1;       // 1-based position of the first character (col counts bytes)
  int end_line = 1;            // line of the last character
  int depth = 0;               // bracket depth before this token
  bool first_on_line = false;  // no other token (but indentation) precedes it on its line

  bool is(TokenKind k, std::string_view t) const { return kind == k && text == t; }
  bool is_op(std::string_view t) const { return is(TokenKind::op, t); }
  bool is_name(std::string_view t) const { return is(TokenKind::name, t); }
};

// Tokenizes `source`; the tokens view into it, so it must outlive them. Throws TransformError
// "<filename>:<line>:<col>: python syntax: <rule>" for unterminated strings or brackets, a
// closing bracket that does not match, a stray backslash, a character Python does not accept,
// indentation that mixes tabs and spaces ambiguously or dedents to no enclosing level.
std::vector<Token> tokenize(std::string_view source, std::string_view filename);

std::string_view to_string(TokenKind kind);

}  // namespace syncopate::transform
