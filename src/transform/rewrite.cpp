// Producing the transformed source: a list of byte-offset edits applied once, so every line the
// annotations do not touch is copied unchanged.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "analysis.hpp"
#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

struct Edit {
  std::size_t offset = 0;
  std::size_t erase = 0;
  std::string text;
};

// A Python string literal body: tensor names from `tensor="..."` may hold quotes or backslashes.
std::string py_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

// One level deeper than the line it follows (inserted `if` bodies): Python accepts any deeper
// indentation for a new block.
constexpr const char* kIndentStep = "    ";

class Rewriter {
 public:
  Rewriter(const Module& m, const std::vector<KernelAnalysis>& all, const TransformOptions& o)
      : m_(m), all_(all), opt_(o) {
    const std::string_view s = m_.source;
    starts_.push_back(0);  // line 0 unused
    starts_.push_back(0);
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || (s[i] == '\r' && (i + 1 >= s.size() || s[i + 1] != '\n'))) starts_.push_back(i + 1);
    }
    const auto lf = s.find('\n');
    eol_ = (lf != std::string_view::npos && lf > 0 && s[lf - 1] == '\r') ? "\r\n" : "\n";
  }

  std::string run() {
    add_import();
    for (const auto& a : all_) rewrite_kernel(a);
    return apply();
  }

 private:
  void rewrite_kernel(const KernelAnalysis& a) {
    add_params(a.kernel, added_params_of(a));
    for (const auto& t : a.tiles) replace_tile(a, t);
    for (const auto& w : a.waits) {
      if (w.at_lookup) continue;  // waited for at the tile lookup (replace_tile)
      const LogicalLine& l = m_.lines[w.stmt];
      insert_before_line(
          l.line, indent_of(l.line) +
                      fmt::format("syl.wait_tile(sy_signals, sy_wait_offsets, sy_wait_slots, sy_slot_writers, sy_tile, "
                                  "sy_epoch, sy_wait_bound_ns, sy_rank, sy_error)"));
    }
    // Arrival order: the loop's variable is renumbered at the top of its body (from the start
    // block loaded before the loop), then the iteration's block waited for there, the wait returning the variable
    // (wait_for_block), so that every address of the iteration depends on the wait and a pipelined prefetch of a block
    // follows its wait. The loop's consume_blocks share one block (the variable over the step)
    // and one table row (check_block_waits), so one wait per loop covers them all.
    std::vector<std::size_t> reordered;
    for (const auto& b : a.block_waits) {
      if (!b.arrival || std::find(reordered.begin(), reordered.end(), b.loop) != reordered.end()) continue;
      const std::string suffix = reordered.empty() ? "" : fmt::format("_{}", reordered.size());
      reordered.push_back(b.loop);
      const std::string key = b.key.empty() ? "0" : b.key;
      const std::string top = "sy_block_top" + suffix, row_waits = "sy_block_row_waits" + suffix,
                        seen = "sy_block_seen" + suffix;
      // Before the loop: where the visit starts and whether the row has any slot at all (both
      // loaded once, so no load of the tables sits in a block's address chain in the loop). All
      // of it under the constexpr `sy_block_waits`: a launch whose tables have no slot at all
      // (nothing to wait for) compiles the loop as written, without the renumbering and the wait,
      // which cost the loop registers and instructions even when they wait for nothing
      // (docs/ANNOTATIONS.md, "Rules learnt on the GPU").
      const LogicalLine& header = m_.lines[b.loop];
      const std::string outer = indent_of(header.line);
      insert_before_line(header.line, outer + "if sy_block_waits:");
      insert_before_line(header.line,
                         outer + kIndentStep +
                             fmt::format("{}, {}, {} = syl.block_row(sy_block_first, sy_block_wait_offsets, {}, "
                                         "sy_blocks, {}, {}, {})",
                                         top, row_waits, seen, key, b.start, b.stop, b.step));
      const LogicalLine& body = m_.lines[b.loop + 1];
      const std::string inner = indent_of(body.line);
      insert_before_line(body.line, inner + "if sy_block_waits:");
      insert_before_line(body.line, inner + kIndentStep +
                                        fmt::format("{} = syl.block_at({}, {}, {}, {}, {})", b.loop_var, b.loop_var,
                                                    b.start, b.stop, b.step, top));
      insert_before_line(
          body.line,
          inner + kIndentStep +
              fmt::format("{}, {} = syl.wait_for_block(sy_signals, sy_block_wait_offsets, sy_block_wait_slots, "
                          "sy_slot_writers, {}, {}, sy_blocks, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, "
                          "sy_error, {}, {}, {})",
                          b.loop_var, seen, key, b.block_expr, b.loop_var, row_waits, seen));
    }
    // Source order: a wait before each consume_block's statement (wait_block, a loop: the loop
    // around it is not pipelined, so no read is hoisted above it), except one that repeats an
    // earlier wait of the same iteration (same table row, same block: check_block_waits marks it).
    for (const auto& b : a.block_waits) {
      if (b.arrival || b.repeats) continue;
      const LogicalLine& l = m_.lines[b.site.stmt];
      insert_before_line(
          l.line,
          indent_of(l.line) +
              fmt::format(
                  "syl.wait_block(sy_signals, sy_block_wait_offsets, sy_block_wait_slots, sy_slot_writers, {}, {}, "
                  "sy_blocks, sy_tile, sy_epoch, sy_wait_bound_ns, sy_rank, sy_error)",
                  b.key.empty() ? "0" : b.key, b.block_expr));
    }
    for (const auto& n : a.notifies) {
      const LogicalLine& l = m_.lines[n.stmt];
      // A TMA store completes asynchronously: wait for it before announcing the tile. With the
      // row loaded at the tile lookup (place_notify_rows), both read it from there.
      if (n.store_wait)
        insert_after_line(
            n.last_line, indent_of(l.line) + (n.row_at_lookup ? "syl.tma_store_wait_row(sy_notify_begin, sy_notify_end)"
                                                              : "syl.tma_store_wait(sy_notify_offsets, sy_tile)"));
      insert_after_line(n.last_line,
                        indent_of(l.line) + (n.row_at_lookup ? "syl.notify_tile_row(sy_signals, sy_notify_slots, "
                                                               "sy_tile, sy_notify_begin, sy_notify_end)"
                                                             : "syl.notify_tile(sy_signals, sy_notify_offsets, "
                                                               "sy_notify_slots, sy_tile)"));
    }
  }

  std::string marked(const std::string& code) const { return code + "  " + std::string(kInsertedMark); }

  std::size_t line_start(int line) const {
    return static_cast<std::size_t>(line) < starts_.size() ? starts_[line] : m_.source.size();
  }
  std::string_view line_text(int line) const {  // without its newline
    const std::size_t b = line_start(line);
    std::size_t e = b;
    while (e < m_.source.size() && m_.source[e] != '\n' && m_.source[e] != '\r') ++e;
    return m_.source.substr(b, e - b);
  }
  std::string indent_of(int line) const {
    const auto t = line_text(line);
    return std::string(t.substr(0, t.find_first_not_of(" \t\f")));
  }

  void insert_before_line(int line, const std::string& code) {
    edits_.push_back({line_start(line), 0, marked(code) + eol_});
  }
  void insert_after_line(int line, const std::string& code) {
    if (static_cast<std::size_t>(line + 1) < starts_.size()) {
      edits_.push_back({starts_[line + 1], 0, marked(code) + eol_});
    } else {  // the last line has no newline
      edits_.push_back({m_.source.size(), 0, eol_ + marked(code) + eol_});
    }
  }

  // One kernel: {"version", "kernel", "params", "accesses"}. Several (transform_kernels):
  // {"version", "kernels": {name: {"params", "accesses"}, ...}}; syncopate.launch reads both.
  static std::string param_list(const KernelAnalysis& a) {
    std::string params;
    for (const auto& p : added_params_of(a)) params += (params.empty() ? "" : ", ") + fmt::format("\"{}\"", p.name);
    return params;
  }

  std::string describe() const {
    if (all_.size() == 1)
      return fmt::format(
          "__syncopate__ = {{\"version\": {}, \"kernel\": \"{}\", \"params\": [{}], \"accesses\": [{}]}}",
          kOutputVersion, all_[0].kernel.name, param_list(all_[0]), accesses(all_[0]));
    std::string kernels;
    for (const auto& a : all_)
      kernels += (kernels.empty() ? "" : ", ") + fmt::format("\"{}\": {{\"params\": [{}], \"accesses\": [{}]}}",
                                                             a.kernel.name, param_list(a), accesses(a));
    return fmt::format("__syncopate__ = {{\"version\": {}, \"kernels\": {{{}}}}}", kOutputVersion, kernels);
  }

  static std::string accesses(const KernelAnalysis& a) {
    std::string accesses;
    for (const auto& acc : a.accesses)
      accesses +=
          (accesses.empty() ? "" : ", ") +
          fmt::format("{{\"tensor\": \"{}\", \"param\": \"{}\", \"role\": \"{}\", \"m_dim\": {}, \"n_dim\": {}{}",
                      py_escaped(acc.access.tensor), acc.param,
                      acc.access.role == lower::AccessRole::consume ? "consume" : "produce", acc.access.m_dim,
                      acc.access.n_dim,
                      // only when set, so kernels without it describe themselves as before
                      acc.access.m_local_shard ? ", \"m_local_shard\": True" : "") +
          // per-block waits only, so other kernels describe themselves as before
          std::string(acc.per_block ? ", \"per_block\": True" : "") +
          std::string(acc.arrival_order ? ", \"order\": \"arrival\"" : "") + "}";
    return accesses;
  }

  // After the last top-level import before the (first) kernel; else after a module docstring;
  // else first.
  void add_import() {
    int def_line = m_.lines[all_.front().kernel.def_line].line;
    for (const auto& a : all_) def_line = std::min(def_line, m_.lines[a.kernel.def_line].line);
    const LogicalLine* after = nullptr;
    for (const auto& l : m_.lines) {
      if (l.line >= def_line) break;
      if (l.col == 1 && (m_.first(l).is_name("import") || m_.first(l).is_name("from"))) after = &l;
    }
    const std::string text = marked("import " + opt_.language_module + " as syl") + eol_ + marked(describe()) + eol_;
    if (after != nullptr) {
      const int next = after->end_line + 1;
      if (static_cast<std::size_t>(next) < starts_.size())
        edits_.push_back({starts_[next], 0, text});
      else
        edits_.push_back({m_.source.size(), 0, eol_ + text});
      return;
    }
    const LogicalLine& first = m_.lines.front();
    if (first.code.size() == 1 && m_.first(first).kind == TokenKind::string)
      edits_.push_back({line_start(first.end_line + 1), 0, text});
    else
      edits_.push_back({line_start(first.line), 0, text});
  }

  // Appended before the first parameter with a default (or a starred one), else before ')'.
  void add_params(const Kernel& k, const std::vector<AddedParam>& added) {
    std::size_t at = k.close_paren;
    for (const auto& p : k.params)
      if (p.has_default || p.starred) {
        at = p.token;
        break;
      }
    std::size_t prev = at - 1;
    while (m_.tokens[prev].kind == TokenKind::comment || m_.tokens[prev].kind == TokenKind::nl) --prev;
    const Token& ins = m_.tokens[at];
    const Token& before = m_.tokens[prev];
    const bool comma = !before.is_op(",") && !before.is_op("(");
    const LogicalLine& def = m_.lines[k.def_line];
    std::string indent;
    if (!k.params.empty() && m_.tokens[k.params.front().token].first_on_line)
      indent = indent_of(m_.tokens[k.params.front().token].line);
    else if (!k.params.empty())
      indent = std::string(static_cast<std::size_t>(m_.tokens[k.params.front().token].col - 1), ' ');
    else
      indent = indent_of(def.line) + "    ";
    std::string names;
    // A constexpr parameter carries its annotation (Triton compiles one variant per value):
    // `syl.constexpr` is triton.language.constexpr, and `syl` is imported by every output.
    for (const auto& p : added) names += p.name + (p.type == "constexpr" ? ": syl.constexpr" : "") + ", ";
    names.pop_back();  // keep the trailing comma: it is valid in a def and separates what follows
    const std::size_t before_end = before.offset + before.text.size();
    if (ins.first_on_line) {
      if (comma) edits_.push_back({before_end, 0, ","});
      edits_.push_back({line_start(ins.line), 0, marked(indent + names) + eol_});
      return;
    }
    const std::string rest_indent = at == k.close_paren ? indent_of(def.line) : indent;
    const std::size_t erase = before.line == ins.line ? ins.offset - before_end : 0;
    const std::size_t offset = before.line == ins.line ? before_end : ins.offset;
    edits_.push_back(
        {offset, erase, std::string(comma ? "," : "") + eol_ + marked(indent + names) + eol_ + rest_indent});
  }

  // A tile block in `for <index> in range(start, stop, step)` that waits at its lookup: the
  // order entry is loaded one iteration ahead, and the tile's wait row is loaded for the next
  // iteration right after this tile's wait (the next entry's load was issued before the wait, so
  // its latency overlaps it). The wait then reads no row it has to wait for, and the call's
  // epoch is loaded once before the loop. One iteration ahead only: a value carried through two
  // iterations stops Triton's pipeliner (docs/ANNOTATIONS.md, "Loop structure"). The notify row
  // is this tile's, loaded here from the tile itself and never carried from the previous
  // iteration: placement.cpp says why.
  void replace_prefetched_lookup(const TileBlock& t, const std::string& indent) {
    static constexpr const char* kRowNext = "sy_wait_begin_next, sy_wait_end_next";
    static constexpr const char* kLoadRow = " = syl.wait_row(sy_wait_offsets, sy_tile_next)";
    const auto& [start, stop, step] = *t.prefetch;
    const LogicalLine& loop = m_.lines[*t.loop];
    const std::string before = indent_of(loop.line);
    insert_before_line(
        loop.line, before + fmt::format("sy_tile_next = syl.tile_at_or(sy_tile_order, {}, {}, {})", start, stop, step));
    insert_before_line(loop.line, before + "sy_seen = syl.no_slot_seen()");
    insert_before_line(loop.line, before + "sy_epoch_now = syl.epoch_of(sy_epoch)");
    insert_before_line(loop.line, before + kRowNext + kLoadRow);
    insert_before_line(t.end_line, indent + "sy_tile = sy_tile_next");
    insert_before_line(t.end_line, indent + "sy_wait_begin, sy_wait_end = " + kRowNext);
    if (t.notify_row_at_lookup) insert_notify_row(t, indent);
    insert_before_line(t.end_line,
                       indent + fmt::format("sy_tile_next = syl.tile_at_or(sy_tile_order, {} + ({}), {}, {})",
                                            t.index_expr, step, stop, step));
    insert_before_line(t.end_line, indent +
                                       "sy_tile, sy_seen = syl.wait_for_tile_row(sy_signals, sy_wait_slots, "
                                       "sy_slot_writers, sy_tile, sy_wait_begin, sy_wait_end, sy_epoch_now, "
                                       "sy_wait_bound_ns, sy_rank, sy_error, sy_seen)");
    insert_before_line(t.end_line, indent + kRowNext + kLoadRow);
  }

  // The tile's notify row, read by its notifies after the store (placement.cpp says why it is
  // loaded here); before the wait, so that its loads are in flight with the wait's own.
  void insert_notify_row(const TileBlock& t, const std::string& indent) {
    insert_before_line(t.end_line,
                       indent + "sy_notify_begin, sy_notify_end = syl.notify_row(sy_notify_offsets, sy_tile)");
  }

  void replace_tile(const KernelAnalysis& a, const TileBlock& t) {
    const Annotation& open = a.annotations[t.open];
    const std::string indent = indent_of(m_.lines[t.first_stmt].line);
    for (int line = open.line + 1; line < t.end_line; ++line) {
      const auto text = line_text(line);
      const auto first = text.find_first_not_of(" \t\f");
      if (first == std::string_view::npos || text[first] == '#') continue;  // blank or comment
      const auto body = text.substr(0, indent.size()) == indent ? text.substr(indent.size()) : text.substr(first);
      edits_.push_back(
          {line_start(line), text.size(), indent + std::string(kInsertedMark) + " was: " + std::string(body)});
    }
    if (t.prefetch) {
      replace_prefetched_lookup(t, indent);
    } else {
      insert_before_line(t.end_line, indent + fmt::format("sy_tile = syl.tile_at(sy_tile_order, {})", t.index_expr));
      if (t.notify_row_at_lookup) insert_notify_row(t, indent);
      // The tile's coordinates are computed from what the wait returns (placement.cpp says why).
      // sy_seen: the last slot this program saw complete (syncopate.language, wait_for_tile).
      if (t.waits_at_lookup) {
        if (t.loop) {
          const LogicalLine& loop = m_.lines[*t.loop];
          insert_before_line(loop.line, indent_of(loop.line) + "sy_seen = syl.no_slot_seen()");
        } else {
          insert_before_line(t.end_line, indent + "sy_seen = syl.no_slot_seen()");
        }
        insert_before_line(t.end_line, indent +
                                           "sy_tile, sy_seen = syl.wait_for_tile(sy_signals, sy_wait_offsets, "
                                           "sy_wait_slots, sy_slot_writers, sy_tile, sy_epoch, sy_wait_bound_ns, "
                                           "sy_rank, sy_error, sy_seen)");
      }
    }
    if (t.n.empty())
      insert_before_line(t.end_line, indent + fmt::format("{} = syl.tile_row(sy_tile, sy_tiles_n)", t.m));
    else
      insert_before_line(t.end_line, indent + fmt::format("{}, {} = syl.tile_coords(sy_tile, sy_tiles_n)", t.m, t.n));
  }

  std::string apply() {
    std::stable_sort(edits_.begin(), edits_.end(), [](const Edit& x, const Edit& y) { return x.offset < y.offset; });
    std::string out;
    out.reserve(m_.source.size() + 4096);
    std::size_t pos = 0;
    for (const auto& e : edits_) {
      if (e.offset < pos)
        throw InternalError(fmt::format("transform: overlapping edits at byte {} of {}", e.offset, m_.filename));
      out.append(m_.source.substr(pos, e.offset - pos));
      out += e.text;
      pos = e.offset + e.erase;
    }
    out.append(m_.source.substr(pos));
    return out;
  }

  const Module& m_;
  const std::vector<KernelAnalysis>& all_;
  const TransformOptions& opt_;
  std::vector<std::size_t> starts_;  // starts_[line] = byte offset of 1-based `line`
  std::string eol_;
  std::vector<Edit> edits_;
};

}  // namespace

std::string rewrite(const Module& m, const std::vector<KernelAnalysis>& analyses, const TransformOptions& options) {
  return Rewriter(m, analyses, options).run();
}

}  // namespace syncopate::transform::detail
