// The rules of `@sy.consume_block`, the wait inside a loop over a tensor's blocks (attention's
// loop over K/V blocks): what makes the per-block wait, and the arrival-order visit of the loop,
// compute what the original loop computes (docs/ANNOTATIONS.md, "Waiting per block").
//
//   loop         the annotation sits in a `for` loop after the tile block (not the tile loop)
//   block=       reads the loop's variable: each iteration waits on its own block
//   order=arrival
//                the loop is `for v in range(start, stop[, step])` (or tl.range) whose bounds
//                and variable the body does not assign; block= is `v // step` (or `v` with step
//                1); nothing made from the consumed tensor is advanced from one iteration to the
//                next (it would follow the iteration's place, not the block's); every
//                consume_block of the loop asks for the same order and table row
//
// Each refusal names file:line:col, the annotation, the rule and the fix.
#include <algorithm>
#include <set>
#include <string>

#include <fmt/core.h>

#include "analysis.hpp"
#include "flow.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

std::string without_spaces(std::string_view text) {
  std::string out;
  for (char c : text)
    if (c != ' ' && c != '\t') out += c;
  return out;
}

class BlockLoopChecker {
 public:
  BlockLoopChecker(const KernelFlow& flow, KernelAnalysis& a) : m_(flow.module()), a_(a), flow_(flow) {}

  void run() {
    for (BlockSite& b : a_.block_waits) check_loop(b);
    for (BlockSite& b : a_.block_waits) {
      if (b.arrival) check_arrival(b);
      check_agreement(b);
    }
    for (BlockSite& b : a_.block_waits)
      if (!b.arrival) mark_repeat(b);
  }

 private:
  const Annotation& ann(const BlockSite& b) const { return a_.annotations[b.site.annotation]; }
  int line_of(std::size_t s) const { return m_.lines[s].line; }
  std::string header(std::size_t s) const { return flow_.header(s); }
  // The end of the tile block the annotation follows (the last one before it).
  std::size_t tile_end_before(std::size_t s) const {
    std::size_t end = 0;
    for (const auto& t : a_.tiles)
      if (t.end_stmt <= s) end = t.end_stmt;
    return end;
  }

  void check_loop(BlockSite& b) {
    const Annotation& a = ann(b);
    const auto loops = flow_.enclosing_loops(b.site.stmt);
    const std::size_t tile_end = tile_end_before(b.site.stmt);
    if (loops.empty() || loops.front() < tile_end) {
      const std::string where = loops.empty()
                                    ? "outside any loop"
                                    : fmt::format("in the tile loop at line {} ('{}'), not in a loop over blocks",
                                                  line_of(loops.front()), header(loops.front()));
      a.fail(m_.filename,
             fmt::format("it marks a statement {}: a per-block wait belongs inside the `for` loop over the "
                         "tensor's blocks (after the tile block), right above the first read of the block; a "
                         "wait for the whole tile before the loop is '@sy.consume'",
                         where));
    }
    b.loop = loops.front();
    if (flow_.is_while(b.loop))
      a.fail(m_.filename,
             fmt::format("the loop at line {} ('{}') is a while loop: a per-block wait needs a `for` loop whose "
                         "variable numbers the blocks",
                         line_of(b.loop), header(b.loop)));
    const auto h = flow_.for_header(b.loop);
    bool follows = false;
    for (const auto& tok : tokenize(b.block_expr, m_.filename))
      if (tok.kind == TokenKind::name &&
          std::find(h->targets.begin(), h->targets.end(), std::string(tok.text)) != h->targets.end())
        follows = true;
    if (!follows)
      a.fail(m_.filename,
             fmt::format("block={} does not read the variable of the loop at line {} ('{}'): every iteration "
                         "would wait on the same block while reading another; number the block from the loop "
                         "variable (e.g. block={} // BLOCK_N)",
                         b.block_expr, line_of(b.loop), header(b.loop),
                         h->targets.empty() ? "start_n" : h->targets.front()),
             a.arg("block")->col);
  }

  void check_arrival(BlockSite& b) {
    const Annotation& a = ann(b);
    const auto h = flow_.for_header(b.loop);
    const auto r = flow_.range_args(b.loop);
    if (h->targets.size() != 1 || !r || !r->has_stop || r->is_static)
      a.fail(m_.filename,
             fmt::format(
                 "order=arrival needs the loop at line {} ('{}') to be 'for <v> in range(<start>, <stop>[, "
                 "<step>])' or tl.range(...): the rewrite visits the same values of <v> in the order "
                 "the blocks land{}",
                 line_of(b.loop), header(b.loop),
                 r && r->is_static ? " (a static_range is unrolled at compile time, so it cannot be reordered)" : ""));
    b.loop_var = h->targets.front();
    b.start = r->start;
    b.stop = r->stop;
    b.step = r->step;
    const std::string block = without_spaces(b.block_expr);
    const bool per_step = block == without_spaces(b.loop_var + "//" + b.step) ||
                          block == without_spaces("(" + b.loop_var + ")//" + b.step);
    if (!per_step && !(b.step == "1" && block == b.loop_var))
      a.fail(m_.filename,
             fmt::format("with order=arrival, block= must be '{} // {}'{} (the loop variable over the loop's "
                         "step), got '{}': blocks are then numbered as the table of where each row's arrival "
                         "starts numbers them",
                         b.loop_var, b.step, b.step == "1" ? fmt::format(" or '{}'", b.loop_var) : "", b.block_expr),
             a.arg("block")->col);
    // The loop's bounds and variable: the reorder computes from them at the top of each iteration.
    std::set<std::string> bounds;
    for (const std::string* e : {&b.start, &b.stop, &b.step})
      for (const auto& tok : tokenize(*e, m_.filename))
        if (tok.kind == TokenKind::name && !is_keyword(tok.text)) bounds.emplace(tok.text);
    bounds.insert(b.loop_var);
    // The table row (n=) too: the iteration's wait goes at the top of the loop's body.
    for (const auto& tok : tokenize(b.key, m_.filename))
      if (tok.kind == TokenKind::name && !is_keyword(tok.text)) bounds.emplace(tok.text);
    const std::size_t end = flow_.statement_end(b.loop);
    for (std::size_t s = b.loop + 1; s < end; ++s)
      for (const auto& v : flow_.assigned(s))
        if (bounds.count(v))
          fail_line(s, a,
                    fmt::format("'{}' is assigned inside the loop at line {} ('{}'), whose order=arrival visit "
                                "computes each iteration's block, and waits for it, at the top of the loop's body "
                                "from the loop's variable, bounds and n=; assign it before the loop",
                                v, line_of(b.loop), header(b.loop)));
    // Pointers made from a block-consumed tensor and advanced each iteration follow the
    // iteration's place in the loop, not the block it now visits.
    for (const BlockSite& other : a_.block_waits) {
      if (other.loop != b.loop) continue;
      const std::string param = ann(other).positional()->value;
      const auto derived = flow_.derived_from(param);
      for (std::size_t s = b.loop + 1; s < end; ++s)
        for (const auto& v : flow_.assigned(s)) {
          if (!derived.count(v) || v == param) continue;
          bool carried = flow_.increment(s).has_value() && flow_.increment(s)->first == v;
          for (const auto& use : flow_.reads(s)) carried = carried || use.name == v;
          if (carried)
            fail_line(s, a,
                      fmt::format("'{}' (made from '{}') is advanced here each iteration, so with order=arrival it "
                                  "would point at the block of the iteration's place in the loop, not at the block "
                                  "visited; compute the block's address from the loop variable instead (e.g. "
                                  "{} + {} * <stride>)",
                                  v, param, param, b.loop_var));
        }
    }
  }

  void check_agreement(const BlockSite& b) const {
    for (const BlockSite& other : a_.block_waits) {
      if (&other == &b) break;
      if (other.loop != b.loop) continue;
      if (other.arrival != b.arrival || other.key != b.key)
        ann(b).fail(
            m_.filename,
            fmt::format("the '@sy.consume_block' at line {} in the same loop asks for {}; the blocks of one "
                        "loop are visited in one order and read one table row: give every consume_block of "
                        "the loop the same order= and n=",
                        ann(other).line,
                        other.arrival != b.arrival ? fmt::format("order={}", other.arrival ? "arrival" : "source")
                                                   : fmt::format("n={}", other.key.empty() ? "<none>" : other.key)));
    }
  }

  // Source order: `b` repeats an earlier consume_block of its loop when both sit directly in the
  // loop's body (not under an `if` or an inner loop, so the earlier one ran in this iteration),
  // name the same block and row, and nothing either reads is assigned between them. Waits only
  // ever see slots grow within a call, so the second would find what the first found.
  void mark_repeat(BlockSite& b) const {
    const int body_col = m_.lines[b.loop + 1].col;
    const auto direct = [&](const BlockSite& s) {
      return m_.lines[s.site.stmt].col == body_col && flow_.enclosing_loops(s.site.stmt).front() == b.loop;
    };
    if (!direct(b)) return;
    std::set<std::string> names;
    for (const std::string* e : {&b.key, &b.block_expr})
      for (const auto& tok : tokenize(*e, m_.filename))
        if (tok.kind == TokenKind::name && !is_keyword(tok.text)) names.emplace(tok.text);
    for (const BlockSite& other : a_.block_waits) {
      if (&other == &b) return;
      if (other.loop != b.loop || other.arrival || !direct(other) || other.site.stmt >= b.site.stmt) continue;
      if (without_spaces(other.key) != without_spaces(b.key) ||
          without_spaces(other.block_expr) != without_spaces(b.block_expr))
        continue;
      bool changed = false;
      for (std::size_t s = other.site.stmt; s < b.site.stmt && !changed; ++s)
        for (const auto& v : flow_.assigned(s)) changed = changed || names.count(v) > 0;
      if (!changed) {
        b.repeats = true;
        return;
      }
    }
  }

  [[noreturn]] void fail_line(std::size_t s, const Annotation& a, const std::string& rule) const {
    const Token& t = m_.first(m_.lines[s]);
    throw TransformError(fmt::format("{}:{}:{}: {}: {}", m_.filename, t.line, t.col, a.text, rule));
  }

  const Module& m_;
  KernelAnalysis& a_;
  const KernelFlow& flow_;
};

}  // namespace

void check_block_waits(const KernelFlow& flow, KernelAnalysis& a) {
  if (a.block_waits.empty()) return;
  BlockLoopChecker(flow, a).run();
}

}  // namespace syncopate::transform::detail
