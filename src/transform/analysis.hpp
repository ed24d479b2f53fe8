// Internal: the checked meaning of a kernel's annotations, ready to be rewritten.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "annotations.hpp"
#include "source_model.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform::detail {

// A `@sy.tile ... @sy.end` block: logical lines [first_stmt, end_stmt) are replaced.
struct TileBlock {
  std::size_t open = 0;    // index into KernelAnalysis::annotations
  int end_line = 0;        // physical line of `# @sy.end`
  std::size_t first_stmt = 0, end_stmt = 0;
  std::string index_expr, m, n;  // n empty for row-wise kernels
};

// Where a wait (before) or a notify (after) goes.
struct Site {
  std::size_t annotation = 0;  // index into KernelAnalysis::annotations
  std::size_t stmt = 0;        // logical line the annotation marks
  int last_line = 0;           // last physical line of that statement (a compound one whole)
  // produce only: the tile's store is (or may be) an asynchronous TMA store, so the notify is
  // preceded by a store wait (docs/ANNOTATIONS.md, "asynchronous stores").
  bool store_wait = false;
};

struct KernelAnalysis {
  Kernel kernel;
  std::vector<Annotation> annotations;  // in source order
  std::vector<TileBlock> tiles;
  std::vector<Site> waits;     // consume: wait before `stmt`
  std::vector<Site> notifies;  // produce: notify after `last_line`
  std::vector<AnnotatedAccess> accesses;
};

// Finds the kernel, reads its annotations and checks every rule of docs/ANNOTATIONS.md.
// Throws TransformError naming file:line:col, the annotation and the rule.
KernelAnalysis analyze(const Module& m, std::string_view kernel_name, const TransformOptions& options);

// The rules that keep the transformed kernel's results those of the original (safety.cpp): reads
// of a consumed tensor before its wait, tile coordinates recomputed outside a tile block, tile
// indices that do not follow the loop, stores after a notify; marks the notifies that need a
// store wait. Throws TransformError naming file:line:col, the annotation, the rule and the fix.
void check_safety(const Module& m, KernelAnalysis& a);

// The output text, given the checked analyses of one or more kernels of the module.
std::string rewrite(const Module& m, const std::vector<KernelAnalysis>& analyses, const TransformOptions& options);

}  // namespace syncopate::transform::detail
