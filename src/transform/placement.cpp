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

}  // namespace

void place_waits(const KernelFlow& flow, KernelAnalysis& a) { WaitPlacer(flow, a).run(); }

}  // namespace syncopate::transform::detail
