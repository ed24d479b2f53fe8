// Every rule of docs/ANNOTATIONS.md rejects a bad kernel with file:line:col, the annotation and
// the rule. Each test pins the line (and column) and the words of the message.
#include <gtest/gtest.h>

#include <string>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/comm_plan.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform {
namespace {

constexpr const char* kHeader =
    "import triton\n"                 // 1
    "import triton.language as tl\n"  // 2
    "\n"                              // 3
    "\n"                              // 4
    "@triton.jit\n";                  // 5; the kernel's def is line 6

std::string error_of(const std::string& body, const std::string& kernel = "k", const TransformOptions& options = {}) {
  try {
    transform_kernel(body, "k.py", kernel, options);
  } catch (const TransformError& e) {
    return e.what();
  }
  return "no error";
}

// A kernel with a correct tile block; tests append or swap lines.
std::string kernel(const std::string& body) {
  return std::string(kHeader) + "def k(x_ptr, y_ptr, N, BLOCK: tl.constexpr):\n" + body;
}

constexpr const char* kTile =
    "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 7
    "    pid_m = tl.program_id(0)\n"                     // 8
    "    # @sy.end\n";                                   // 9

TEST(TransformErrors, UnknownKernelNameListsJitFunctions) {
  EXPECT_EQ(error_of(kernel(kTile), "kk"),
            "k.py:1:1: kernel 'kk': no function of that name in the file (@triton.jit functions: k)");
}

TEST(TransformErrors, FunctionIsNotJitted) {
  const std::string src = "import triton\n\ndef helper(x):\n    return x\n";
  EXPECT_EQ(error_of(src, "helper"), "k.py:3:1: kernel 'helper': is not decorated with @triton.jit");
}

TEST(TransformErrors, KernelDefinedTwice) {
  const std::string src = kernel(kTile) + "\n@triton.jit\ndef k(a):\n    pass\n";
  EXPECT_EQ(error_of(src), "k.py:12:1: kernel 'k': the name is defined twice (also at line 6); rename one");
}

TEST(TransformErrors, UnannotatedKernel) {
  EXPECT_EQ(error_of(kernel("    pid = tl.program_id(0)\n")),
            "k.py:6:1: kernel 'k': no '# @sy.tile' annotation; mark the statements that compute "
            "the tile's program ids (see docs/ANNOTATIONS.md)");
}

TEST(TransformErrors, ConsumeNamesMissingParameter) {
  const auto msg = error_of(kernel(std::string(kTile) + "    # @sy.consume(z_ptr, m=pid_m)\n"  // 10
                                                        "    x = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:10:19: @sy.consume(z_ptr, m=pid_m): 'z_ptr' is not a parameter of kernel 'k' "
            "(parameters: x_ptr, y_ptr, N, BLOCK)");
}

TEST(TransformErrors, ConsumeWithoutTileAnnotation) {
  const auto msg =
      error_of(kernel("    pid_m = tl.program_id(0)\n"
                      "    # @sy.consume(x_ptr, m=pid_m)\n"  // 8
                      "    x = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:8:5: @sy.consume(x_ptr, m=pid_m): '@sy.consume' has no '@sy.tile' annotation "
            "before it: the wait needs the tile's id");
}

TEST(TransformErrors, ProduceWithoutTileAnnotation) {
  const auto msg =
      error_of(kernel("    pid_m = tl.program_id(0)\n"
                      "    # @sy.produce(y_ptr)\n"  // 8
                      "    tl.store(y_ptr + pid_m, 1.0)\n"));
  EXPECT_NE(msg.find("k.py:8:5: @sy.produce(y_ptr): '@sy.produce' has no '@sy.tile' annotation"), std::string::npos)
      << msg;
}

TEST(TransformErrors, TileBlockOpensInsideAnother) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 7
                      "    pid = tl.program_id(0)\n"
                      "    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 9
                      "    pid_m = pid\n"
                      "    # @sy.end\n"));
  EXPECT_EQ(msg,
            "k.py:9:5: @sy.tile(index=tl.program_id(0), m=pid_m): a tile block opens inside the "
            "tile block opened at line 7; close that one with '# @sy.end' first");
}

TEST(TransformErrors, TileBlockNeverClosed) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"  // 7
                      "    pid_m = tl.program_id(0)\n"
                      "    x = 1\n"));
  EXPECT_EQ(msg,
            "k.py:7:5: @sy.tile(index=tl.program_id(0), m=pid_m): the tile block is never "
            "closed with '# @sy.end'");
}

TEST(TransformErrors, EndWithoutTile) {
  const auto msg =
      error_of(kernel("    pid_m = tl.program_id(0)\n"
                      "    # @sy.end\n"  // 8
                      "    x = 1\n"));
  EXPECT_EQ(msg, "k.py:8:5: @sy.end: '@sy.end' closes no '@sy.tile' block");
}

TEST(TransformErrors, UnknownAnnotationKind) {
  const auto msg = error_of(kernel(std::string(kTile) + "    # @sy.consumes(x_ptr)\n    x = 1\n"));
  EXPECT_EQ(msg,
            "k.py:10:5: @sy.consumes(x_ptr): unknown annotation '@sy.consumes' (known: tile, "
            "end, consume, produce, consume_block)");
}

TEST(TransformErrors, MalformedAnnotationUnclosedParenthesis) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m\n"
                      "    pid_m = tl.program_id(0)\n    # @sy.end\n"));
  EXPECT_EQ(msg,
            "k.py:7:5: @sy.tile(index=tl.program_id(0), m=pid_m: malformed annotation: '(' was "
            "never closed");
}

TEST(TransformErrors, MalformedAnnotationMissingDot) {
  const auto msg =
      error_of(kernel("    # @sy tile(index=0, m=pid_m)\n"
                      "    pid_m = tl.program_id(0)\n    # @sy.end\n"));
  EXPECT_NE(msg.find("k.py:7:5: @sy tile(index=0, m=pid_m): malformed annotation: expected "
                     "'@sy.<kind>'"),
            std::string::npos)
      << msg;
}

TEST(TransformErrors, TileMissingRequiredIndex) {
  const auto msg =
      error_of(kernel("    # @sy.tile(m=pid_m)\n"
                      "    pid_m = tl.program_id(0)\n    # @sy.end\n"));
  EXPECT_EQ(msg, "k.py:7:5: @sy.tile(m=pid_m): '@sy.tile' needs 'index='");
}

TEST(TransformErrors, UnknownKeywordPointsAtIt) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=0, m=pid_m, k=kk)\n"
                      "    pid_m = tl.program_id(0)\n    # @sy.end\n"));
  EXPECT_EQ(msg, "k.py:7:36: @sy.tile(index=0, m=pid_m, k=kk): '@sy.tile' has no argument 'k'");
}

TEST(TransformErrors, TileCoordinateNotAssignedInBlock) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_x)\n"
                      "    pid_m = tl.program_id(0)\n"
                      "    # @sy.end\n"));
  EXPECT_EQ(msg,
            "k.py:7:42: @sy.tile(index=tl.program_id(0), m=pid_x): 'pid_x' is not assigned in "
            "the tile block (lines 8-8)");
}

TEST(TransformErrors, IndexUsesUnknownVariable) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tile_idx, m=pid_m)\n"
                      "    pid_m = tl.program_id(0)\n"
                      "    # @sy.end\n"));
  EXPECT_EQ(msg,
            "k.py:7:22: @sy.tile(index=tile_idx, m=pid_m): index= uses 'tile_idx', which is "
            "neither a parameter of kernel 'k', nor a variable bound before line 7, nor a module-level "
            "name");
}

TEST(TransformErrors, IndexUsesVariableTheBlockRemoves) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=pid, m=pid_m)\n"
                      "    pid = tl.program_id(0)\n"
                      "    pid_m = pid\n"
                      "    # @sy.end\n"));
  EXPECT_NE(msg.find("k.py:7:22: @sy.tile(index=pid, m=pid_m): index= uses 'pid', which the tile "
                     "block assigns"),
            std::string::npos)
      << msg;
}

TEST(TransformErrors, BlockVariableUsedAfterTheBlock) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                      "    num = tl.cdiv(N, BLOCK)\n"
                      "    pid_m = tl.program_id(0) % num\n"
                      "    # @sy.end\n"
                      "    x = pid_m * num\n"));  // 11
  EXPECT_EQ(msg,
            "k.py:11:17: @sy.tile(index=tl.program_id(0), m=pid_m): 'num' is assigned in the "
            "tile block and used here, but the block is replaced by the tile-order lookup; move "
            "that assignment above the block");
}

TEST(TransformErrors, AnnotationInsideBrackets) {
  const auto msg = error_of(kernel(std::string(kTile) + "    x = tl.load(x_ptr +\n"
                                                        "        # @sy.consume(x_ptr, m=pid_m)\n"  // 11
                                                        "        pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:11:9: @sy.consume(x_ptr, m=pid_m): an annotation cannot sit inside brackets: "
            "it must precede a whole statement");
}

TEST(TransformErrors, AnnotationAfterCodeOnTheSameLine) {
  const auto msg =
      error_of(kernel(std::string(kTile) + "    x = tl.load(x_ptr + pid_m)  # @sy.consume(x_ptr, m=pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:10:33: @sy.consume(x_ptr, m=pid_m): an annotation must be a comment on a line "
            "of its own");
}

TEST(TransformErrors, ConsumeCoordinateIsNotTheTiles) {
  const auto msg = error_of(kernel(std::string(kTile) + "    # @sy.consume(x_ptr, m=row)\n"  // 10
                                                        "    x = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:10:28: @sy.consume(x_ptr, m=row): m=row is not the tile's row coordinate "
            "m=pid_m (line 7)");
}

TEST(TransformErrors, AnnotationIndentedUnlikeItsStatement) {
  const auto msg = error_of(kernel(std::string(kTile) + "    if N > 0:\n"
                                                        "    # @sy.consume(x_ptr, m=pid_m)\n"  // 11
                                                        "        x = tl.load(x_ptr + pid_m)\n"));
  EXPECT_EQ(msg,
            "k.py:11:5: @sy.consume(x_ptr, m=pid_m): it must be indented like the statement it "
            "marks (line 12 starts at column 9, the annotation at column 5)");
}

TEST(TransformErrors, ConsumeOutsideThePersistentLoopOfItsTile) {
  const std::string src = std::string(kHeader) +
                          "def k(x_ptr, N, BLOCK: tl.constexpr):\n"
                          "    for t in tl.range(0, N):\n"
                          "        # @sy.tile(index=t, m=pid_m)\n"  // 8
                          "        pid_m = t\n"
                          "        # @sy.end\n"
                          "        x = 1\n"
                          "    # @sy.consume(x_ptr, m=pid_m)\n"  // 12
                          "    y = tl.load(x_ptr)\n";
  EXPECT_EQ(error_of(src),
            "k.py:12:5: @sy.consume(x_ptr, m=pid_m): it is outside the scope of the tile "
            "block at line 8 (that block's level ends at line 13)");
}

TEST(TransformErrors, EndCutsACompoundStatement) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                      "    for i in range(2):\n"
                      "        pid_m = i\n"
                      "    # @sy.end\n"  // 10
                      "        y = pid_m\n"));
  EXPECT_EQ(msg, "k.py:10:5: @sy.end: '@sy.end' cuts a compound statement: line 11 still belongs to it");
}

TEST(TransformErrors, EndCutsAnIfFromItsElse) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                      "    if N > 0:\n"
                      "        pid_m = 1\n"
                      "    # @sy.end\n"  // 10
                      "    else:\n"
                      "        pid_m = 0\n"));
  EXPECT_EQ(msg, "k.py:10:5: @sy.end: '@sy.end' cuts a compound statement: line 11 still belongs to it");
}

TEST(TransformErrors, EmptyTileBlock) {
  const auto msg =
      error_of(kernel("    # @sy.tile(index=tl.program_id(0), m=pid_m)\n"
                      "    # @sy.end\n"
                      "    pid_m = 0\n"));
  EXPECT_EQ(msg, "k.py:7:5: @sy.tile(index=tl.program_id(0), m=pid_m): the tile block is empty");
}

TEST(TransformErrors, ReservedName) {
  const auto msg = error_of(kernel(std::string(kTile) + "    sy_tile = 3\n"));
  EXPECT_EQ(msg,
            "k.py:10:5: name 'sy_tile': the names 'syl', 'sy_*' and '__syncopate__' are reserved "
            "for the transformer's output (is this file transformed already?); rename it");
}

TEST(TransformErrors, PythonSyntaxTheTokenizerCannotFollow) {
  const auto msg = error_of(kernel(std::string(kTile) + "    s = 'unterminated\n"));
  EXPECT_EQ(msg, "k.py:10:9: python syntax: unterminated string literal");
}

TEST(TransformErrors, TabsAndSpacesMixedInTheKernel) {
  const auto msg = error_of(kernel(std::string(kTile) + "    if N:\n        a = 1\n\tb = 2\n"));
  EXPECT_EQ(msg, "k.py:12:2: python syntax: inconsistent use of tabs and spaces in indentation");
}

TEST(TransformErrors, TensorMissingFromPlan) {
  plan::CommPlan p;
  p.tensors["a"] = plan::TensorSpec{{64, 32}};
  TransformOptions options;
  options.plan = &p;
  const auto msg = error_of(kernel(std::string(kTile) + "    # @sy.consume(x_ptr, m=pid_m)\n"  // 10
                                                        "    x = tl.load(x_ptr + pid_m)\n"),
                            "k", options);
  EXPECT_EQ(msg,
            "k.py:10:5: @sy.consume(x_ptr, m=pid_m): tensor 'x' is not in the plan (tensors: a); "
            "name it with tensor=");
}

TEST(TransformErrors, PlanTensorHasTooFewDimensions) {
  plan::CommPlan p;
  p.tensors["x"] = plan::TensorSpec{{64}};
  TransformOptions options;
  options.plan = &p;
  const auto msg = error_of(kernel(std::string(kTile) + "    # @sy.consume(x_ptr, m=pid_m, m_dim=1)\n"
                                                        "    x = tl.load(x_ptr + pid_m)\n"),
                            "k", options);
  EXPECT_EQ(msg,
            "k.py:10:5: @sy.consume(x_ptr, m=pid_m, m_dim=1): tensor 'x' has 1 dimension, the "
            "annotation indexes dimension 1");
}

}  // namespace
}  // namespace syncopate::transform
