// The source-to-source transformer: a local Triton kernel with `# @sy.` annotations becomes the
// overlapped kernel (docs/ANNOTATIONS.md defines the annotations and the output).
//
// When it may run: on any source text; it needs no plan, but given one it also checks that each
// consumed/produced tensor exists in it. It reads no file but, when the kernel calls a helper
// imported by name from another module, that module's source (TransformOptions::module_paths).
// It reads the source with a real Python tokenizer and rewrites only what the annotations mark:
// the tile block becomes a TileOrder lookup, a consume gets a bounded wait before it, a produce a
// notify after it, the kernel gets the parameters of `added_params`, and the module imports
// `syncopate.language as syl`. Every inserted line ends with `# [syncopate]`; all other lines are
// kept byte for byte.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "syncopate/lower/tiling.hpp"
#include "syncopate/plan/comm_plan.hpp"

namespace syncopate::transform {

// Marks every line the transformer inserts or comments out.
inline constexpr std::string_view kInsertedMark = "# [syncopate]";
// Version of the output convention (parameter list, `__syncopate__` dict); the launcher checks it.
inline constexpr int kOutputVersion = 2;  // 2: sy_epoch is a pointer to the device epoch word

struct TransformOptions {
  // Optional: when set, every annotated tensor must exist in the plan with enough dimensions.
  const plan::CommPlan* plan = nullptr;
  // The module the output imports as `syl`: Syncopate's device primitives (language.py).
  std::string language_module = "syncopate.language";
  // Folders searched first for the modules of helpers imported by absolute name (`from
  // pkg.mod import f`: <dir>/pkg/mod.py or <dir>/pkg/mod/__init__.py); then the kernel file's own
  // folder and the folder holding its top-level package. A relative import (`from .mod import
  // f`) is found beside the importing file, so `filename` must be the kernel file's real path
  // when it imports helpers. docs/ANNOTATIONS.md, "Helpers".
  std::vector<std::string> module_paths;
};

// A parameter appended to the kernel signature, in order.
struct AddedParam {
  std::string name;     // e.g. "sy_signals"
  std::string type;     // "int32*", "int64*", "int" or "constexpr" (a tl.constexpr parameter)
  std::string meaning;  // one line, for docs and error messages
};

// One consume/produce annotation, as lowering needs it (TileAccess) plus where it came from.
struct AnnotatedAccess {
  lower::TileAccess access;  // tensor name in the plan, role, m_dim / n_dim, m_local_shard
  std::string param;         // the kernel parameter the annotation names
  int line = 0;              // of the annotation comment
  // `@sy.consume_block`: the wait sits inside the loop over the tensor's blocks and covers one
  // block (access.m_dim is the blocked dimension, -1 when not given); `arrival_order`: the loop
  // visits its blocks in the order the plan lands them.
  bool per_block = false;
  bool arrival_order = false;
};

struct TransformResult {
  std::string source;  // the transformed module
  std::string kernel_name;
  std::vector<std::string> kernel_params;  // the user's parameters, in order
  std::vector<AddedParam> added_params;    // appended by the transformer, in order (with the
                                           // block_params() when the kernel waits per block)
  std::vector<AnnotatedAccess> accesses;   // consume/produce annotations, in source order
  int tile_blocks = 0;                     // number of @sy.tile blocks rewritten
};

// The parameters every transformed kernel gets, in signature order.
const std::vector<AddedParam>& added_params();
// The parameters a kernel with a `@sy.consume_block` gets after added_params(), in order.
const std::vector<AddedParam>& block_params();

// Transforms the `@triton.jit` function `kernel_name` of `source`. `filename` names the input in
// errors, and its folder is where the modules of helpers imported relatively are found. Throws
// TransformError "<filename>:<line>:<col>: <annotation or subject>: <rule>".
TransformResult transform_kernel(std::string_view source, std::string_view filename, std::string_view kernel_name,
                                 const TransformOptions& options = {});

// Transforms several `@triton.jit` functions of one file into one output: one import, each
// kernel rewritten as transform_kernel would, and one `__syncopate__` dict describing them all
// (under "kernels", by name). One result per kernel, in the order given, each holding the whole
// output. Throws TransformError as transform_kernel does, UserError for an empty or repeated name.
std::vector<TransformResult> transform_kernels(std::string_view source, std::string_view filename,
                                               const std::vector<std::string>& kernel_names,
                                               const TransformOptions& options = {});

// The transform result without the source, as JSON (for `--describe`, bindings and tests).
std::string describe_json(const TransformResult& result, int indent = 2);

}  // namespace syncopate::transform
