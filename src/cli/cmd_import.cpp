// `syncopate import` (a plan from MSCCL XML, an MSCCL++ execution plan or a send/recv list,
// verified, as plan JSON) and `syncopate export` (a plan as MSCCL XML).
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli_args.hpp"
#include "commands.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/import.hpp"
#include "syncopate/plan/json.hpp"
#include "text_files.hpp"

namespace syncopate::cli {
namespace {

using namespace syncopate::plan;

struct ImportArgs {
  std::string format, file, output, tensor, shape, dtype, backend = "copy-engine", out_tensor, scratch;
  int dim = -1;
};

void run_import(const ImportArgs& a) {
  const ImportFormat format = *parse_enum<ImportFormat>(a.format);  // CLI11 checked the spelling
  ImportOptions o;
  const bool tensor_options = !a.tensor.empty() || !a.shape.empty() || a.dim >= 0 || !a.dtype.empty() ||
                              !a.out_tensor.empty() || !a.scratch.empty();
  if (format == ImportFormat::sendrecv) {
    if (tensor_options)
      throw CLI::ValidationError("--from sendrecv",
                                 "a send/recv list names its tensors itself; --tensor, --shape, --dim, --dtype, "
                                 "--output-tensor and --scratch apply to msccl-xml and mscclpp-json");
  } else {
    if (a.shape.empty())
      throw CLI::ValidationError("--shape", fmt::format("--from {} needs the op's full tensor shape, e.g. --shape "
                                                        "8192x4096 (the format counts in chunks of it)",
                                                        a.format));
    o.shape = *parse_sizes(a.shape);
    if (!a.tensor.empty()) o.tensor = a.tensor;
    if (!a.out_tensor.empty()) o.output = a.out_tensor;
    if (!a.scratch.empty()) o.scratch = a.scratch;
    if (a.dim >= 0) o.dim = a.dim;
    if (!a.dtype.empty()) o.dtype = *parse_enum<DType>(a.dtype);
  }
  o.backend = *parse_enum<Backend>(a.backend);
  const ImportedPlan imported = import_plan_file(a.file, format, o);
  if (a.output.empty() || a.output == "-")
    fmt::print("{}", plan_to_json(imported.plan));
  else
    save_plan(imported.plan, a.output);
  const CommPlan& p = imported.plan;
  std::size_t streams = 0;
  for (const auto& r : p.ranks) streams += r.streams.size();
  fmt::print(stderr, "{}: imported {} {}, world {}, {} chunks in {} streams; verified\n", a.file,
             to_string(p.collective.kind), a.format, p.world_size, p.chunks.size(), streams);
  for (const auto& note : imported.notes) fmt::print(stderr, "  note: {}\n", note);
}

struct ExportArgs {
  std::string format = "msccl-xml", file, output, name;
};

void run_export(const ExportArgs& a) {
  const CommPlan plan = load_plan(a.file);
  write_text_file(a.output, export_msccl_xml(plan, a.name.empty() ? "syncopate" : a.name), "MSCCL XML");
}

}  // namespace

void register_import_commands(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import", "Map a plan from MSCCL XML, an MSCCL++ execution plan or a send/recv list onto a verified plan");
  cmd->add_option("--from", args->format, "Format of FILE")->required()->check(enum_validator<ImportFormat>());
  cmd->add_option("file", args->file, "The plan to import")->required();
  cmd->add_option("-o,--output", args->output, "Plan JSON to write (default: stdout)");
  cmd->add_option("--tensor", args->tensor, "Name of the collective's tensor in the plan (default x)");
  cmd->add_option("--shape", args->shape, "Full tensor shape, e.g. 8192x4096 (msccl-xml, mscclpp-json)")
      ->check(sizes_validator(0, "SHAPE"));
  cmd->add_option("--dim", args->dim, "Dimension the format's chunks cut (default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", args->dtype, "Element type (default bf16)")->check(enum_validator<DType>());
  cmd->add_option("--output-tensor", args->out_tensor, "All-to-all: name of the output tensor (default y)");
  cmd->add_option("--scratch", args->scratch, "Name of the scratch buffer's tensor (default scratch)");
  // NCCL needs both sides of a chunk in streams of matching numbers, which imports do not build.
  cmd->add_option("--backend", args->backend, "Backend every chunk uses")
      ->check(CLI::IsMember({"copy-engine", "sm-copy"}))
      ->capture_default_str();
  cmd->callback([args] { run_import(*args); });

  auto eargs = std::make_shared<ExportArgs>();
  CLI::App* exp = app.add_subcommand("export", "Write a plan as MSCCL algorithm XML");
  exp->add_option("--to", eargs->format, "Format to write")->check(CLI::IsMember({"msccl-xml"}))->capture_default_str();
  exp->add_option("plan", eargs->file, "Plan JSON file")->required();
  exp->add_option("-o,--output", eargs->output, "XML file to write (default: stdout)");
  exp->add_option("--name", eargs->name, "The algorithm's name attribute (default syncopate)");
  exp->callback([eargs] { run_export(*eargs); });
}

}  // namespace syncopate::cli
