// What the rewrite produces on the shapes of source that the golden kernels do not cover:
// signatures with defaults or a lone ')', CRLF files, a missing final newline, multi-line
// statements in a tile block, several tile blocks, other decorators and helper functions.
#include <gtest/gtest.h>

#include <string>

#include "syncopate/common/error.hpp"
#include "syncopate/transform/tokenizer.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

constexpr const char* kAdded =
    "sy_signals, sy_tile_order, sy_tiles_n, sy_wait_offsets, sy_wait_slots, sy_notify_offsets, "
    "sy_notify_slots, sy_slot_writers, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error,  # [syncopate]";

std::string body(const std::string& indent = "    ") {
  return indent + "# @sy.tile(index=tl.program_id(0), m=pid_m)\n" + indent + "pid_m = tl.program_id(0)\n" + indent +
         "# @sy.end\n" + indent + "x = pid_m\n";
}

std::string run(const std::string& src, const std::string& kernel = "k") {
  const auto r = transform_kernel(src, "k.py", kernel);
  tokenize(r.source, "out.py");  // the output is still Python the tokenizer follows
  return r.source;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

TEST(Rewrite, ParamsGoBeforeTheFirstDefault) {
  const auto out = run(
      "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, N, BLOCK: tl.constexpr = 16, *, F=0):\n" +
      body());
  EXPECT_TRUE(
      contains(out, std::string("def k(x_ptr, N,\n      ") + kAdded + "\n      BLOCK: tl.constexpr = 16, *, F=0):\n"))
      << out;
}

TEST(Rewrite, LoneClosingParenthesisWithTrailingComma) {
  const auto out =
      run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(\n    x_ptr,\n    N,\n):\n" + body());
  EXPECT_TRUE(contains(out, std::string("    N,\n    ") + kAdded + "\n):\n")) << out;
}

TEST(Rewrite, CommaGoesBeforeTheLastParametersComment) {
  const auto out =
      run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(\n    x_ptr,\n    N  # rows\n) -> None:\n" +
          body());
  EXPECT_TRUE(contains(out, std::string("    N,  # rows\n    ") + kAdded + "\n) -> None:\n")) << out;
}

TEST(Rewrite, KernelWithoutParameters) {
  const auto out = run("import triton\nimport triton.language as tl\n@triton.jit\ndef k():\n" + body());
  EXPECT_TRUE(contains(out, std::string("def k(\n    ") + kAdded + "\n):\n")) << out;
}

TEST(Rewrite, CrlfFileKeepsCrlf) {
  std::string src =
      "import triton\r\nimport triton.language as tl\r\n@triton.jit\r\ndef k(x_ptr):\r\n    # "
      "@sy.tile(index=tl.program_id(0), m=pid_m)\r\n"
      "    pid_m = tl.program_id(0)\r\n    # @sy.end\r\n    # @sy.consume(x_ptr, m=pid_m)\r\n"
      "    x = tl.load(x_ptr)\r\n";
  const auto out = run(src);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i] == '\n') {
      ASSERT_TRUE(i > 0 && out[i - 1] == '\r') << "bare LF at byte " << i << ":\n" << out;
    }
  // The consume follows the tile block directly: waited for at the lookup (placement_test.cpp).
  EXPECT_TRUE(contains(out, "    sy_tile, sy_seen = syl.wait_for_tile(")) << out;
}

TEST(Rewrite, NotifyAfterALastLineWithoutNewline) {
  const auto out = run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(y_ptr):\n" + body() +
                       "    # @sy.produce(y_ptr, m=pid_m)\n    tl.store(y_ptr, x)");
  EXPECT_TRUE(contains(out,
                       "    tl.store(y_ptr, x)\n    syl.notify_tile_row(sy_signals, sy_notify_slots, sy_tile, "
                       "sy_notify_begin, sy_notify_end)  # [syncopate]\n"))
      << out;
}

TEST(Rewrite, NotifyFollowsAWholeCompoundStatement) {
  const auto out = run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(y_ptr, N):\n" + body() +
                       "    # @sy.produce(y_ptr, m=pid_m)\n    if N > 0:\n        tl.store(y_ptr, x)\n\n"
                       "    else:\n        tl.store(y_ptr, 0)  # zero\n    z = 1\n");
  EXPECT_TRUE(contains(out, "        tl.store(y_ptr, 0)  # zero\n    syl.notify_tile_row(")) << out;
}

TEST(Rewrite, MultiLineStatementsInTheTileBlockAreCommentedLineByLine) {
  const auto out =
      run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr, N):\n"
          "    # @sy.tile(index=tl.program_id(0), m=pid_m, n=pid_n)\n"
          "    pid_m, pid_n = (tl.program_id(0) // N,\n"
          "                    tl.program_id(0) % N)  # two\n"
          "\n"
          "    # keep this comment\n"
          "    s = \"\"\"text\n"
          "more\"\"\"\n"
          "    # @sy.end\n"
          "    y = pid_m + pid_n\n");
  EXPECT_TRUE(contains(out,
                       "    # [syncopate] was: pid_m, pid_n = (tl.program_id(0) // N,\n"
                       "    # [syncopate] was:                 tl.program_id(0) % N)  # two\n"
                       "\n"
                       "    # keep this comment\n"
                       "    # [syncopate] was: s = \"\"\"text\n"
                       "    # [syncopate] was: more\"\"\"\n"
                       "    sy_tile = syl.tile_at(sy_tile_order, tl.program_id(0))  # [syncopate]\n"
                       "    pid_m, pid_n = syl.tile_coords(sy_tile, sy_tiles_n)  # [syncopate]\n"
                       "    # @sy.end\n"))
      << out;
}

TEST(Rewrite, TwoTileBlocksAndAccessDescription) {
  const auto r = transform_kernel(
      "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a_ptr, w_desc, c_ptr, N):\n"
      "    for t in tl.range(0, N):\n"
      "        # @sy.tile(index=t, m=pm, n=pn)\n"
      "        pm, pn = t // 4, t % 4\n"
      "        # @sy.end\n"
      "        # @sy.consume(w_desc, n=pn, tensor=\"weight\", n_dim=0)\n"
      "        w = w_desc.load([0, pn])\n"
      "        # @sy.tile(index=t, m=pm, n=pn)\n"
      "        pm, pn = t // 4, t % 4\n"
      "        # @sy.end\n"
      "        # @sy.produce(c_ptr, m=pm, n=pn)\n"
      "        tl.store(c_ptr + pm, w)\n",
      "k.py", "k");
  EXPECT_EQ(r.tile_blocks, 2);
  ASSERT_EQ(r.accesses.size(), 2u);
  EXPECT_EQ(r.accesses[0].access.tensor, "weight");
  EXPECT_EQ(r.accesses[0].access.role, lower::AccessRole::consume);
  EXPECT_EQ(r.accesses[0].access.m_dim, -1);
  EXPECT_EQ(r.accesses[0].access.n_dim, 0);
  EXPECT_EQ(r.accesses[0].line, 9);
  EXPECT_EQ(r.accesses[1].access.tensor, "c");
  EXPECT_EQ(r.accesses[1].access.m_dim, 0);
  EXPECT_EQ(r.accesses[1].access.n_dim, 1);
  EXPECT_EQ(r.kernel_params, (std::vector<std::string>{"a_ptr", "w_desc", "c_ptr", "N"}));
  const auto json = describe_json(r);
  EXPECT_TRUE(contains(json, "\"tensor\": \"weight\"")) << json;
  EXPECT_TRUE(contains(json, "\"name\": \"sy_error\"")) << json;
  EXPECT_TRUE(contains(r.source,
                       "\"accesses\": [{\"tensor\": \"weight\", \"param\": \"w_desc\", "
                       "\"role\": \"consume\", \"m_dim\": -1, \"n_dim\": 0}"))
      << r.source;
}

TEST(Rewrite, OtherDecoratorsHelpersAndBareJit) {
  const auto out =
      run("from triton import jit\nimport triton.language as tl\nimport triton\n\n"
          "@jit\ndef helper(x):\n    # @sy.bogus annotations elsewhere are not ours\n    return x\n\n"
          "@triton.autotune(configs=[], key=['N'])\n@jit\ndef k(x_ptr, N):\n" +
          body());
  EXPECT_TRUE(contains(out, "import triton\nimport syncopate.language as syl  # [syncopate]\n")) << out;
  EXPECT_TRUE(contains(out, "    # @sy.bogus annotations elsewhere are not ours\n")) << out;
}

TEST(Rewrite, TensorNameWithQuotesStaysValidPython) {
  const auto r = transform_kernel("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n" + body() +
                                      "    # @sy.consume(x_ptr, tensor='a\"b\\\\c')\n    y = 1\n",
                                  "k.py", "k");
  EXPECT_EQ(r.accesses.at(0).access.tensor, "a\"b\\\\c");
  EXPECT_TRUE(contains(r.source, "\"tensor\": \"a\\\"b\\\\\\\\c\"")) << r.source;
}

TEST(Rewrite, TransformedFileIsRejectedAsInput) {
  const auto once = run("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n" + body());
  EXPECT_THROW(transform_kernel(once, "out.py", "k"), TransformError);
}

TEST(Rewrite, AddedParamsListIsTheSignatureOrder) {
  std::string names;
  for (const auto& p : added_params()) names += p.name + ", ";
  names.pop_back();
  EXPECT_EQ(names + "  # [syncopate]", kAdded);
}

}  // namespace
}  // namespace syncopate::transform

namespace syncopate::transform {
namespace {

TEST(Rewrite, SeveralKernelsOfOneFileGoIntoOneOutput) {
  const std::string src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef a(x_ptr):\n" + body() +
                          "\n\n@triton.jit\ndef b(y_ptr, N):\n" + body() +
                          "    # @sy.consume(y_ptr, m=pid_m)\n    y = tl.load(y_ptr)\n";
  const auto results = transform_kernels(src, "k.py", {"b", "a"});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].kernel_name, "b");
  EXPECT_EQ(results[1].kernel_name, "a");
  EXPECT_EQ(results[0].source, results[1].source);
  EXPECT_EQ(results[0].accesses.size(), 1u);
  EXPECT_TRUE(results[1].accesses.empty());
  const std::string& out = results[0].source;
  tokenize(out, "out.py");
  std::size_t imports = 0;
  for (std::size_t at = out.find("import syncopate.language as syl"); at != std::string::npos;
       at = out.find("import syncopate.language as syl", at + 1))
    ++imports;
  EXPECT_EQ(imports, 1u) << out;
  EXPECT_TRUE(contains(out, std::string("def a(x_ptr,\n      ") + kAdded + "\n):\n")) << out;
  EXPECT_TRUE(contains(out, std::string("def b(y_ptr, N,\n      ") + kAdded + "\n):\n")) << out;
  EXPECT_TRUE(contains(out, "__syncopate__ = {\"version\": 2, \"kernels\": {\"b\": {\"params\": [")) << out;
  EXPECT_TRUE(contains(out,
                       "\"accesses\": [{\"tensor\": \"y\", \"param\": \"y_ptr\", \"role\": \"consume\", "
                       "\"m_dim\": 0, \"n_dim\": -1}]}, \"a\": {\"params\": ["))
      << out;
  EXPECT_THROW(transform_kernels(src, "k.py", {"a", "a"}), UserError);
  EXPECT_THROW(transform_kernels(src, "k.py", {}), UserError);
  // Each kernel is checked as on its own: an error names the kernel's line.
  EXPECT_THROW(transform_kernels(src, "k.py", {"a", "c"}), TransformError);
}

}  // namespace
}  // namespace syncopate::transform
