// `syncopate transform kernel.py --kernel NAME [--plan plan.json] [-o out.py] [--describe d.json]`
#include <memory>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "text_files.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/transform/transform.hpp"

namespace syncopate::cli {

namespace {

struct TransformArgs {
  std::string input;
  std::string kernel;
  std::string plan;
  std::string output;
  std::string describe;
};

void run_transform(const TransformArgs& args) {
  const std::string source = read_text_file(args.input, "kernel");
  std::optional<plan::CommPlan> plan;
  transform::TransformOptions options;
  if (!args.plan.empty()) {
    plan = plan::load_plan(args.plan);
    options.plan = &*plan;
  }
  const auto result = transform::transform_kernel(source, args.input, args.kernel, options);
  write_text_file(args.output, result.source, "output");
  if (!args.describe.empty()) write_text_file(args.describe, transform::describe_json(result), "describe");
}

}  // namespace

void register_transform_commands(CLI::App& app) {
  auto args = std::make_shared<TransformArgs>();
  auto* cmd = app.add_subcommand(
      "transform", "Rewrite an annotated local Triton kernel into the overlapped kernel "
                   "(docs/ANNOTATIONS.md)");
  cmd->add_option("kernel_file", args->input, "Python file holding the @triton.jit kernel")->required();
  cmd->add_option("--kernel,-k", args->kernel, "name of the kernel function")->required();
  cmd->add_option("--plan,-p", args->plan, "plan JSON: check that annotated tensors exist in it");
  cmd->add_option("--output,-o", args->output, "output file (default: standard output)");
  cmd->add_option("--describe", args->describe,
                  "also write the added parameters and accesses as JSON to this file ('-': stdout)");
  cmd->callback([args] { run_transform(*args); });
}

}  // namespace syncopate::cli
