// The Python tokenizer: token kinds and positions on the constructs kernels use, and its errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "syncopate/common/error.hpp"
#include "syncopate/transform/tokenizer.hpp"

namespace syncopate::transform {
namespace {

std::vector<Token> tokens(std::string_view src) { return tokenize(src, "t.py"); }

std::vector<Token> of_kind(const std::vector<Token>& toks, TokenKind kind) {
  std::vector<Token> out;
  for (const auto& t : toks)
    if (t.kind == kind) out.push_back(t);
  return out;
}

std::string kinds(const std::vector<Token>& toks) {
  std::string out;
  for (const auto& t : toks) out += std::string(to_string(t.kind)) + " ";
  return out;
}

std::string error_of(std::string_view src) {
  try {
    tokenize(src, "t.py");
  } catch (const TransformError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Tokenizer, SimpleStatementWithComment) {
  const auto t = tokens("x = f(a, 'b')  # note\n");
  EXPECT_EQ(kinds(t), "NAME OP NAME OP NAME OP STRING OP COMMENT NEWLINE ENDMARKER ");
  EXPECT_EQ(t[6].text, "'b'");
  EXPECT_EQ(t[6].col, 10);
  EXPECT_EQ(t[8].text, "# note");
  EXPECT_FALSE(t[8].first_on_line);
  EXPECT_TRUE(t[0].first_on_line);
}

TEST(Tokenizer, TripleQuotedStringHoldsHashesQuotesAndNewlines) {
  const auto t = tokens("s = \"\"\"a # not a comment\n'\"' \"\"\n# @sy.tile(index=0)\n\"\"\"\ny = 1\n");
  const auto strings = of_kind(t, TokenKind::string);
  ASSERT_EQ(strings.size(), 1u);
  EXPECT_EQ(strings[0].line, 1);
  EXPECT_EQ(strings[0].end_line, 4);
  EXPECT_TRUE(of_kind(t, TokenKind::comment).empty());
  EXPECT_EQ(of_kind(t, TokenKind::newline).size(), 2u);
  EXPECT_EQ(of_kind(t, TokenKind::name).back().line, 5);
}

TEST(Tokenizer, StringPrefixesAndEscapes) {
  const auto t = tokens("a = rb'\\'' + Rf\"{x}\" + u'\\\\' + B\"\"\n");
  const auto strings = of_kind(t, TokenKind::string);
  ASSERT_EQ(strings.size(), 4u);
  EXPECT_EQ(strings[0].text, "rb'\\''");
  EXPECT_EQ(strings[1].text, "Rf\"{x}\"");
  EXPECT_EQ(strings[2].text, "u'\\\\'");
  EXPECT_EQ(strings[3].text, "B\"\"");
}

TEST(Tokenizer, FStringWithNestedQuotesBracesAndFormatSpec) {
  // Python 3.12 lets a replacement field reuse the outer quote; {{ }} are literal braces.
  const auto t = tokens("m = f\"{d[\"k\"]:>{w}} {{lit}} {g(')')!r}\" + 'z'\n");
  const auto strings = of_kind(t, TokenKind::string);
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(strings[0].text, "f\"{d[\"k\"]:>{w}} {{lit}} {g(')')!r}\"");
  EXPECT_EQ(strings[1].text, "'z'");
}

TEST(Tokenizer, FStringFormatSpecMayHoldAHash) {
  const auto t = tokens("s = f'{v:#x} {w!r:>#10}'\n");
  ASSERT_EQ(of_kind(t, TokenKind::string).size(), 1u);
  EXPECT_TRUE(of_kind(t, TokenKind::comment).empty());
}

TEST(Tokenizer, BackslashBeforeAnFStringBrace) {
  const auto t = tokens("p = rf'(\\{{[{dash}])(\\}}?)'\nq = 1\n");
  const auto strings = of_kind(t, TokenKind::string);
  ASSERT_EQ(strings.size(), 1u);
  EXPECT_EQ(strings[0].text, "rf'(\\{{[{dash}])(\\}}?)'");
}

TEST(Tokenizer, ContinuationLinesInsideBracketsDoNotIndent) {
  // A method whose signature closes on a continuation line: the ')' line is not an indentation.
  const auto t = tokens(
      "class C:\n    def f(self, a,\n          b):\n        return a\n\n    def g(self):\n"
      "        return (1,\n  2)\n");
  EXPECT_EQ(of_kind(t, TokenKind::indent).size(), 3u);
  EXPECT_EQ(of_kind(t, TokenKind::dedent).size(), 3u);
  EXPECT_EQ(of_kind(t, TokenKind::dedent)[0].line, 6);
}

TEST(Tokenizer, ExplicitLineContinuationJoinsLines) {
  const auto t = tokens("a = 1 + \\\n    2\nb = 3\n");
  EXPECT_EQ(of_kind(t, TokenKind::newline).size(), 2u);
  EXPECT_TRUE(of_kind(t, TokenKind::indent).empty());
  const auto numbers = of_kind(t, TokenKind::number);
  EXPECT_EQ(numbers[1].line, 2);
  EXPECT_EQ(numbers[1].col, 5);
}

TEST(Tokenizer, ImplicitContinuationInsideBrackets) {
  const auto t = tokens("x = f(a,\n      # inner\n  b)\ny = 2\n");
  EXPECT_EQ(of_kind(t, TokenKind::newline).size(), 2u);
  EXPECT_EQ(of_kind(t, TokenKind::nl).size(), 2u);
  const auto comments = of_kind(t, TokenKind::comment);
  ASSERT_EQ(comments.size(), 1u);
  EXPECT_EQ(comments[0].depth, 1);
  EXPECT_TRUE(comments[0].first_on_line);
  EXPECT_TRUE(of_kind(t, TokenKind::indent).empty());
}

TEST(Tokenizer, IndentAndDedentFollowBlocks) {
  const auto t = tokens("def f():\n    if x:\n        y = 1\n\n    # c\n    return y\nz = 0\n");
  EXPECT_EQ(of_kind(t, TokenKind::indent).size(), 2u);
  const auto dedents = of_kind(t, TokenKind::dedent);
  ASSERT_EQ(dedents.size(), 2u);
  EXPECT_EQ(dedents[0].line, 6);
  EXPECT_EQ(dedents[1].line, 7);
}

TEST(Tokenizer, CarriageReturnLineFeed) {
  const auto t = tokens("a = 1\r\nif a:\r\n    b = 'x'\r\n");
  EXPECT_EQ(of_kind(t, TokenKind::newline).size(), 3u);
  EXPECT_EQ(of_kind(t, TokenKind::string)[0].line, 3);
  EXPECT_EQ(of_kind(t, TokenKind::indent).size(), 1u);
}

TEST(Tokenizer, OperatorsLongestMatch) {
  const auto t = tokens("a //= b ** c -> d := e ... f != g\n");
  std::vector<std::string> ops;
  for (const auto& x : of_kind(t, TokenKind::op)) ops.emplace_back(x.text);
  EXPECT_EQ(ops, (std::vector<std::string>{"//=", "**", "->", ":=", "...", "!="}));
}

TEST(Tokenizer, NoTrailingNewlineStillEndsTheLogicalLine) {
  const auto t = tokens("def f():\n    return 1");
  EXPECT_EQ(of_kind(t, TokenKind::newline).size(), 2u);
  EXPECT_EQ(of_kind(t, TokenKind::dedent).size(), 1u);
}

TEST(TokenizerErrors, UnterminatedString) {
  EXPECT_EQ(error_of("x = 1\ny = 'abc\n"), "t.py:2:5: python syntax: unterminated string literal");
}

TEST(TokenizerErrors, UnterminatedTripleQuotedString) {
  EXPECT_EQ(error_of("x = 1\n\n  # c\ny = \"\"\"abc\n\n"),
            "t.py:4:5: python syntax: unterminated triple-quoted string literal");
}

TEST(TokenizerErrors, UnclosedBracketNamesTheOpening) {
  EXPECT_EQ(error_of("x = f(a,\n  [b, c\n"), "t.py:2:3: python syntax: '[' was never closed");
}

TEST(TokenizerErrors, MismatchedClosingBracket) {
  EXPECT_EQ(error_of("x = (1,\n 2]\n"), "t.py:2:3: python syntax: closing ']' does not match '(' opened at line 1:5");
}

TEST(TokenizerErrors, UnmatchedClosingBracket) {
  EXPECT_EQ(error_of("x = 1)\n"), "t.py:1:6: python syntax: unmatched ')'");
}

TEST(TokenizerErrors, TabsAndSpacesMixedAmbiguously) {
  // Line 3 is 8 columns with tab size 8 (as line 2) but 1 column with tab size 1.
  EXPECT_EQ(error_of("if x:\n        a = 1\n\tb = 2\n"),
            "t.py:3:2: python syntax: inconsistent use of tabs and spaces in indentation");
}

TEST(TokenizerErrors, DedentToNoEnclosingLevel) {
  EXPECT_EQ(error_of("if x:\n    a = 1\n  b = 2\n"),
            "t.py:3:3: python syntax: unindent does not match any outer indentation level");
}

TEST(TokenizerErrors, CharacterAfterLineContinuation) {
  EXPECT_EQ(error_of("x = 1 + \\ 2\n"),
            "t.py:1:9: python syntax: unexpected character after line continuation character");
}

TEST(TokenizerErrors, InvalidCharacter) {
  EXPECT_EQ(error_of("x = $y\n"), "t.py:1:5: python syntax: invalid character '$'");
}

TEST(TokenizerErrors, UnterminatedFStringField) {
  EXPECT_EQ(error_of("x = f'{a'\n"), "t.py:1:9: python syntax: unterminated string literal");
}

}  // namespace
}  // namespace syncopate::transform
