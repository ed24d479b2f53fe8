// Checking a kernel's annotations: the rules of docs/ANNOTATIONS.md, each with its own message.
#include "analysis.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void check_reserved_names(const Module& m) {
  for (const Token& t : m.tokens) {
    if (t.kind != TokenKind::name) continue;
    if (t.text == "syl" || t.text == "__syncopate__" || t.text.substr(0, 3) == "sy_")
      throw TransformError(
          fmt::format("{}:{}:{}: name '{}': the names 'syl', 'sy_*' and '__syncopate__' are reserved for the "
                      "transformer's output (is this file transformed already?); rename it",
                      m.filename, t.line, t.col, t.text));
  }
}

// Plain names an expression reads, skipping attributes, keywords and `key=` of calls.
std::vector<std::string> expression_names(std::string_view expr, std::string_view filename) {
  std::vector<std::string> out;
  const auto toks = tokenize(expr, filename);
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const Token& t = toks[i];
    if (t.kind != TokenKind::name || is_keyword(t.text)) continue;
    if (i > 0 && toks[i - 1].is_op(".")) continue;
    if (i + 1 < toks.size() && toks[i + 1].is_op("=") && t.depth > 0) continue;
    out.emplace_back(t.text);
  }
  return out;
}

class Checker {
 public:
  Checker(const Module& m, KernelAnalysis& a, const TransformOptions& o) : m_(m), a_(a), opt_(o) {
    for (const auto& p : a_.kernel.params) params_.push_back(p.name);
    globals_ = module_names(m_);
  }

  void run() {
    for (std::size_t i = 0; i < a_.annotations.size(); ++i) {
      const Annotation& ann = a_.annotations[i];
      switch (ann.kind) {
        case AnnotationKind::tile:
          open_tile(i);
          break;
        case AnnotationKind::end:
          close_tile(ann);
          break;
        case AnnotationKind::consume:
        case AnnotationKind::produce:
        case AnnotationKind::consume_block:
          access(i);
          break;
      }
    }
    if (open_) {
      const Annotation& t = a_.annotations[*open_];
      t.fail(m_.filename, "the tile block is never closed with '# @sy.end'");
    }
    if (a_.tiles.empty()) {
      const LogicalLine& def = m_.lines[a_.kernel.def_line];
      throw TransformError(
          fmt::format("{}:{}:{}: kernel '{}': no '# @sy.tile' annotation; mark the statements that compute "
                      "the tile's program ids (see docs/ANNOTATIONS.md)",
                      m_.filename, def.line, def.col, a_.kernel.name));
    }
  }

 private:
  // The statement an annotation marks: the next logical line, indented like the annotation.
  std::size_t marked_statement(const Annotation& ann) const {
    const std::size_t s = line_at_or_after(m_, ann.line + 1);
    if (s >= a_.kernel.body_end) ann.fail(m_.filename, "it marks no statement: the kernel ends after it");
    const LogicalLine& l = m_.lines[s];
    if (l.col != ann.col)
      ann.fail(m_.filename, fmt::format("it must be indented like the statement it marks (line {} "
                                        "starts at column {}, the annotation at column {})",
                                        l.line, l.col, ann.col));
    return s;
  }

  std::set<std::string> bound_before(int line) const {
    std::set<std::string> out;
    for (std::size_t s = a_.kernel.body_begin; s < a_.kernel.body_end && m_.lines[s].line < line; ++s) {
      auto names = bound_names(m_, m_.lines[s]);
      out.insert(names.begin(), names.end());
    }
    return out;
  }

  void open_tile(std::size_t i) {
    const Annotation& ann = a_.annotations[i];
    if (open_)
      ann.fail(m_.filename, fmt::format("a tile block opens inside the tile block opened at line {}; "
                                        "close that one with '# @sy.end' first",
                                        a_.annotations[*open_].line));
    marked_statement(ann);
    open_ = i;
  }

  void close_tile(const Annotation& end) {
    if (!open_) end.fail(m_.filename, "'@sy.end' closes no '@sy.tile' block");
    const Annotation& tile = a_.annotations[*open_];
    if (end.col != tile.col)
      end.fail(m_.filename, fmt::format("'@sy.end' at column {} does not line up with the '@sy.tile' "
                                        "at line {}, column {}: indent it to column {}, on the line after "
                                        "the block's last statement (a tile block is statements of one "
                                        "indentation level)",
                                        end.col, tile.line, tile.col, tile.col));
    TileBlock b;
    b.open = *open_;
    b.end_line = end.line;
    b.first_stmt = line_at_or_after(m_, tile.line + 1);
    b.end_stmt = std::min(line_at_or_after(m_, end.line + 1), a_.kernel.body_end);
    if (b.first_stmt >= b.end_stmt || m_.lines[b.first_stmt].line > end.line)
      tile.fail(m_.filename, "the tile block is empty");
    std::set<std::string> assigned;
    for (std::size_t s = b.first_stmt; s < b.end_stmt; ++s) {
      if (m_.lines[s].col < tile.col)
        tile.fail(m_.filename, fmt::format("the tile block leaves its indentation level at line {} "
                                           "before '@sy.end'",
                                           m_.lines[s].line));
      auto names = bound_names(m_, m_.lines[s]);
      assigned.insert(names.begin(), names.end());
    }
    if (b.end_stmt < a_.kernel.body_end && (m_.lines[b.end_stmt].col > tile.col ||
                                            (m_.lines[b.end_stmt].col == tile.col && is_clause(m_.lines[b.end_stmt]))))
      end.fail(m_.filename, fmt::format("'@sy.end' cuts a compound statement: line {} still belongs "
                                        "to it",
                                        m_.lines[b.end_stmt].line));
    b.index_expr = tile.arg("index")->value;
    b.m = tile.arg("m")->value;
    if (const auto* n = tile.arg("n")) b.n = n->value;
    for (const char* key : {"m", "n"}) {
      const AnnotationArg* arg = tile.arg(key);
      if (arg != nullptr && !assigned.count(arg->value))
        tile.fail(m_.filename,
                  fmt::format("'{}' is not assigned in the tile block (lines {}-{})", arg->value, tile.line + 1,
                              end.line - 1),
                  arg->col);
    }
    check_index(tile, assigned);
    check_no_use_after(tile, b, assigned);
    a_.tiles.push_back(b);
    open_.reset();
  }

  void check_index(const Annotation& tile, const std::set<std::string>& assigned) const {
    const AnnotationArg* index = tile.arg("index");
    const auto before = bound_before(tile.line);
    for (const auto& name : expression_names(index->value, m_.filename)) {
      // The block's assignments disappear with it: a counter it advances would stop advancing.
      if (assigned.count(name))
        tile.fail(m_.filename,
                  fmt::format("index= uses '{}', which the tile block assigns and the "
                              "rewrite removes; use what the block starts from "
                              "(e.g. tl.program_id(0)), and in a loop advance the counter "
                              "outside the block (e.g. '{} += <step>' after '# @sy.end'), or "
                              "it stops advancing",
                              name, name),
                  index->col);
      const bool param = std::find(params_.begin(), params_.end(), name) != params_.end();
      if (param || before.count(name) || globals_.count(name)) continue;
      tile.fail(m_.filename,
                fmt::format("index= uses '{}', which is neither a parameter of kernel "
                            "'{}', nor a variable bound before line {}, nor a module-level name",
                            name, a_.kernel.name, tile.line),
                index->col);
    }
  }

  // A variable the block assigns (other than m and n) disappears with the block.
  void check_no_use_after(const Annotation& tile, const TileBlock& b, const std::set<std::string>& assigned) const {
    std::set<std::string> live = assigned;
    live.erase(b.m);
    live.erase(b.n);
    for (std::size_t s = b.end_stmt; s < a_.kernel.body_end && !live.empty(); ++s) {
      const LogicalLine& l = m_.lines[s];
      for (std::size_t i = 0; i < l.code.size(); ++i) {
        const Token& t = m_.tok(l, i);
        if (t.kind != TokenKind::name || !live.count(std::string(t.text))) continue;
        if (i > 0 && m_.tok(l, i - 1).is_op(".")) continue;
        if (i + 1 < l.code.size() && m_.tok(l, i + 1).is_op("=") && t.depth == m_.first(l).depth)
          continue;  // a plain re-assignment, not a use
        throw TransformError(
            fmt::format("{}:{}:{}: {}: '{}' is assigned in the tile block and used here, but the block is "
                        "replaced by the tile-order lookup; move that assignment above the block",
                        m_.filename, t.line, t.col, tile.text, t.text));
      }
      for (const auto& name : bound_names(m_, l)) live.erase(name);
    }
  }

  void access(std::size_t i) {
    const Annotation& ann = a_.annotations[i];
    const bool per_block = ann.kind == AnnotationKind::consume_block;
    const bool consume = ann.kind == AnnotationKind::consume || per_block;
    const char* what = per_block ? "consume_block" : consume ? "consume" : "produce";
    if (open_)
      ann.fail(m_.filename, fmt::format("'@sy.{}' inside the tile block opened at line {}; place it "
                                        "after '@sy.end'",
                                        what, a_.annotations[*open_].line));
    if (a_.tiles.empty())
      ann.fail(m_.filename, fmt::format("'@sy.{}' has no '@sy.tile' annotation before it: the {} "
                                        "needs the tile's id",
                                        what, consume ? "wait" : "notify"));
    const TileBlock& tile = a_.tiles.back();
    const Annotation& tile_ann = a_.annotations[tile.open];
    const std::size_t stmt = marked_statement(ann);
    for (std::size_t s = tile.end_stmt; s <= stmt; ++s)
      if (m_.lines[s].col < tile_ann.col)
        ann.fail(m_.filename, fmt::format("it is outside the scope of the tile block at line {} "
                                          "(that block's level ends at line {})",
                                          tile_ann.line, m_.lines[s].line));
    const AnnotationArg* param = ann.positional();
    if (std::find(params_.begin(), params_.end(), param->value) == params_.end())
      ann.fail(m_.filename,
               fmt::format("'{}' is not a parameter of kernel '{}' (parameters: {})", param->value, a_.kernel.name,
                           join(params_)),
               param->col);
    const AnnotationArg* mv = ann.arg("m");
    const AnnotationArg* nv = ann.arg("n");
    if (mv && mv->value != tile.m)
      ann.fail(m_.filename,
               fmt::format("m={} is not the tile's row coordinate m={} (line {})", mv->value, tile.m, tile_ann.line),
               mv->col);
    if (nv && nv->value != tile.n)
      ann.fail(m_.filename,
               tile.n.empty()
                   ? fmt::format("n={} but the tile at line {} has no n coordinate", nv->value, tile_ann.line)
                   : fmt::format("n={} is not the tile's column coordinate n={} (line {})", nv->value, tile.n,
                                 tile_ann.line),
               nv->col);
    if (ann.arg("m_dim") && !mv) ann.fail(m_.filename, "'m_dim=' needs 'm='", ann.arg("m_dim")->col);
    if (ann.arg("n_dim") && !nv) ann.fail(m_.filename, "'n_dim=' needs 'n='", ann.arg("n_dim")->col);
    const AnnotationArg* shard = ann.arg("m_local_shard");
    if (shard && !mv)
      ann.fail(m_.filename, "'m_local_shard=' needs 'm=' (the shard is of the tile's rows)", shard->col);

    AnnotatedAccess acc;
    acc.param = param->value;
    acc.line = ann.line;
    acc.access.role = consume ? lower::AccessRole::consume : lower::AccessRole::produce;
    acc.access.tensor = tensor_name(ann, param->value);
    acc.access.m_dim = mv ? (ann.arg("m_dim") ? std::stoi(ann.arg("m_dim")->value) : 0) : -1;
    acc.access.n_dim = nv ? (ann.arg("n_dim") ? std::stoi(ann.arg("n_dim")->value) : 1) : -1;
    if (per_block) {  // the blocked dimension; the tile's n only selects the table row
      acc.per_block = true;
      acc.access.m_dim = ann.arg("dim") ? std::stoi(ann.arg("dim")->value) : -1;
      acc.access.n_dim = -1;
      const AnnotationArg* order = ann.arg("order");
      acc.arrival_order = order != nullptr && order->value.find("arrival") != std::string::npos;
      check_block_names(ann);
    }
    acc.access.m_local_shard = shard && (shard->value == "True" || shard->value == "1");
    if (acc.access.m_dim >= 0 && acc.access.m_dim == acc.access.n_dim)
      ann.fail(m_.filename, fmt::format("m and n index the same tensor dimension {}", acc.access.m_dim));
    check_against_plan(ann, acc.access);
    a_.accesses.push_back(acc);

    Site site;
    site.annotation = i;
    site.stmt = stmt;
    std::size_t last = stmt;
    while (last + 1 < a_.kernel.body_end && continues(m_.lines[stmt], m_.lines[last + 1])) ++last;
    site.last_line = m_.lines[last].end_line;
    if (per_block) {
      BlockSite b;
      b.site = site;
      b.block_expr = ann.arg("block")->value;
      b.key = nv ? nv->value : "";
      b.arrival = acc.arrival_order;
      a_.block_waits.push_back(std::move(b));  // loop fields: check_block_waits
      return;
    }
    (consume ? a_.waits : a_.notifies).push_back(site);
  }

  // Every name `block=` reads exists where the wait goes (parameter, earlier variable, global).
  void check_block_names(const Annotation& ann) const {
    const AnnotationArg* block = ann.arg("block");
    const auto before = bound_before(ann.line + 1);
    for (const auto& name : expression_names(block->value, m_.filename)) {
      const bool param = std::find(params_.begin(), params_.end(), name) != params_.end();
      if (param || before.count(name) || globals_.count(name)) continue;
      ann.fail(m_.filename,
               fmt::format("block= uses '{}', which is neither a parameter of kernel '{}', "
                           "nor a variable bound before line {}, nor a module-level name",
                           name, a_.kernel.name, ann.line + 1),
               block->col);
    }
  }

  // Does `next` still belong to the compound statement headed by `head` (its body, or an
  // else/elif/except/finally clause of it)?
  bool continues(const LogicalLine& head, const LogicalLine& next) const {
    if (next.col > head.col) return true;
    return next.col == head.col && is_clause(next);
  }
  bool is_clause(const LogicalLine& l) const {
    const Token& t = m_.first(l);
    return t.is_name("else") || t.is_name("elif") || t.is_name("except") || t.is_name("finally");
  }

  static std::string tensor_name(const Annotation& ann, const std::string& param) {
    if (const auto* t = ann.arg("tensor")) {
      if (t->is_string)
        return t->value.substr(t->value.find_first_of("\"'") + 1, t->value.size() - t->value.find_first_of("\"'") - 2);
      return t->value;
    }
    for (std::string_view suffix : {"_ptr", "_desc"})
      if (param.size() > suffix.size() && param.ends_with(suffix)) return param.substr(0, param.size() - suffix.size());
    return param;
  }

  void check_against_plan(const Annotation& ann, const lower::TileAccess& acc) const {
    if (opt_.plan == nullptr) return;
    const auto it = opt_.plan->tensors.find(acc.tensor);
    if (it == opt_.plan->tensors.end()) {
      std::vector<std::string> names;
      for (const auto& [n, spec] : opt_.plan->tensors) names.push_back(n);
      ann.fail(m_.filename, fmt::format("tensor '{}' is not in the plan (tensors: {}); name it with "
                                        "tensor=",
                                        acc.tensor, join(names)));
    }
    const int rank = static_cast<int>(it->second.shape.size());
    if (acc.m_dim >= rank || acc.n_dim >= rank)
      ann.fail(m_.filename, fmt::format("tensor '{}' has {} dimension{}, the annotation indexes "
                                        "dimension {}",
                                        acc.tensor, rank, rank == 1 ? "" : "s", std::max(acc.m_dim, acc.n_dim)));
  }

  const Module& m_;
  KernelAnalysis& a_;
  const TransformOptions& opt_;
  std::vector<std::string> params_;
  std::set<std::string> globals_;
  std::optional<std::size_t> open_;
};

}  // namespace

KernelAnalysis analyze(const Module& m, std::string_view kernel_name, const TransformOptions& options) {
  KernelAnalysis a;
  a.kernel = find_kernel(m, kernel_name);
  check_reserved_names(m);
  const LogicalLine& def = m.lines[a.kernel.def_line];
  // The kernel's comments run up to the next statement outside it; after its last statement,
  // only comments indented deeper than the def (e.g. a closing '# @sy.end') still belong to it.
  const int next_outside =
      a.kernel.body_end < m.lines.size() ? m.lines[a.kernel.body_end].line : std::numeric_limits<int>::max();
  for (std::size_t i = 0; i < m.tokens.size(); ++i) {
    const Token& t = m.tokens[i];
    if (t.kind != TokenKind::comment || !looks_like_annotation(t.text)) continue;
    if (t.line < def.line || t.line >= next_outside) continue;  // another function's
    if (t.line > a.kernel.body_last_line && t.col <= def.col) continue;
    Annotation ann = parse_annotation(m, i);
    if (t.line < a.kernel.body_first_line)
      ann.fail(m.filename, "an annotation must be inside the kernel's body, not in its signature");
    if (t.depth > 0)
      ann.fail(m.filename, "an annotation cannot sit inside brackets: it must precede a whole statement");
    if (!t.first_on_line) ann.fail(m.filename, "an annotation must be a comment on a line of its own");
    a.annotations.push_back(std::move(ann));
  }
  Checker(m, a, options).run();
  // The helpers the kernel calls, those imported from other modules included (read from disk).
  ModuleLoader loader(options.module_paths);
  const KernelFlow flow(m, a.kernel, loader);
  check_block_waits(flow, a);
  check_safety(flow, a);
  place_waits(flow, a);
  place_notify_rows(flow, a);
  return a;
}

}  // namespace syncopate::transform::detail
