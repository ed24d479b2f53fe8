// Where a tile's wait goes: at the tile lookup or at its `@sy.consume` statements.
//
// At the lookup, the wait returns the tile id (`sy_tile = syl.wait_for_tile(..., sy_tile, ...)`)
// and the coordinates are computed from what it returns, so every address of the tile depends
// on the wait. Triton's pipeliner and warp specialiser keep data dependences but not the order
// of side effects: a loop-free wait placed anywhere else could have the tile's loads issued
// before it once the loop around it is pipelined. That form is loop-free on the GPU, which is
// what lets a `tl.range(..., flatten=True)` tile loop fuse with its K loop (docs/ANNOTATIONS.md,
// "Loop structure"). Moving the wait up is always correct (it waits earlier); it is done only
// when that costs nothing: the consume follows the tile block with plain statements between.
// A consume placed after a K loop on purpose keeps its `syl.wait_tile` where it is.
//
// A notify's row (the tile's two CSR offsets of the notify table) is loaded at the tile lookup
// too, beside the wait, whenever the tile block runs before the notify on every path. In a
// flattened loop the lookup is the prologue that the pipeliner runs while the previous tile's
// K loop is still in flight, so the two loads leave the epilogue, where the store wait and the
// notify would otherwise stall on them once per tile (measured on nvidia-h200 with the
// shortest K loops, bench/bench_wait_overhead.py). Note that in a fused loop tile t+1's wait
// (prologue) then runs before tile t's notify (epilogue): a plan in which a program's tile
// waits on a slot raised by the same program's previous tile would wait out its bound. No plan
// the lowering makes does that (a tile's waits are on chunks other ranks or copies produce).
//
// The notify row is always loaded from the tile itself at its own lookup, never carried from the
// previous iteration (the wait row may be: rewrite.cpp, replace_prefetched_lookup). Triton's
// loop fusion (3.6, `tl.range(..., flatten=True)`) hands the epilogue the tile loop's carried
// variables as the same tile's prologue left them: a row loaded one tile ahead and carried to
// the notify was the *next* tile's row there (the fused loop's yield forwards the prologue's new
// value at once; seen in the TTGIR of the transformed gemm.py). Every producer tile raised its
// successor's slots, and GEMM+RS at world 2 timed out on its ready slots ("seen 0"). A value the
// prologue computes (this tile's row) is carried to the epilogue correctly, like the tile's
// coordinates. tests/gpu/test_transform_gpu.py checks on the GPU that each tile of the fused
// GEMM raises its own slots.
#include <optional>
#include <set>
#include <string>

#include "analysis.hpp"
#include "flow.hpp"

namespace syncopate::transform::detail {

namespace {

// Functions a plain statement may call: Triton's library and Python builtins (none of them
// runs a loop the transformer cannot see, or reads memory it was not given).
bool plain_call(const Call& c) {
  static const std::set<std::string> builtins = {"min", "max", "abs", "int", "float", "bool", "len"};
  if (c.attribute) return c.root == "tl" || c.root == "triton";
  return builtins.count(c.callee) > 0;
}

class WaitPlacer {
 public:
  WaitPlacer(const KernelFlow& flow, KernelAnalysis& a) : a_(a), flow_(flow) {}

  void run() {
    for (std::size_t t = 0; t < a_.tiles.size(); ++t) {
      bool early = false;
      for (const Site& w : a_.waits)
        if (tile_index_before(w.stmt) == t) early = early || follows_tile_block(a_.tiles[t], w);
      if (!early) continue;
      TileBlock& b = a_.tiles[t];
      b.waits_at_lookup = true;
      const auto loops = flow_.enclosing_loops(b.first_stmt);
      if (!loops.empty()) {
        b.loop = loops.front();
        const auto header = flow_.for_header(*b.loop);
        const auto range = flow_.range_args(*b.loop);
        if (header && header->targets.size() == 1 && header->targets[0] == b.index_expr && range && range->has_stop &&
            !range->is_static)
          b.prefetch = std::array<std::string, 3>{range->start, range->stop, range->step};
      }
      for (Site& w : a_.waits)
        if (tile_index_before(w.stmt) == t) w.at_lookup = true;  // one wait covers the whole tile
    }
  }

 private:
  // The tile block a statement after it belongs to: the last one before it.
  std::size_t tile_index_before(std::size_t s) const {
    std::size_t best = 0;
    for (std::size_t t = 0; t < a_.tiles.size(); ++t)
      if (a_.tiles[t].end_stmt <= s) best = t;
    return best;
  }

  // The consume `w` is in the tile block's statement list, with only plain simple statements
  // between the block and it, and it addresses the tile's box (m= or n=).
  bool follows_tile_block(const TileBlock& b, const Site& w) const {
    const Annotation& ann = a_.annotations[w.annotation];
    if (!ann.arg("m") && !ann.arg("n")) return false;
    const auto parent = flow_.parent(b.first_stmt);
    if (flow_.parent(w.stmt) != parent) return false;
    for (std::size_t s = b.end_stmt; s < w.stmt; ++s) {
      if (flow_.parent(s) != parent || flow_.statement_end(s) != s + 1) return false;  // a compound statement
      for (const Call& c : flow_.calls(s))
        if (!plain_call(c)) return false;
    }
    return true;
  }

  KernelAnalysis& a_;
  const KernelFlow& flow_;
};

// Hoists each notify's row load to the end of its tile block when the block dominates it.
class NotifyRowPlacer {
 public:
  NotifyRowPlacer(const KernelFlow& flow, KernelAnalysis& a) : a_(a), flow_(flow) {}

  void run() {
    for (Site& n : a_.notifies) {
      std::optional<std::size_t> t;
      for (std::size_t i = 0; i < a_.tiles.size(); ++i)
        if (a_.tiles[i].end_stmt <= n.stmt) t = i;
      if (!t || !dominated_by(a_.tiles[*t], n.stmt)) continue;
      n.row_at_lookup = true;
      a_.tiles[*t].notify_row_at_lookup = true;
    }
  }

 private:
  // `s` is, or is nested in, a statement after the block in the block's own statement list (not
  // in an else/elif/except clause of an enclosing statement: each clause is its own list).
  // check_safety already refuses a notify outside its tile block's scope; this keeps the row's
  // variables defined on every path should that rule ever be relaxed.
  bool dominated_by(const TileBlock& b, std::size_t s) const {
    const auto list = flow_.parent(b.first_stmt);
    for (std::optional<std::size_t> at = s; at; at = flow_.parent(*at))
      if (flow_.parent(*at) == list) return *at >= b.end_stmt;
    return false;
  }

  KernelAnalysis& a_;
  const KernelFlow& flow_;
};

}  // namespace

void place_waits(const KernelFlow& flow, KernelAnalysis& a) { WaitPlacer(flow, a).run(); }

void place_notify_rows(const KernelFlow& flow, KernelAnalysis& a) { NotifyRowPlacer(flow, a).run(); }

}  // namespace syncopate::transform::detail
