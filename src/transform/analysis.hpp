// Internal: the checked meaning of a kernel's annotations, ready to be rewritten.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "annotations.hpp"
#include "flow.hpp"
#include "source_model.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::transform::detail {

// A `@sy.tile ... @sy.end` block: logical lines [first_stmt, end_stmt) are replaced.
struct TileBlock {
  std::size_t open = 0;  // index into KernelAnalysis::annotations
  int end_line = 0;      // physical line of `# @sy.end`
  std::size_t first_stmt = 0, end_stmt = 0;
  std::string index_expr, m, n;  // n empty for row-wise kernels
  // The tile's wait goes at its lookup (`sy_tile = syl.wait_for_tile(...)`), not at the
  // `@sy.consume` statements (place_waits).
  bool waits_at_lookup = false;
  // With waits_at_lookup, inside a loop: the innermost loop's logical line. The slot cache
  // (`sy_seen`, the last slot the program saw complete) starts before it, and when the loop is
  // `for <index_expr> in range(start, stop, step)` (or tl.range) the next iteration's order
  // entry is loaded one iteration ahead (`sy_tile_next`).
  std::optional<std::size_t> loop;
  std::optional<std::array<std::string, 3>> prefetch;  // start, stop, step as written
  // Some notify of this tile reads its notify row from `sy_notify_begin, sy_notify_end`, loaded
  // at the end of the tile block (place_notify_rows).
  bool notify_row_at_lookup = false;
};

// Where a wait (before) or a notify (after) goes.
struct Site {
  std::size_t annotation = 0;  // index into KernelAnalysis::annotations
  std::size_t stmt = 0;        // logical line the annotation marks
  int last_line = 0;           // last physical line of that statement (a compound one whole)
  // produce only: the tile's store is (or may be) an asynchronous TMA store, so the notify is
  // preceded by a store wait (docs/ANNOTATIONS.md, "asynchronous stores").
  bool store_wait = false;
  // consume only: the wait was moved to the tile's lookup (TileBlock::waits_at_lookup), so
  // nothing is inserted before `stmt`.
  bool at_lookup = false;
  // produce only: the tile's notify row was loaded at its lookup (TileBlock::notify_row_at_lookup):
  // the notify (and its store wait) read `sy_notify_begin, sy_notify_end`.
  bool row_at_lookup = false;
};

// A `@sy.consume_block`: a wait before `site.stmt` on the chunks of one block, inside `loop`.
struct BlockSite {
  Site site;
  std::string block_expr;                   // the block number, as written
  std::string key;                          // the tile's n coordinate selecting the table row, or "" (row 0)
  bool arrival = false;                     // order=arrival: the loop visits blocks in landing order
  std::size_t loop = 0;                     // the innermost enclosing `for` (logical line)
  std::string loop_var, start, stop, step;  // its `range(start, stop, step)` (arrival only)
  // Source order: an earlier consume_block of the same loop waits on the same block of the same
  // row, and nothing the two read is assigned between them: this one needs no wait of its own.
  bool repeats = false;
};

struct KernelAnalysis {
  Kernel kernel;
  std::vector<Annotation> annotations;  // in source order
  std::vector<TileBlock> tiles;
  std::vector<Site> waits;             // consume: wait before `stmt`
  std::vector<Site> notifies;          // produce: notify after `last_line`
  std::vector<BlockSite> block_waits;  // consume_block: wait before `site.stmt`, in the loop
  std::vector<AnnotatedAccess> accesses;
};

// The parameters appended to this kernel: added_params(), then block_params() when it has a
// `@sy.consume_block`.
std::vector<AddedParam> added_params_of(const KernelAnalysis& a);

// Finds the kernel, reads its annotations and checks every rule of docs/ANNOTATIONS.md.
// Throws TransformError naming file:line:col, the annotation and the rule.
KernelAnalysis analyze(const Module& m, std::string_view kernel_name, const TransformOptions& options);

// The rules that keep the transformed kernel's results those of the original (safety.cpp): reads
// of a consumed tensor before its wait, tile coordinates recomputed outside a tile block, tile
// indices that do not follow the loop, stores after a notify; marks the notifies that need a
// store wait. Throws TransformError naming file:line:col, the annotation, the rule and the fix.
void check_safety(const KernelFlow& flow, KernelAnalysis& a);

// The rules of `@sy.consume_block` (block_loops.cpp): inside a `for` loop after the tile block,
// `block=` follows the loop; with order=arrival the loop is a range() whose bounds do not change
// inside it, `block=` is the loop variable over the step, nothing derived from the consumed
// tensor is carried from one iteration to the next, and the loop's consume_blocks agree on the
// order. Fills the loop fields of each BlockSite. Throws TransformError naming file:line:col.
void check_block_waits(const KernelFlow& flow, KernelAnalysis& a);

// Where each tile's wait goes (placement.cpp): at the tile lookup, returning the tile so that
// everything computed from it depends on the wait (loop-free on the GPU: a flattened tile loop
// still fuses and pipelines), when a `@sy.consume` of the tile follows its tile block with
// nothing but plain statements between (no compound statement, no call of a function of the
// module) and names m= or n= (so the tile's reads are addressed from its coordinates); else at
// each `@sy.consume` (`syl.wait_tile`, a loop: a wait placed after a K loop keeps its overlap).
void place_waits(const KernelFlow& flow, KernelAnalysis& a);

// Where each notify's row (its CSR offsets) is loaded (placement.cpp): at the end of the tile
// block (`sy_notify_begin, sy_notify_end = syl.notify_row(...)`) when the tile block runs before
// the notify on every path (the notify is inside the statement list that holds the tile block),
// so the two loads leave the tile's epilogue; else by the notify itself (`syl.notify_tile`).
void place_notify_rows(const KernelFlow& flow, KernelAnalysis& a);

// The output text, given the checked analyses of one or more kernels of the module.
std::string rewrite(const Module& m, const std::vector<KernelAnalysis>& analyses, const TransformOptions& options);

}  // namespace syncopate::transform::detail
