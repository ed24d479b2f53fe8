// `syncopate transform kernel.py --kernel NAME[,NAME...] [--plan plan.json] [-o out.py]
//                      [--describe d.json] [--check problems.py:function] [--module-path DIR...]`
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "gpu_demo.hpp"
#include "text_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::cli {

namespace {

struct TransformArgs {
  std::string input;
  std::vector<std::string> kernels;  // --kernel, repeated or comma-separated
  std::string plan;
  std::string output;
  std::string describe;
  std::string check;                      // problems.py:function for the checking mode
  std::vector<std::string> module_paths;  // where imported helpers' modules are looked for
};

std::vector<std::string> kernel_names(const std::vector<std::string>& given) {
  std::vector<std::string> names;
  for (const auto& item : given) {
    std::size_t start = 0;
    while (start <= item.size()) {
      const std::size_t comma = std::min(item.find(',', start), item.size());
      if (comma > start) names.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return names;
}

// The checking mode lives in the Python package (it runs the kernel under Triton's
// interpreter): `python -m syncopate.check`, with the same kernels, plan and problem.
int run_check(const TransformArgs& args, const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
  std::vector<std::string> argv{demo_python(), "-m",   "syncopate.check", args.input,
                                "--kernel",    joined, "--problem",       args.check};
  if (!args.plan.empty()) argv.insert(argv.end(), {"--plan", args.plan});
  const int status = run_process(argv, false);
  if (status < 0)
    throw UserError(
        fmt::format("--check: cannot run {} -m syncopate.check; set SYNCOPATE_PYTHON to a python "
                    "with syncopate, torch and triton installed",
                    argv[0]));
  return status;
}

int run_transform(const TransformArgs& args) {
  const std::string source = read_text_file(args.input, "kernel");
  std::optional<plan::CommPlan> plan;
  transform::TransformOptions options;
  options.module_paths = args.module_paths;
  if (!args.plan.empty()) {
    plan = plan::load_plan(args.plan);
    options.plan = &*plan;
  }
  const auto names = kernel_names(args.kernels);
  if (names.empty()) throw UserError("--kernel: no kernel name given");
  const auto results = transform::transform_kernels(source, args.input, names, options);
  write_text_file(args.output, results.front().source, "output");
  if (!args.describe.empty()) {
    std::string text;
    if (results.size() == 1) {
      text = transform::describe_json(results.front());
    } else {  // a JSON array, one object per kernel
      for (const auto& r : results) {
        std::string one = transform::describe_json(r);
        while (!one.empty() && one.back() == '\n') one.pop_back();
        text += (text.empty() ? "[\n" : ",\n") + one;
      }
      text += "\n]\n";
    }
    write_text_file(args.describe, text, "describe");
  }
  return args.check.empty() ? 0 : run_check(args, names);
}

}  // namespace

void register_transform_commands(CLI::App& app) {
  auto args = std::make_shared<TransformArgs>();
  auto* cmd = app.add_subcommand("transform",
                                 "Rewrite an annotated local Triton kernel into the overlapped kernel "
                                 "(docs/ANNOTATIONS.md)");
  cmd->add_option("kernel_file", args->input, "Python file holding the @triton.jit kernel")->required();
  cmd->add_option("--kernel,-k", args->kernels,
                  "name of the kernel function; repeat it or separate names with commas to rewrite several "
                  "kernels of the file into one output")
      ->required();
  cmd->add_option("--plan,-p", args->plan, "plan JSON: check that annotated tensors exist in it");
  cmd->add_option("--output,-o", args->output, "output file (default: standard output)");
  cmd->add_option("--describe", args->describe,
                  "also write the added parameters and accesses as JSON to this file ('-': stdout)");
  cmd->add_option("--module-path", args->module_paths,
                  "folder searched first for the module of a helper the kernel imports by absolute name "
                  "(from pkg.mod import f: DIR/pkg/mod.py); repeat it for several. The kernel file's folder and "
                  "the folder holding its package are searched after; relative imports are found beside the file");
  cmd->add_option("--check", args->check,
                  "then run the checking mode (python -m syncopate.check) with this problem, file.py:function: "
                  "late chunks under Triton's interpreter; exit 1 if a tile read before its wait or notified "
                  "before its store");
  cmd->callback([args] {
    // The check's verdict is the command's: CLI11 callbacks cannot return a status.
    if (const int status = run_transform(*args); status != 0) {
      std::fflush(stdout);
      std::exit(status);
    }
  });
}

}  // namespace syncopate::cli
