// The rules that keep a transformed kernel computing what the original computes. The checks of
// analysis.cpp make sure the annotations can be rewritten; these make sure the rewrite is right:
//
//   tile index   in a persistent loop the index is the loop's tile counter; a tile block sits in
//                at most one loop (a grouped GEMM's problem loop is refused); it reads no memory
//   tile block   what it assigns is not read by the next iteration (a counter it advances would
//                stop); the coordinates are not recomputed after it, and nothing after it reads
//                the original tile position (the program id, the loop counter)
//   consume      no read of the consumed tensor (or of a pointer/descriptor made from it) that the
//                wait does not precede (a consume_block's wait covers the rest of its loop body)
//   produce      the annotation marks a store of the tensor, none follows the notify in the tile;
//                an asynchronous (TMA) store gets a store wait before the notify
//
// Each refusal names file:line:col, the annotation, the rule and the fix (docs/ANNOTATIONS.md).
#include <algorithm>
#include <map>
#include <set>

#include <fmt/core.h>

#include "analysis.hpp"
#include "flow.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

// The positional arguments of a `range(...)` / `tl.range(...)` iterable, as text.
struct RangeArgs {
  std::string start = "0", step = "1";
  bool known = false;
};

class SafetyChecker {
 public:
  SafetyChecker(const KernelFlow& flow, KernelAnalysis& a) : m_(flow.module()), a_(a), flow_(flow) {
    for (const auto& p : a_.kernel.params) params_.insert(p.name);
    globals_ = module_names(m_);
  }

  void run() {
    for (const TileBlock& b : a_.tiles) {
      check_one_loop(b);
      check_block_reads_no_memory(b);
      check_loop_carried(b);
      check_index_follows_loop(b);
    }
    for (const TileBlock& b : a_.tiles) check_coordinates_not_recomputed(b);
    check_position_not_read_after();
    std::set<std::string> consumed;
    for (const Site& w : a_.waits) consumed.insert(param_of(w));
    for (const BlockSite& w : a_.block_waits) consumed.insert(param_of(w.site));
    for (const auto& p : consumed) check_reads_after_wait(p);
    for (Site& n : a_.notifies) check_produce(n);
  }

 private:
  // --- helpers ---------------------------------------------------------------------------------
  const Annotation& ann(const TileBlock& b) const { return a_.annotations[b.open]; }
  const Annotation& ann(const Site& s) const { return a_.annotations[s.annotation]; }
  std::string param_of(const Site& s) const { return ann(s).positional()->value; }

  const TileBlock* tile_of(std::size_t s) const {
    for (const auto& b : a_.tiles)
      if (s >= b.first_stmt && s < b.end_stmt) return &b;
    return nullptr;
  }
  // The tile block whose scope a statement after it belongs to: the last one before it.
  const TileBlock& tile_before(std::size_t s) const {
    const TileBlock* best = &a_.tiles.front();
    for (const auto& b : a_.tiles)
      if (b.end_stmt <= s) best = &b;
    return *best;
  }

  [[noreturn]] void fail_at(std::size_t token, const Annotation& a, const std::string& rule) const {
    const Token& t = m_.tokens[token];
    throw TransformError(fmt::format("{}:{}:{}: {}: {}", m_.filename, t.line, t.col, a.text, rule));
  }

  int line_of(std::size_t s) const { return m_.lines[s].line; }
  std::string header(std::size_t s) const { return flow_.header(s); }
  std::size_t token_of(std::size_t s, const std::string& name) const {
    for (std::size_t t : m_.lines[s].code)
      if (m_.tokens[t].is_name(name)) return t;
    return m_.lines[s].code.front();
  }

  // Positional arguments of the range() a for loop iterates over.
  RangeArgs range_args(std::size_t loop) const {
    const auto r = flow_.range_args(loop);
    if (!r || !r->has_stop) return {};
    return {r->start, r->step, true};
  }

  // A loop's counters: the target of a `for`, or a variable that the loop's body advances once
  // per iteration at its top level (`v += step`), for a `while`.
  std::vector<std::string> counters(std::size_t loop) const {
    std::vector<std::string> out;
    if (auto h = flow_.for_header(loop)) return h->targets;
    for (const auto& v : induction_variables(loop)) out.push_back(v.first);
    return out;
  }

  // Variables advanced once per iteration by `v += step` at the top level of `loop`'s body and
  // assigned nowhere else in it (tile blocks aside): name -> line of the increment.
  std::map<std::string, std::size_t> induction_variables(std::size_t loop) const {
    std::map<std::string, std::size_t> incs;
    std::map<std::string, int> assignments;
    for (std::size_t s = loop + 1; s < flow_.statement_end(loop); ++s) {
      if (tile_of(s)) continue;
      for (const auto& v : flow_.assigned(s)) ++assignments[v];
      if (flow_.parent(s) == loop)
        if (auto inc = flow_.increment(s)) incs[inc->first] = s;
    }
    std::map<std::string, std::size_t> out;
    for (const auto& [v, s] : incs)
      if (assignments[v] == 1) out[v] = s;
    return out;
  }

  // The last plain assignment `v = <expr>` before `s` (outside loops that do not enclose `s`).
  std::optional<std::string> initial_value(const std::string& v, std::size_t before) const {
    for (std::size_t s = before; s-- > a_.kernel.body_begin;)
      if (flow_.assigned(s).count(v)) return flow_.plain_assignment(s, v);
    return std::nullopt;
  }

  // --- tile index and loops (mistakes c, d, e) ------------------------------------------------
  void check_one_loop(const TileBlock& b) const {
    const auto loops = flow_.enclosing_loops(b.first_stmt);
    const Annotation& tile = ann(b);
    if (loops.size() >= 2) {
      std::string where;
      for (auto it = loops.rbegin(); it != loops.rend(); ++it)
        where += fmt::format("{}line {} '{}'", where.empty() ? "" : ", ", line_of(*it), header(*it));
      tile.fail(m_.filename,
                fmt::format("the tile block is inside {} loops ({}): its index then numbers tiles across "
                            "the iterations of more than one loop, as a grouped GEMM over several problems "
                            "does, but a tile order covers the one grid of one GEMM; Syncopate transforms a "
                            "kernel with one tile loop (a persistent kernel) or none: launch each problem "
                            "on its own, or move the tile block out of the outer loop",
                            loops.size(), where));
    }
  }

  void check_index_follows_loop(const TileBlock& b) const {
    const auto loops = flow_.enclosing_loops(b.first_stmt);
    const Annotation& tile = ann(b);
    if (loops.empty()) return;
    const std::size_t loop = loops.front();
    const auto names = counters(loop);
    const auto toks = tokenize(b.index_expr, m_.filename);
    const bool single = toks.size() >= 1 && toks[0].kind == TokenKind::name &&
                        (toks.size() == 1 || toks[1].kind == TokenKind::newline || toks[1].kind == TokenKind::end);
    const AnnotationArg* index = tile.arg("index");
    const std::string grouped =
        " (if this loop walks the problems of a grouped GEMM, Syncopate cannot transform the kernel: a "
        "tile order covers the one grid of one GEMM)";
    if (single) {
      const std::string v(toks[0].text);
      if (std::find(names.begin(), names.end(), v) != names.end()) return;
      if (check_counter_copy(b, loop, v, names)) return;
      if (derived_from_counter(b, loop, v, names)) return;
    } else {
      // An expression of the counter (e.g. index=start + i * NUM_PROGS) changes with it.
      for (const auto& t : toks)
        if (t.kind == TokenKind::name && std::find(names.begin(), names.end(), std::string(t.text)) != names.end())
          return;
    }
    const bool program_id = b.index_expr.find("program_id") != std::string::npos;
    tile.fail(m_.filename,
              fmt::format("index={} inside the loop at line {} ('{}') does not change from one iteration "
                          "to the next{}: every iteration would take the same tile of the order and the "
                          "other tiles would never be computed; the index must be the loop's tile counter: "
                          "index={}{}",
                          b.index_expr, line_of(loop), header(loop),
                          program_id ? " (tl.program_id is the same for the whole loop)" : "",
                          names.empty() ? "<the loop's counter>" : names.front(), grouped),
              index->col);
  }

  // `v` is a second counter that provably equals the for loop's: initialised to start - step
  // and advanced before the block, or to start and advanced after it, by the loop's step.
  bool check_counter_copy(const TileBlock& b, std::size_t loop, const std::string& v,
                          const std::vector<std::string>& names) const {
    const auto ivs = induction_variables(loop);
    const auto it = ivs.find(v);
    if (it == ivs.end()) return false;
    if (flow_.is_while(loop)) return true;  // a while loop's own counter, advanced each iteration
    const Annotation& tile = ann(b);
    const RangeArgs r = range_args(loop);
    const auto inc = flow_.increment(it->second);
    const auto init = initial_value(v, loop);
    const bool before = it->second < b.first_stmt;
    const std::string expected = before ? r.start + "-" + r.step : r.start;
    const std::string counter = names.empty() ? "the loop's counter" : names.front();
    if (r.known && inc && init && inc->second == r.step && *init == expected) return true;
    tile.fail(m_.filename,
              fmt::format("index={} is advanced by the loop at line {} ('{}'), but it cannot be shown to "
                          "equal the loop's tile counter '{}' (that needs '{} = {}' before the loop and "
                          "'{} += {}' {} the block); a counter that drifts from the loop's takes tiles "
                          "twice or never: use index={}",
                          v, line_of(loop), header(loop), counter, v, before ? r.start + " - " + r.step : r.start, v,
                          r.step, before ? "before" : "after", counter),
              tile.arg("index")->col);
  }

  // `v` is assigned in the loop's body, before the block, from an expression of the counter.
  bool derived_from_counter(const TileBlock& b, std::size_t loop, const std::string& v,
                            const std::vector<std::string>& names) const {
    for (std::size_t s = loop + 1; s < b.first_stmt; ++s) {
      if (tile_of(s) || !flow_.assigned(s).count(v)) continue;
      for (const auto& u : flow_.value_reads(s))
        if (std::find(names.begin(), names.end(), u.name) != names.end()) return true;
    }
    return false;
  }

  void check_block_reads_no_memory(const TileBlock& b) const {
    for (std::size_t s = b.first_stmt; s < b.end_stmt; ++s)
      for (const Call& c : flow_.calls(s))
        if (flow_.effect(c).reads)
          fail_at(c.name, ann(b),
                  fmt::format("the tile block reads memory here ({}(...)): tile coordinates that come from "
                              "data (a grouped GEMM's problem table, a tile map) are not the one grid a tile "
                              "order covers; Syncopate cannot transform this kernel (a block that only "
                              "computes pid_m/pid_n from the index can be annotated)",
                              c.callee));
  }

  // A variable the block assigns and the next iteration reads before assigning it (mistake d).
  void check_loop_carried(const TileBlock& b) const {
    const auto loops = flow_.enclosing_loops(b.first_stmt);
    if (loops.empty()) return;
    const std::size_t loop = loops.front();
    std::map<std::string, std::size_t> live;  // name -> line in the block that assigns it
    for (std::size_t s = b.first_stmt; s < b.end_stmt; ++s)
      for (const auto& v : flow_.assigned(s))
        if (v != b.m && v != b.n && !live.count(v)) live[v] = s;
    if (live.empty()) return;
    const auto carried = [&](const NameUse& u, std::size_t assigned_at) {
      fail_at(u.token, ann(b),
              fmt::format("'{}' is assigned in the tile block (line {}) and read again by the next "
                          "iteration of the loop at line {} (here): the rewrite replaces the block by the "
                          "tile-order lookup, so '{}' would stop changing between iterations (the loop "
                          "would repeat one tile, read the order out of bounds or never end); advance it "
                          "outside the block (e.g. '{} += <step>' after '# @sy.end') and keep only the "
                          "computation of the tile's coordinates inside",
                          u.name, line_of(assigned_at), line_of(loop), u.name, u.name));
    };
    if (flow_.is_while(loop))
      for (const auto& u : flow_.reads(loop))
        if (live.count(u.name)) carried(u, live[u.name]);
    for (std::size_t s = loop + 1; s < b.first_stmt; ++s) {
      if (tile_of(s)) continue;
      for (const auto& u : flow_.reads(s))
        if (live.count(u.name)) carried(u, live[u.name]);
      for (const auto& v : flow_.assigned(s)) live.erase(v);
    }
  }

  // --- the tile's coordinates and position after the block (mistake b) ------------------------
  void check_coordinates_not_recomputed(const TileBlock& b) const {
    for (std::size_t s = b.end_stmt; s < a_.kernel.body_end; ++s) {
      if (tile_of(s)) continue;
      const auto assigned = flow_.assigned(s);
      for (const std::string* coord : {&b.m, &b.n}) {
        if (coord->empty() || !assigned.count(*coord)) continue;
        const Annotation& tile = ann(b);
        fail_at(
            token_of(s, *coord), tile,
            fmt::format("'{}' is computed again here, outside the tile block (lines {}-{}): the rewrite "
                        "takes the block's '{}' from the tile order, but this line still derives it from "
                        "the tile's place in the original order, so what follows would work on another "
                        "tile (an epilogue would store the result in the wrong place); make this "
                        "recompute a tile block of its own ('# @sy.tile(index=<its counter>, m={}{})' "
                        "above it, '# @sy.end' below it), or use the block's '{}'",
                        *coord, tile.line + 1, b.end_line - 1, *coord, b.m, b.n.empty() ? "" : ", n=" + b.n, *coord));
      }
    }
  }

  static bool is_program_id_0(const Module& m, const Call& c) {
    if (c.callee != "program_id") return false;
    for (std::size_t t = c.open + 1; t < c.close; ++t) {
      const Token& tok = m.tokens[t];
      if (tok.kind == TokenKind::number) return tok.text == "0";
    }
    return true;  // program_id() without an axis: axis 0
  }

  // Names that hold the tile's position in the original order rather than its id: the names the
  // tile indices read, tl.program_id(0), and what is computed from them outside tile blocks.
  void check_position_not_read_after() const {
    std::set<std::string> position;
    for (const TileBlock& b : a_.tiles)
      for (const auto& t : tokenize(b.index_expr, m_.filename))
        if (t.kind == TokenKind::name && !is_keyword(t.text) && !params_.count(std::string(t.text)) &&
            !globals_.count(std::string(t.text)))
          position.emplace(t.text);
    const auto reads_position = [&](std::size_t s) -> std::optional<NameUse> {
      for (const Call& c : flow_.calls(s))
        if (is_program_id_0(m_, c)) return NameUse{"tl.program_id(0)", c.attribute ? c.name - 2 : c.name};
      for (const auto& u : flow_.reads(s))
        if (position.count(u.name)) return u;
      return std::nullopt;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t s = a_.kernel.body_begin; s < a_.kernel.body_end; ++s) {
        if (tile_of(s)) continue;
        bool from_position = false;
        for (const Call& c : flow_.calls(s)) from_position = from_position || is_program_id_0(m_, c);
        for (const auto& u : flow_.value_reads(s)) from_position = from_position || position.count(u.name) > 0;
        if (!from_position) continue;
        for (const auto& v : flow_.assigned(s))
          if (position.insert(v).second) changed = true;
      }
    }
    std::size_t first_end = a_.kernel.body_end;
    for (const TileBlock& b : a_.tiles) first_end = std::min(first_end, b.end_stmt);
    for (std::size_t s = first_end; s < a_.kernel.body_end; ++s) {
      if (tile_of(s)) continue;
      if (auto inc = flow_.increment(s); inc && position.count(inc->first)) {
        // Advancing a counter (tile_id += NUM_SMS) is fine; its step must not be a position.
        bool step_reads = false;
        for (const auto& u : flow_.reads(s))
          step_reads = step_reads || (u.name != inc->first && position.count(u.name));
        if (!step_reads) continue;
      }
      const auto use = reads_position(s);
      if (!use) continue;
      const TileBlock& b = tile_before(s);
      fail_at(
          use->token, ann(b),
          fmt::format("'{}' holds the tile's place in the original order (the program id or the loop "
                      "counter that index={} reads), not the tile the order assigns: after the rewrite "
                      "this line would work on another tile than {}{}; compute it from {}{} instead, "
                      "or make this recompute a tile block of its own ('# @sy.tile(index=...)' ... "
                      "'# @sy.end')",
                      use->name, b.index_expr, b.m, b.n.empty() ? "" : "/" + b.n, b.m, b.n.empty() ? "" : "/" + b.n));
    }
  }

  // --- consume: every read of the tensor after its wait (mistake a) ---------------------------
  // Where a helper's read is, for the message: ", which reads it in '<helper>' at file:line:col"
  // (the helper's own file when it is imported), or why a call through a module imported whole
  // counts as a read.
  std::string read_site_note(const ReadSite& site) const {
    if (site.function.empty() && site.opaque_callee.empty()) return "";
    const Module& m = site.module ? *site.module : m_;
    const Token& t = m.tokens[site.token];
    if (!site.opaque_callee.empty())
      return fmt::format(
          "; '{}' is called through a module imported whole{}, whose functions the transformer does not follow, "
          "so it counts as a read; import the function by name ('from <module> import {}') to have its reads "
          "followed",
          site.opaque_callee,
          site.function.empty() ? "" : fmt::format(" (in '{}' at {}:{}:{})", site.function, m.filename, t.line, t.col),
          site.opaque_callee);
    return fmt::format(", which reads it in '{}' at {}:{}:{}", site.function, m.filename, t.line, t.col);
  }

  void check_reads_after_wait(const std::string& param) const {
    const auto derived = flow_.derived_from(param);
    std::vector<std::pair<std::size_t, std::size_t>> covered;
    const Site* first = nullptr;
    std::vector<const Site*> sites;  // whole-tile waits, then per-block ones (in a loop)
    for (const Site& w : a_.waits) sites.push_back(&w);
    for (const BlockSite& w : a_.block_waits) sites.push_back(&w.site);
    for (const Site* w : sites) {
      if (param_of(*w) != param) continue;
      if (!first) first = w;
      covered.emplace_back(w->stmt, flow_.block_end(w->stmt));
    }
    for (std::size_t s = a_.kernel.body_begin; s < a_.kernel.body_end; ++s) {
      if (tile_of(s)) continue;
      const bool waited =
          std::any_of(covered.begin(), covered.end(), [&](auto r) { return s >= r.first && s < r.second; });
      if (waited) continue;
      for (const Call& c : flow_.calls(s)) {
        const auto read = flow_.read_through(c, derived);
        if (!read) continue;
        const NameUse* use = &read->use;
        const Annotation& a = ann(*first);
        const std::string through =
            (use->name == param ? "" : fmt::format(" through '{}'", use->name)) + read_site_note(read->site);
        // Where the annotation should go: the statement holding this read, at the annotation's level.
        std::size_t at = s;
        while (flow_.parent(at) && flow_.parent(at) != flow_.parent(first->stmt)) at = *flow_.parent(at);
        const std::string fix =
            flow_.parent(at) == flow_.parent(first->stmt) && at >= tile_before(first->stmt).end_stmt && at < first->stmt
                ? (a.kind == AnnotationKind::consume_block
                       ? fmt::format("move the annotation up to line {}, the first read of the block in the loop",
                                     line_of(at))
                       : fmt::format("move the annotation up to line {}, the first statement of the tile that "
                                     "reads '{}' (e.g. above the K loop, not below it)",
                                     line_of(at), param))
                : fmt::format("read '{}' only after the annotation (the wait covers the rest of its block)", param);
        fail_at(c.name, a,
                fmt::format("'{}' is read here ({}{}) before the wait that this annotation inserts at line "
                            "{}: the tile could read a chunk that has not landed yet (right only when every "
                            "chunk is in place before the kernel starts); {}",
                            param, c.callee, through, line_of(first->stmt), fix));
      }
    }
  }

  // --- produce: the notify follows every store of the tile (mistake f) ------------------------
  std::vector<std::pair<Call, bool>> stores_in(std::size_t s, const std::set<std::string>& derived) const {
    std::vector<std::pair<Call, bool>> out;
    for (const Call& c : flow_.calls(s)) {
      const MemoryEffect e = flow_.effect(c);
      if (e.writes && flow_.mentions(c, derived)) out.emplace_back(c, e.async_store);
    }
    return out;
  }

  void check_produce(Site& n) const {
    const Annotation& a = ann(n);
    const std::string param = param_of(n);
    const auto derived = flow_.derived_from(param);
    const std::size_t end = flow_.statement_end(n.stmt);
    bool stores = false;
    for (std::size_t s = n.stmt; s < end; ++s) stores = stores || !stores_in(s, derived).empty();
    if (!stores) {
      const std::size_t prev = n.stmt > a_.kernel.body_begin ? n.stmt - 1 : n.stmt;
      std::size_t prev_head = prev;
      while (prev_head > a_.kernel.body_begin && m_.lines[prev_head].col > m_.lines[n.stmt].col) --prev_head;
      bool prev_stores = false;
      if (prev_head != n.stmt && m_.lines[prev_head].col == m_.lines[n.stmt].col && !tile_of(prev_head))
        for (std::size_t s = prev_head; s < n.stmt; ++s) prev_stores = prev_stores || !stores_in(s, derived).empty();
      if (prev_stores)
        a.fail(m_.filename,
               fmt::format("the annotation sits below the store it announces (line {}): the notify is "
                           "inserted after the statement the annotation marks (line {}), which does not store "
                           "'{}'; put '# {}' on the line above the store (line {})",
                           line_of(prev_head), line_of(n.stmt), param, a.text, line_of(prev_head)));
      a.fail(m_.filename,
             fmt::format("the statement it marks (line {}) does not store '{}' (nor pass it to a helper that "
                         "stores): the notify would announce a tile that is not written; put the annotation "
                         "right above the tile's store of '{}'",
                         line_of(n.stmt), param, param));
    }
    // Stores of the tile after the notify, in the rest of the tile's scope.
    const TileBlock& b = tile_before(n.stmt);
    const std::size_t scope_end = flow_.block_end(b.first_stmt);
    for (std::size_t s = end; s < scope_end; ++s) {
      if (tile_of(s)) continue;
      for (const auto& [c, async] : stores_in(s, derived))
        fail_at(c.name, a,
                fmt::format("'{}' is stored again here, after the notify that this annotation inserts after "
                            "line {}: the chunk would be announced before this store; put the annotation above "
                            "the tile's last store of '{}' (here), or store the tile in one statement",
                            param, line_of(end - 1), param));
    }
    // An asynchronous (TMA) store of the tile, in the marked statement or earlier in the tile:
    // the notify must wait for it.
    for (std::size_t s = b.end_stmt; s < end; ++s) {
      if (tile_of(s)) continue;
      for (const auto& [c, async] : stores_in(s, derived)) n.store_wait = n.store_wait || async;
    }
  }

  const Module& m_;
  KernelAnalysis& a_;
  const KernelFlow& flow_;
  std::set<std::string> params_;
  std::set<std::string> globals_;
};

}  // namespace

void check_safety(const KernelFlow& flow, KernelAnalysis& a) { SafetyChecker(flow, a).run(); }

}  // namespace syncopate::transform::detail
