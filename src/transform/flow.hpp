// Internal: what the statements of a kernel do, as far as the safety rules need it: which
// compound statement (and loop) encloses each one, which names a statement reads and assigns,
// the calls it makes, and what each helper it reaches does to memory: the module-level
// functions of its file and those it imports by name from other modules (imports.hpp).
//
// It reads source text, not types: a name "derived from" a pointer is any name assigned from an
// expression that mentions it. That over-approximates (a rule may refuse a kernel that is fine,
// never the other way round) except through memory: a value loaded through a pointer is data,
// not the pointer, so it carries no taint.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "imports.hpp"
#include "source_model.hpp"

namespace syncopate::transform::detail {

// `callee(...)` or `receiver.callee(...)` in a logical line; token indices are into Module::tokens.
struct Call {
  std::size_t name = 0;             // the callee's NAME token
  std::string callee;               // its last name: "load", "store", "_grouped_pid"
  std::string receiver;             // the plain name before '.', when there is one ("tl", "c_desc")
  std::string root;                 // the first name of a dotted callee ("tl" of tl.extra.cuda.f)
  bool attribute = false;           // called as `<something>.callee(...)`
  std::size_t open = 0, close = 0;  // its brackets
};

// What a call does to memory.
struct MemoryEffect {
  bool reads = false;
  bool writes = false;
  bool async_store = false;  // a TMA (bulk, asynchronous) store: complete only after a store wait
};

// A name and the token it was read at.
struct NameUse {
  std::string name;
  std::size_t token = 0;
};

// Where a read of memory happens: a load, a descriptor method or an atomic (its callee's token),
// in the kernel or in a helper (of the kernel's file or imported by name); or a call through a
// module imported whole (`import m` ... `m.f(x)`), whose functions the transformer does not
// follow (it may read anything it is given).
struct ReadSite {
  std::size_t token = 0;
  std::string function;            // the function whose body holds the token ("" for the kernel)
  std::string opaque_callee;       // set for a call through a module imported whole
  const Module* module = nullptr;  // whose tokens `token` indexes
};

// A call that reads memory through one of a set of names: the name it is given and where the
// read happens (the call itself, or inside the helper it calls, followed through its calls).
struct ReadThrough {
  NameUse use;
  ReadSite site;
};

class KernelFlow {
 public:
  // Reads the kernel and every helper it reaches, loading the modules it imports helpers from
  // through `loader` (throws TransformError when one cannot be found or read, or does not define
  // the name imported).
  KernelFlow(const Module& m, const Kernel& k, ModuleLoader& loader);
  KernelFlow(const KernelFlow&) = delete;
  KernelFlow& operator=(const KernelFlow&) = delete;

  const Module& module() const { return m_; }
  const Kernel& kernel() const { return k_; }

  // The compound statement (its header's logical line) that directly encloses `s`, if any
  // inside the kernel.
  std::optional<std::size_t> parent(std::size_t s) const { return parent_[s - k_.body_begin]; }
  bool is_loop(std::size_t s) const;
  bool is_while(std::size_t s) const;
  // Loops enclosing `s`, innermost first.
  std::vector<std::size_t> enclosing_loops(std::size_t s) const;
  // One past the last logical line of the block that `s` opens a suffix of: the first later
  // line indented less than `s`, or the kernel's end.
  std::size_t block_end(std::size_t s) const;
  // One past the last logical line of statement `s` (a compound statement whole, with its
  // else/elif/except/finally clauses).
  std::size_t statement_end(std::size_t s) const;
  // Is `inner` one of the lines of compound statement `outer` (its header included)?
  bool contains(std::size_t outer, std::size_t inner) const { return inner >= outer && inner < statement_end(outer); }

  // Names a line assigns as plain variables (not x[i] = ..., not x.a = ...).
  std::set<std::string> assigned(std::size_t s) const;
  // Plain names a line reads (the targets of a plain assignment are not reads).
  std::vector<NameUse> reads(std::size_t s) const;
  // Plain names read by the right-hand side of an assignment (or the iterable of a `for`),
  // skipping the arguments of calls whose result is data read from memory.
  std::vector<NameUse> value_reads(std::size_t s) const;
  std::vector<Call> calls(std::size_t s) const;
  // A compound statement's header as written, without its ':' and on one line, for messages
  // ("for tile_id in tl.range(start, n, step)").
  std::string header(std::size_t s) const;
  // The text of code tokens [from, to) of line `s`, single-spaced, for comparing expressions.
  std::string text(std::size_t s, std::size_t from, std::size_t to) const;

  // `for <target> in <iterable>:` pieces: the target names and the code-token range of the
  // iterable; nullopt for other lines.
  struct ForHeader {
    std::vector<std::string> targets;
    std::size_t iter_begin = 0, iter_end = 0;  // code indices
  };
  std::optional<ForHeader> for_header(std::size_t s) const;
  // The positional arguments of a `for` line's `range(...)` / `tl.range(...)` /
  // `tl.static_range(...)` iterable, as text (start "0" and step "1" when not written); nullopt
  // when the iterable is no such call. Stops at the first keyword argument.
  struct RangeArgs {
    std::string start = "0", stop, step = "1";
    bool has_stop = false;
    bool is_static = false;  // static_range: unrolled at compile time
  };
  std::optional<RangeArgs> range_args(std::size_t s) const;
  // `v += e` or `v = v + e` (or `v = e + v`) with `e` not reading v: {v, text of e}.
  std::optional<std::pair<std::string, std::string>> increment(std::size_t s) const;
  // `v = <expr>`: the expression's text.
  std::optional<std::string> plain_assignment(std::size_t s, const std::string& v) const;

  // What a call does to memory: a library load/store/atomic, a descriptor method, or a helper
  // (transitively). A call to anything else does nothing to memory.
  MemoryEffect effect(const Call& c) const;
  // Does a call name one of `names` in its arguments (or as its receiver)?
  std::optional<NameUse> mentions(const Call& c, const std::set<std::string>& names) const;
  // Does a call read memory through one of `names`? A library load or descriptor method given
  // one of them; a helper given one of them as an argument that its body (or a helper it calls)
  // reads through; a function of a module imported whole given one of them.
  std::optional<ReadThrough> read_through(const Call& c, const std::set<std::string>& names) const;

  // Names derived from `root` (itself included): assigned anywhere in the kernel from an
  // expression that reads a derived name (value_reads), iterated to a fixed point, so values
  // carried around loops count.
  std::set<std::string> derived_from(const std::string& root) const;

 private:
  // A module whose functions the kernel reaches: its text and its top-level imports.
  struct Scope {
    const Module* module = nullptr;
    std::set<std::string> imports;                   // names bound by top-level imports
    std::set<std::string> foreign_imports;           // ... of modules other than triton's
    std::map<std::string, FromImport> from_imports;  // `from m import f`, m not triton's: by local name
  };
  // A module-level function and what it does to memory: any memory (effect), and through
  // which of its parameters it reads (by parameter index; the first read found).
  struct Helper {
    const Scope* scope = nullptr;
    Function function;
    MemoryEffect effect;
    std::vector<std::optional<ReadSite>> reads;
  };
  using HelperKey = std::pair<const Scope*, std::string>;

  const Scope& kernel_scope() const { return *scopes_.front(); }
  const Scope& scope_of(const Module& m);
  // The function a plain call `name(...)` in `sc` runs, when the transformer knows it: a def of
  // that module, or one imported by name that the kernel reaches.
  const Helper* callee(const Scope& sc, const std::string& name) const;
  // Loads, from the kernel on, the helpers it calls (imports followed, re-exports too).
  void follow_calls();
  const Helper& resolve(const Scope& sc, const std::string& local, const Call& call);

  MemoryEffect call_effect(const Scope& sc, const Call& c) const;
  std::vector<NameUse> value_reads(const Scope& sc, std::size_t s) const;
  std::optional<ReadThrough> read_through(const Scope& sc, const Call& c, const std::set<std::string>& names) const;
  void compute_helper_effects();
  void compute_helper_reads();
  // Names derived from `root` within logical lines [begin, end) of `sc` (see derived_from).
  std::set<std::string> derived_in(const Scope& sc, const std::string& root, std::size_t begin, std::size_t end) const;
  // Is the call's function one of a module imported whole (other than triton's), not followed?
  bool opaque(const Scope& sc, const Call& c) const;

  const Module& m_;
  const Kernel& k_;
  ModuleLoader& loader_;
  std::vector<std::optional<std::size_t>> parent_;
  std::vector<std::unique_ptr<Scope>> scopes_;   // the kernel's module first, then imported ones
  std::map<HelperKey, Helper> helpers_;          // every module-level function of those modules
  std::map<HelperKey, const Helper*> imported_;  // names imported by `from ... import`, followed
};

// Every call of a logical line (tokens of `m`).
std::vector<Call> calls_in(const Module& m, const LogicalLine& l);

}  // namespace syncopate::transform::detail
