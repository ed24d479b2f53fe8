// Internal: the modules a kernel's helpers are imported from (docs/ANNOTATIONS.md, "Helpers").
//
// A kernel may call a helper that another module defines (`from .gemm import tma_k_loop`). The
// transformer must read that helper's body to know what it does to memory (a read of the
// consumed tensor, the store a `@sy.produce` marks), so it finds the module's source the way
// Python would: a relative import beside the importing file, an absolute one under the module
// paths it is given, the importing file's own folder, or the folder that holds the importing
// file's top-level package. Triton's own modules are the language, judged by name, never read.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "source_model.hpp"

namespace syncopate::transform::detail {

// `from <module> import <name> [as <local>]` at a module's top level.
struct FromImport {
  std::string module;     // the dotted name as written, without leading dots ("" in `from . import f`)
  int level = 0;          // leading dots: 0 absolute, 1 the importing file's folder, 2 its parent, ...
  std::string name;       // the name in that module
  std::size_t token = 0;  // the `from` token (for file:line:col)

  // "from .gemm import tma_k_loop", for messages.
  std::string text() const;
};

// The `from ... import` bindings of `m`'s top level, by the local name they bind, except those of
// triton's modules (the language) and star imports.
std::map<std::string, FromImport> from_imports(const Module& m);

// Finds and reads imported modules, each once; owns their text and tokens for the whole
// transformation (the Modules it returns stay valid as long as the loader).
class ModuleLoader {
 public:
  // `module_paths`: folders searched first for absolute imports (the CLI's --module-path, the
  // Python binding's module_paths, which defaults to sys.path).
  explicit ModuleLoader(std::vector<std::string> module_paths) : module_paths_(std::move(module_paths)) {}

  // The module `imp` names, imported by the file `from`. Throws TransformError naming the import
  // (from's file:line:col) and the files looked for when it is not found or cannot be read;
  // `called_at` ("k.py:40:9") says which call needed it.
  const Module& load(const Module& from, const FromImport& imp, const std::string& called_at);

 private:
  struct Loaded {
    std::string path, source;
    Module module;
  };
  std::vector<std::string> module_paths_;
  std::map<std::string, std::unique_ptr<Loaded>> by_path_;
};

}  // namespace syncopate::transform::detail
