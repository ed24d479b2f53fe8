// Statement structure, names and memory effects of a kernel, read from its tokens.
#include "flow.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <tuple>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace {

constexpr std::array<std::string_view, 4> kLoads{"load", "gather", "_experimental_descriptor_load",
                                                 "load_tensor_descriptor"};
constexpr std::array<std::string_view, 4> kStores{"store", "scatter", "_experimental_descriptor_store",
                                                  "store_tensor_descriptor"};
// Stores that complete asynchronously whatever they are called on.
constexpr std::array<std::string_view, 4> kAsyncStores{"_experimental_descriptor_store", "store_tensor_descriptor",
                                                       "async_tma_copy_local_to_global", "async_copy_local_to_global"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& list, std::string_view word) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

bool is_clause(const Module& m, const LogicalLine& l) {
  const Token& t = m.first(l);
  return t.is_name("else") || t.is_name("elif") || t.is_name("except") || t.is_name("finally");
}

bool is_word(const Token& t) { return t.kind == TokenKind::name || t.kind == TokenKind::number; }

std::size_t assignment_split(const Module& m, const LogicalLine& l, bool* augmented) {
  const int depth = m.first(l).depth;
  std::size_t split = l.code.size();
  *augmented = false;
  for (std::size_t i = 0; i < l.code.size(); ++i) {
    const Token& t = m.tok(l, i);
    if (t.kind != TokenKind::op || t.depth != depth) continue;
    if (t.text == "=") split = i;
    const bool aug = t.text.size() >= 2 && t.text.back() == '=' && t.text != "==" && t.text != "!=" && t.text != "<=" &&
                     t.text != ">=" && t.text != ":=";
    if (aug) {
      *augmented = true;
      return i;
    }
  }
  return split;
}

std::optional<KernelFlow::ForHeader> for_header_in(const Module& m, std::size_t s) {
  const LogicalLine& l = m.lines[s];
  std::size_t i = 0;
  if (m.first(l).is_name("async")) ++i;
  if (i >= l.code.size() || !m.tok(l, i).is_name("for")) return std::nullopt;
  const int depth = m.first(l).depth;
  KernelFlow::ForHeader h;
  std::size_t j = i + 1;
  for (; j < l.code.size() && !(m.tok(l, j).is_name("in") && m.tok(l, j).depth == depth); ++j) {
    const Token& t = m.tok(l, j);
    if (t.kind == TokenKind::name && !is_keyword(t.text)) h.targets.emplace_back(t.text);
  }
  h.iter_begin = std::min(j + 1, l.code.size());
  h.iter_end = h.iter_begin;
  while (h.iter_end < l.code.size() && !(m.tok(l, h.iter_end).is_op(":") && m.tok(l, h.iter_end).depth == depth))
    ++h.iter_end;
  return h;
}

std::set<std::string> assigned_in(const Module& m, std::size_t s) {
  std::set<std::string> out;
  const LogicalLine& l = m.lines[s];
  if (auto f = for_header_in(m, s)) {
    out.insert(f->targets.begin(), f->targets.end());
    return out;
  }
  for (std::size_t i = 0; i + 1 < l.code.size(); ++i)
    if (m.tok(l, i).is_name("as") && m.tok(l, i + 1).kind == TokenKind::name) out.emplace(m.tok(l, i + 1).text);
  bool aug = false;
  const std::size_t split = assignment_split(m, l, &aug);
  if (split >= l.code.size()) return out;
  // Plain names of the target list: not attributes, not subscripted, not inside [...].
  int square = 0;
  for (std::size_t i = 0; i < split; ++i) {
    const Token& t = m.tok(l, i);
    if (t.is_op("[")) ++square;
    if (t.is_op("]")) --square;
    if (t.kind != TokenKind::name || is_keyword(t.text) || square > 0) continue;
    if (i > 0 && m.tok(l, i - 1).is_op(".")) continue;
    const Token& next = m.tok(l, i + 1);
    if (next.is_op(".") || next.is_op("[") || next.is_op("(")) continue;
    out.emplace(t.text);
  }
  return out;
}

// A call's argument: the parameter it binds (nullopt for a starred argument or one past the
// parameters) and its tokens [begin, end).
struct Arg {
  std::optional<std::size_t> param;
  std::size_t begin = 0, end = 0;
};

std::vector<Arg> bind_args(const Module& m, const Call& c, const Function& f) {
  std::vector<Arg> out;
  const int depth = m.tokens[c.open].depth + 1;
  std::size_t positional = 0;
  std::size_t begin = c.open + 1;
  auto finish = [&](std::size_t end) {
    std::size_t first = begin;
    while (first < end && (m.tokens[first].kind == TokenKind::comment || m.tokens[first].kind == TokenKind::nl))
      ++first;
    if (first >= end) return;
    Arg a;
    a.begin = first;
    a.end = end;
    const Token& t = m.tokens[first];
    if (t.is_op("*") || t.is_op("**")) {
      out.push_back(a);  // binds what it unpacks to: unknown
      return;
    }
    if (t.kind == TokenKind::name && first + 1 < end && m.tokens[first + 1].is_op("=")) {
      for (std::size_t p = 0; p < f.params.size(); ++p)
        if (f.params[p].name == t.text) a.param = p;
    } else {
      if (positional < f.params.size() && !f.params[positional].starred) a.param = positional;
      ++positional;
    }
    out.push_back(a);
  };
  for (std::size_t t = c.open + 1; t < c.close; ++t)
    if (m.tokens[t].is_op(",") && m.tokens[t].depth == depth) {
      finish(t);
      begin = t + 1;
    }
  finish(c.close);
  return out;
}

std::optional<NameUse> first_name_in(const Module& m, std::size_t begin, std::size_t end,
                                     const std::set<std::string>& names) {
  for (std::size_t t = begin; t < end; ++t) {
    const Token& tok = m.tokens[t];
    if (tok.kind != TokenKind::name || !names.count(std::string(tok.text))) continue;
    if (m.tokens[t - 1].is_op(".")) continue;
    if (t + 1 < end && m.tokens[t + 1].is_op("=")) continue;  // key=
    return NameUse{std::string(tok.text), t};
  }
  return std::nullopt;
}

std::optional<NameUse> mentions_in(const Module& m, const Call& c, const std::set<std::string>& names) {
  if (c.attribute && names.count(c.receiver)) return NameUse{c.receiver, c.name - 2};
  for (std::size_t t = c.open + 1; t < c.close; ++t) {
    const Token& tok = m.tokens[t];
    if (tok.kind != TokenKind::name || !names.count(std::string(tok.text))) continue;
    if (m.tokens[t - 1].is_op(".")) continue;
    if (m.tokens[t + 1].is_op("=") && tok.depth > m.tokens[c.open].depth) continue;  // key=
    return NameUse{std::string(tok.text), t};
  }
  return std::nullopt;
}

std::string place(const Module& m, std::size_t token) {
  const Token& t = m.tokens[token];
  return fmt::format("{}:{}:{}", m.filename, t.line, t.col);
}

}  // namespace

std::vector<Call> calls_in(const Module& m, const LogicalLine& l) {
  std::vector<Call> out;
  for (std::size_t i = 0; i + 1 < l.code.size(); ++i) {
    const Token& t = m.tok(l, i);
    if (t.kind != TokenKind::name || is_keyword(t.text) || !m.tok(l, i + 1).is_op("(")) continue;
    Call c;
    c.name = l.code[i];
    c.callee = std::string(t.text);
    c.attribute = i > 0 && m.tok(l, i - 1).is_op(".");
    if (c.attribute && i > 1 && m.tok(l, i - 2).kind == TokenKind::name) {
      c.receiver = std::string(m.tok(l, i - 2).text);  // a.b.c(): the last object, 'b'
      std::size_t r = i - 2;
      while (r >= 2 && m.tok(l, r - 1).is_op(".") && m.tok(l, r - 2).kind == TokenKind::name) r -= 2;
      c.root = std::string(m.tok(l, r).text);  // a.b.c(): 'a'
    }
    c.open = l.code[i + 1];
    const int depth = m.tokens[c.open].depth;  // a closing bracket carries its opener's depth
    c.close = c.open;
    for (std::size_t j = i + 2; j < l.code.size(); ++j) {
      const Token& u = m.tok(l, j);
      if (u.is_op(")") && u.depth == depth) {
        c.close = l.code[j];
        break;
      }
    }
    if (c.close == c.open) c.close = l.code.back();
    out.push_back(std::move(c));
  }
  return out;
}

KernelFlow::KernelFlow(const Module& m, const Kernel& k, ModuleLoader& loader) : m_(m), k_(k), loader_(loader) {
  parent_.resize(k_.body_end - k_.body_begin);
  for (std::size_t s = k_.body_begin; s < k_.body_end; ++s) {
    for (std::size_t p = s; p-- > k_.body_begin;) {
      if (m_.lines[p].col < m_.lines[s].col) {
        parent_[s - k_.body_begin] = p;
        break;
      }
    }
  }
  scope_of(m_);
  follow_calls();
  compute_helper_effects();
  compute_helper_reads();
}

const KernelFlow::Scope& KernelFlow::scope_of(const Module& m) {
  for (const auto& sc : scopes_)
    if (sc->module == &m) return *sc;
  auto sc = std::make_unique<Scope>();
  sc->module = &m;
  for (const auto& l : m.lines)
    if (l.col == 1 && (m.first(l).is_name("import") || m.first(l).is_name("from"))) {
      auto names = bound_names(m, l);
      sc->imports.insert(names.begin(), names.end());
      // `import triton...` / `from triton... import`: the language itself, whose calls are
      // judged by name (loads, stores); anything else is code this file does not hold.
      if (l.code.size() < 2 || !m.tok(l, 1).is_name("triton")) sc->foreign_imports.insert(names.begin(), names.end());
    }
  sc->from_imports = from_imports(m);
  for (std::size_t li = 0; li < m.lines.size(); ++li) {
    const LogicalLine& def = m.lines[li];
    if (def.col != 1 || !m.first(def).is_name("def")) continue;
    if (auto f = read_function(m, li)) {
      Helper& h = helpers_[{sc.get(), f->name}];
      h.scope = sc.get();
      h.reads.assign(f->params.size(), std::nullopt);
      h.function = std::move(*f);
    }
  }
  scopes_.push_back(std::move(sc));
  return *scopes_.back();
}

const KernelFlow::Helper* KernelFlow::callee(const Scope& sc, const std::string& name) const {
  if (auto h = helpers_.find({&sc, name}); h != helpers_.end()) return &h->second;
  if (auto i = imported_.find({&sc, name}); i != imported_.end()) return i->second;
  return nullptr;
}

void KernelFlow::follow_calls() {
  // The kernel's body, then the body of each helper it reaches; a name imported by `from m
  // import f` is looked up in m's source the first time it is called.
  std::vector<std::tuple<const Scope*, std::size_t, std::size_t>> work{{&kernel_scope(), k_.body_begin, k_.body_end}};
  std::set<const Helper*> seen;
  while (!work.empty()) {
    const auto [sc, begin, end] = work.back();
    work.pop_back();
    for (std::size_t s = begin; s < end; ++s)
      for (const Call& c : calls_in(*sc->module, sc->module->lines[s])) {
        if (c.attribute) continue;
        const Helper* h = callee(*sc, c.callee);
        if (!h && sc->from_imports.count(c.callee)) h = &resolve(*sc, c.callee, c);
        if (h && seen.insert(h).second) work.emplace_back(h->scope, h->function.body_begin, h->function.body_end);
      }
  }
}

const KernelFlow::Helper& KernelFlow::resolve(const Scope& sc, const std::string& local, const Call& call) {
  const std::string called_at = fmt::format("{} ('{}(...)')", place(*sc.module, call.name), call.callee);
  const Scope* at = &sc;
  std::string name = local;
  std::vector<HelperKey> chain;  // the names that lead to the definition (re-exports)
  for (int hops = 0;; ++hops) {
    chain.emplace_back(at, name);
    const FromImport& imp = at->from_imports.at(name);
    const Scope& target = scope_of(loader_.load(*at->module, imp, called_at));
    if (auto h = helpers_.find({&target, imp.name}); h != helpers_.end()) {
      for (const auto& key : chain) imported_[key] = &h->second;
      return h->second;
    }
    if (target.from_imports.count(imp.name) && hops < 16) {  // re-exported: `from .x import f` there
      at = &target;
      name = imp.name;
      continue;
    }
    throw TransformError(fmt::format(
        "{}: {}: {} defines no function '{}' (a top-level def, or a 'from ... import' of one), and {} calls it: "
        "the transformer must read the helper's body to see what it does to memory; import the function from "
        "the module that defines it (a name assigned there, an alias, is not followed)",
        place(*at->module, imp.token), imp.text(), target.module->filename, imp.name, called_at));
  }
}

bool KernelFlow::is_loop(std::size_t s) const {
  const LogicalLine& l = m_.lines[s];
  return m_.first(l).is_name("for") || m_.first(l).is_name("while") ||
         (m_.first(l).is_name("async") && l.code.size() > 1 && m_.tok(l, 1).is_name("for"));
}

bool KernelFlow::is_while(std::size_t s) const { return m_.first(m_.lines[s]).is_name("while"); }

std::vector<std::size_t> KernelFlow::enclosing_loops(std::size_t s) const {
  std::vector<std::size_t> out;
  for (auto p = parent(s); p; p = parent(*p))
    if (is_loop(*p)) out.push_back(*p);
  return out;
}

std::size_t KernelFlow::block_end(std::size_t s) const {
  std::size_t e = s + 1;
  while (e < k_.body_end && m_.lines[e].col >= m_.lines[s].col) ++e;
  return e;
}

std::size_t KernelFlow::statement_end(std::size_t s) const {
  std::size_t e = s + 1;
  while (e < k_.body_end &&
         (m_.lines[e].col > m_.lines[s].col || (m_.lines[e].col == m_.lines[s].col && is_clause(m_, m_.lines[e]))))
    ++e;
  return e;
}

std::set<std::string> KernelFlow::assigned(std::size_t s) const { return assigned_in(m_, s); }

std::vector<NameUse> KernelFlow::reads(std::size_t s) const {
  std::vector<NameUse> out;
  const LogicalLine& l = m_.lines[s];
  const std::set<std::string> targets = assigned(s);
  bool aug = false;
  const std::size_t split = for_header(s) ? 0 : assignment_split(m_, l, &aug);
  std::size_t target_end = split < l.code.size() ? split : 0;
  if (auto f = for_header(s)) target_end = f->iter_begin;
  const int depth = m_.first(l).depth;
  for (std::size_t i = 0; i < l.code.size(); ++i) {
    const Token& t = m_.tok(l, i);
    if (t.kind != TokenKind::name || is_keyword(t.text)) continue;
    if (i > 0 && m_.tok(l, i - 1).is_op(".")) continue;
    if (i + 1 < l.code.size() && m_.tok(l, i + 1).is_op("=") && t.depth > depth) continue;  // f(key=...)
    if (i < target_end && !aug && targets.count(std::string(t.text))) continue;
    out.push_back({std::string(t.text), l.code[i]});
  }
  return out;
}

std::vector<NameUse> KernelFlow::value_reads(std::size_t s) const { return value_reads(kernel_scope(), s); }

std::vector<NameUse> KernelFlow::value_reads(const Scope& sc, std::size_t s) const {
  const Module& m = *sc.module;
  std::vector<NameUse> out;
  const LogicalLine& l = m.lines[s];
  std::size_t begin = l.code.size(), end = l.code.size();
  if (auto f = for_header_in(m, s)) {
    begin = f->iter_begin;
    end = f->iter_end;
  } else {
    bool aug = false;
    const std::size_t split = assignment_split(m, l, &aug);
    if (split < l.code.size()) begin = split + 1;
  }
  // Token ranges whose value is data from memory, not a pointer: arguments of reading calls
  // (and the receiver of a descriptor load).
  std::vector<std::pair<std::size_t, std::size_t>> data;
  for (const Call& c : calls_in(m, l)) {
    if (!call_effect(sc, c).reads) continue;
    data.emplace_back(c.open, c.close);
    if (c.attribute && !c.root.empty() && !sc.imports.count(c.root)) data.emplace_back(c.name - 2, c.name - 2);
  }
  const int depth = m.first(l).depth;
  for (std::size_t i = begin; i < end; ++i) {
    const Token& t = m.tok(l, i);
    if (t.kind != TokenKind::name || is_keyword(t.text)) continue;
    if (i > 0 && m.tok(l, i - 1).is_op(".")) continue;
    if (i + 1 < l.code.size() && m.tok(l, i + 1).is_op("=") && t.depth > depth) continue;
    const std::size_t tok = l.code[i];
    if (std::any_of(data.begin(), data.end(), [&](auto r) { return tok >= r.first && tok <= r.second; })) continue;
    out.push_back({std::string(t.text), tok});
  }
  return out;
}

std::vector<Call> KernelFlow::calls(std::size_t s) const { return calls_in(m_, m_.lines[s]); }

std::string KernelFlow::text(std::size_t s, std::size_t from, std::size_t to) const {
  const LogicalLine& l = m_.lines[s];
  std::string out;
  for (std::size_t i = from; i < to && i < l.code.size(); ++i) {
    if (i > from && is_word(m_.tok(l, i)) && is_word(m_.tok(l, i - 1))) out += ' ';
    out += m_.tok(l, i).text;
  }
  return out;
}

std::optional<KernelFlow::ForHeader> KernelFlow::for_header(std::size_t s) const { return for_header_in(m_, s); }

std::string KernelFlow::header(std::size_t s) const {
  const LogicalLine& l = m_.lines[s];
  std::size_t end = l.code.size();
  while (end > 1 && m_.tok(l, end - 1).is_op(":")) --end;
  const Token& first = m_.tok(l, 0);
  const Token& last = m_.tok(l, end - 1);
  std::string out;
  for (char c : m_.source.substr(first.offset, last.offset + last.text.size() - first.offset)) {
    if (c == '\n' || c == '\r') c = ' ';
    if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
  }
  return out;
}

std::optional<KernelFlow::RangeArgs> KernelFlow::range_args(std::size_t s) const {
  const auto h = for_header(s);
  if (!h || h->iter_end - h->iter_begin < 3) return std::nullopt;
  const LogicalLine& l = m_.lines[s];
  for (const Call& c : calls(s)) {
    if (c.callee != "range" && c.callee != "static_range") continue;
    if (c.name < l.code[h->iter_begin] || c.close != l.code[h->iter_end - 1]) continue;
    // Split the arguments at top-level commas; stop at the first keyword argument.
    std::vector<std::string> args;
    const int depth = m_.tokens[c.open].depth + 1;
    std::vector<std::size_t> code_idx;
    for (std::size_t k = 0; k < l.code.size(); ++k)
      if (l.code[k] > c.open && l.code[k] < c.close) code_idx.push_back(k);
    std::size_t from = 0;
    for (std::size_t i = 0; i <= code_idx.size(); ++i) {
      const bool at_end = i == code_idx.size();
      if (!at_end && !(m_.tok(l, code_idx[i]).is_op(",") && m_.tok(l, code_idx[i]).depth == depth)) continue;
      if (i > from) {
        const std::size_t b = code_idx[from], e = code_idx[i - 1] + 1;
        if (e - b >= 2 && m_.tok(l, b).kind == TokenKind::name && m_.tok(l, b + 1).is_op("=")) break;
        args.push_back(text(s, b, e));
      }
      from = i + 1;
    }
    RangeArgs r;
    r.is_static = c.callee == "static_range";
    if (args.size() == 1) r.stop = args[0];
    if (args.size() >= 2) {
      r.start = args[0];
      r.stop = args[1];
    }
    if (args.size() >= 3) r.step = args[2];
    r.has_stop = !args.empty();
    return r;
  }
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> KernelFlow::increment(std::size_t s) const {
  const LogicalLine& l = m_.lines[s];
  if (l.code.size() < 3 || m_.tok(l, 0).kind != TokenKind::name) return std::nullopt;
  const std::string v(m_.tok(l, 0).text);
  const auto reads_v = [&](std::size_t from) {
    for (std::size_t i = from; i < l.code.size(); ++i)
      if (m_.tok(l, i).is_name(v) && !m_.tok(l, i - 1).is_op(".")) return true;
    return false;
  };
  if (m_.tok(l, 1).is_op("+=") && !reads_v(2)) return std::make_pair(v, text(s, 2, l.code.size()));
  if (l.code.size() >= 5 && m_.tok(l, 1).is_op("=") && m_.tok(l, 2).is_name(v) && m_.tok(l, 3).is_op("+") &&
      !reads_v(4)) {
    // v = v + e: only when '+' is the top-level operator (e holds no lower-precedence operator)
    for (std::size_t i = 4; i < l.code.size(); ++i) {
      const Token& t = m_.tok(l, i);
      if (t.depth == m_.first(l).depth && t.kind == TokenKind::op &&
          (t.text == "<" || t.text == ">" || t.text == "==" || t.text == "if" || t.text == "&" || t.text == "|"))
        return std::nullopt;
    }
    return std::make_pair(v, text(s, 4, l.code.size()));
  }
  return std::nullopt;
}

std::optional<std::string> KernelFlow::plain_assignment(std::size_t s, const std::string& v) const {
  const LogicalLine& l = m_.lines[s];
  if (l.code.size() < 3 || !m_.tok(l, 0).is_name(v) || !m_.tok(l, 1).is_op("=")) return std::nullopt;
  bool aug = false;
  if (assignment_split(m_, l, &aug) != 1) return std::nullopt;  // a = b = c, or no assignment
  return text(s, 2, l.code.size());
}

MemoryEffect KernelFlow::call_effect(const Scope& sc, const Call& c) const {
  MemoryEffect e;
  if (c.callee.rfind("atomic_", 0) == 0) {
    e.reads = e.writes = true;
    return e;
  }
  const bool library = c.attribute && !c.root.empty() && sc.imports.count(c.root);
  if (!c.attribute)
    if (const Helper* h = callee(sc, c.callee)) return h->effect;
  if (!c.attribute && !library) return e;  // a plain function that is no helper the kernel reaches
  if (in(kLoads, c.callee)) e.reads = true;
  if (in(kStores, c.callee) || in(kAsyncStores, c.callee)) {
    e.writes = true;
    // A store method on a descriptor object (not `tl.store`) is a TMA store.
    e.async_store = in(kAsyncStores, c.callee) || !library;
  }
  return e;
}

MemoryEffect KernelFlow::effect(const Call& c) const { return call_effect(kernel_scope(), c); }

void KernelFlow::compute_helper_effects() {
  // Every module-level function of the modules read and the calls in its body, to a fixed point.
  std::map<const Helper*, std::vector<Call>> bodies;
  for (auto& [key, h] : helpers_) {
    auto& calls = bodies[&h];
    for (std::size_t s = h.function.body_begin; s < h.function.body_end; ++s) {
      auto more = calls_in(*h.scope->module, h.scope->module->lines[s]);
      calls.insert(calls.end(), more.begin(), more.end());
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [key, h] : helpers_) {
      MemoryEffect& e = h.effect;
      for (const Call& c : bodies[&h]) {
        const MemoryEffect ce = call_effect(*h.scope, c);
        const MemoryEffect merged{e.reads || ce.reads, e.writes || ce.writes, e.async_store || ce.async_store};
        if (merged.reads != e.reads || merged.writes != e.writes || merged.async_store != e.async_store) {
          e = merged;
          changed = true;
        }
      }
    }
  }
}

void KernelFlow::compute_helper_reads() {
  // Per helper and parameter, the names its body derives from the parameter; then, to a fixed
  // point, the first read through one of them (a helper's own, or one of the helpers it calls).
  std::map<const Helper*, std::vector<std::set<std::string>>> derived;
  for (auto& [key, h] : helpers_) {
    auto& d = derived[&h];
    for (const auto& p : h.function.params)
      d.push_back(p.starred ? std::set<std::string>{}
                            : derived_in(*h.scope, p.name, h.function.body_begin, h.function.body_end));
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [key, h] : helpers_) {
      const Module& m = *h.scope->module;
      for (std::size_t s = h.function.body_begin; s < h.function.body_end; ++s)
        for (const Call& c : calls_in(m, m.lines[s]))
          for (std::size_t i = 0; i < h.reads.size(); ++i) {
            if (h.reads[i]) continue;
            if (auto r = read_through(*h.scope, c, derived[&h][i])) {
              h.reads[i] = r->site;
              if (h.reads[i]->function.empty()) h.reads[i]->function = h.function.name;
              changed = true;
            }
          }
    }
  }
}

bool KernelFlow::opaque(const Scope& sc, const Call& c) const {
  return (c.attribute ? sc.foreign_imports.count(c.root) : sc.foreign_imports.count(c.callee)) > 0 &&
         !(!c.attribute && callee(sc, c.callee));
}

std::optional<ReadThrough> KernelFlow::read_through(const Call& c, const std::set<std::string>& names) const {
  return read_through(kernel_scope(), c, names);
}

std::optional<ReadThrough> KernelFlow::read_through(const Scope& sc, const Call& c,
                                                    const std::set<std::string>& names) const {
  if (names.empty()) return std::nullopt;
  const Module& m = *sc.module;
  if (!c.attribute)
    if (const Helper* h = callee(sc, c.callee)) {
      for (const Arg& a : bind_args(m, c, h->function)) {
        const auto use = first_name_in(m, a.begin, a.end, names);
        if (!use) continue;
        if (!a.param) {  // unpacked into parameters unknown here: as the helper reads anything
          if (h->effect.reads) return ReadThrough{*use, ReadSite{c.name, "", "", &m}};
          continue;
        }
        if (const auto& site = h->reads[*a.param]) return ReadThrough{*use, *site};
      }
      return std::nullopt;
    }
  if (opaque(sc, c)) {
    if (auto use = mentions_in(m, c, names)) return ReadThrough{*use, ReadSite{c.name, "", c.callee, &m}};
    return std::nullopt;
  }
  if (!call_effect(sc, c).reads) return std::nullopt;
  if (auto use = mentions_in(m, c, names)) return ReadThrough{*use, ReadSite{c.name, "", "", &m}};
  return std::nullopt;
}

std::optional<NameUse> KernelFlow::mentions(const Call& c, const std::set<std::string>& names) const {
  return mentions_in(m_, c, names);
}

std::set<std::string> KernelFlow::derived_from(const std::string& root) const {
  return derived_in(kernel_scope(), root, k_.body_begin, k_.body_end);
}

std::set<std::string> KernelFlow::derived_in(const Scope& sc, const std::string& root, std::size_t begin,
                                             std::size_t end) const {
  std::set<std::string> out{root};
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t s = begin; s < end; ++s) {
      const auto vr = value_reads(sc, s);
      if (!std::any_of(vr.begin(), vr.end(), [&](const NameUse& u) { return out.count(u.name); })) continue;
      for (const auto& name : assigned_in(*sc.module, s))
        if (out.insert(name).second) changed = true;
    }
  }
  return out;
}

}  // namespace syncopate::transform::detail
