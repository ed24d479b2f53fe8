// Finding the source of an imported helper's module, as Python's import would.
#include "imports.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/core.h>

#include "syncopate/common/error.hpp"

namespace syncopate::transform::detail {

namespace fs = std::filesystem;

namespace {

// Leading dots of a relative import: "." and "..." are op tokens ("..." is one: Python's ELLIPSIS).
int dots(const Token& t) {
  if (t.kind != TokenKind::op || t.text.empty()) return -1;
  for (char c : t.text)
    if (c != '.') return -1;
  return static_cast<int>(t.text.size());
}

fs::path folder_of(std::string_view file) {
  fs::path dir = fs::path(file).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// The folder that holds the top-level package of a file in `dir`: up while the folder is a
// package (has __init__.py). `dir` itself when it is no package.
fs::path package_root(const fs::path& dir) {
  fs::path root = dir.lexically_normal();
  std::error_code ec;
  for (int guard = 0; guard < 64 && fs::exists(root / "__init__.py", ec); ++guard)
    root = (root / "..").lexically_normal();
  return root;
}

// `a.b.c` under `base`: base/a/b/c.py, then base/a/b/c/__init__.py ("" : base/__init__.py).
std::vector<fs::path> candidates(const fs::path& base, const std::string& dotted) {
  fs::path p = base;
  std::size_t start = 0;
  while (start < dotted.size()) {
    const std::size_t dot = std::min(dotted.find('.', start), dotted.size());
    p /= dotted.substr(start, dot - start);
    start = dot + 1;
  }
  if (dotted.empty()) return {(p / "__init__.py").lexically_normal()};
  fs::path file = p;
  file += ".py";
  return {file.lexically_normal(), (p / "__init__.py").lexically_normal()};
}

}  // namespace

std::string FromImport::text() const {
  return fmt::format("from {}{} import {}", std::string(static_cast<std::size_t>(level), '.'), module, name);
}

std::map<std::string, FromImport> from_imports(const Module& m) {
  std::map<std::string, FromImport> out;
  for (const auto& l : m.lines) {
    if (l.col != 1 || !m.first(l).is_name("from") || l.code.size() < 4) continue;
    FromImport base;
    base.token = l.code.front();
    std::size_t i = 1;
    for (int d; i < l.code.size() && (d = dots(m.tok(l, i))) > 0; ++i) base.level += d;
    for (; i < l.code.size() && !m.tok(l, i).is_name("import"); ++i) base.module += std::string(m.tok(l, i).text);
    if (base.level == 0 && (base.module == "triton" || base.module.rfind("triton.", 0) == 0)) continue;
    // Items after `import`: name [as alias], separated by commas, maybe in brackets.
    for (++i; i < l.code.size(); ++i) {
      const Token& t = m.tok(l, i);
      if (t.kind != TokenKind::name || is_keyword(t.text)) continue;
      FromImport imp = base;
      imp.name = std::string(t.text);
      std::string local = imp.name;
      if (i + 2 < l.code.size() && m.tok(l, i + 1).is_name("as")) {
        local = std::string(m.tok(l, i + 2).text);
        i += 2;
      }
      out[local] = std::move(imp);
    }
  }
  return out;
}

const Module& ModuleLoader::load(const Module& from, const FromImport& imp, const std::string& called_at) {
  std::vector<fs::path> bases;
  const fs::path dir = folder_of(from.filename);
  if (imp.level > 0) {
    fs::path base = dir;
    for (int up = 1; up < imp.level; ++up) base /= "..";
    bases.push_back(base);
  } else {
    for (const auto& p : module_paths_) bases.emplace_back(p);
    bases.push_back(dir);
    bases.push_back(package_root(dir));
  }
  std::vector<fs::path> looked;
  for (const auto& base : bases)
    for (const auto& c : candidates(base, imp.module))
      if (std::find(looked.begin(), looked.end(), c) == looked.end()) looked.push_back(c);
  const Token& at = from.tokens[imp.token];
  const std::string where = fmt::format("{}:{}:{}: {}", from.filename, at.line, at.col, imp.text());
  std::error_code ec;
  for (const auto& path : looked) {
    if (!fs::is_regular_file(path, ec)) continue;
    const std::string key = fs::weakly_canonical(path, ec).string();
    if (auto it = by_path_.find(key); it != by_path_.end()) return it->second->module;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    if (in) text << in.rdbuf();
    if (!in || in.bad())
      throw TransformError(
          fmt::format("{}: cannot read {} ({} calls '{}' from it, and the transformer reads an "
                      "imported helper's body to see what it does to memory)",
                      where, path.string(), called_at, imp.name));
    auto loaded = std::make_unique<Loaded>();
    loaded->path = path.string();
    loaded->source = text.str();
    loaded->module = read_module(loaded->source, loaded->path);
    return by_path_.emplace(key, std::move(loaded)).first->second->module;
  }
  std::string list;
  for (const auto& p : looked) list += (list.empty() ? "" : ", ") + p.string();
  throw TransformError(fmt::format(
      "{}: cannot find the module ({} calls '{}' from it, and the transformer reads an imported helper's body "
      "to see what it does to memory): looked for {}; {}",
      where, called_at, imp.name, list,
      imp.level > 0 ? "a relative import is found beside the importing file, so give the transformer the "
                      "kernel file's real path"
                    : "give the folder that holds the package as a module path (syncopate transform "
                      "--module-path DIR; Python: module_paths=[...], default sys.path)"));
}

}  // namespace syncopate::transform::detail
