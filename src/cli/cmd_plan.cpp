// `syncopate plan` (make a plan from a template), `verify` (check plan files) and `show`
// (print a plan per rank, in issue order).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>

#include "cli_args.hpp"
#include "commands.hpp"
#include "syncopate/common/error.hpp"
#include "syncopate/plan/json.hpp"
#include "syncopate/plan/templates.hpp"
#include "syncopate/plan/verify.hpp"

namespace syncopate::cli {
namespace {

using namespace syncopate::plan;

// Accepted spellings, read from the one enum table (custom plans have no template).
template <class E>
std::vector<std::string> spellings(bool with_custom = true) {
  std::vector<std::string> out;
  for (const auto& [value, name] : EnumTable<E>::entries)
    if (with_custom || name != "custom") out.emplace_back(name);
  return out;
}

struct PlanArgs {
  std::string collective, algorithm = "ring", shape, dtype = "bf16", backend = "copy-engine", output;
  std::string staging;  // non-empty: a staged reduce-scatter / all-reduce into this tensor
  std::string tensor = TemplateOptions{}.tensor, output_tensor = TemplateOptions{}.output;
  int world = 0, split = 1, dim = 0;
  TopologyArgs topology;
  bool flat = false;
};

void run_plan(const PlanArgs& a) {
  TemplateOptions o;
  o.collective = *parse_enum<Collective>(a.collective);  // CLI11 checked the spellings
  o.algorithm = *parse_enum<Algorithm>(a.algorithm);
  o.dtype = *parse_enum<DType>(a.dtype);
  o.backend = *parse_enum<Backend>(a.backend);
  o.world_size = a.world;
  o.split = a.split;
  o.dim = a.dim;
  o.shape = *parse_sizes(a.shape);
  o.staging = a.staging;
  o.tensor = a.tensor;
  o.output = a.output_tensor;
  o.nodes = topology_nodes(a.topology, a.world);
  o.flat = a.flat;
  const CommPlan plan = make_plan(o);
  if (a.output.empty() || a.output == "-")
    fmt::print("{}", plan_to_json(plan));
  else
    save_plan(plan, a.output);
}

int stream_count(const CommPlan& plan) {
  int n = 0;
  for (const auto& r : plan.ranks) n += static_cast<int>(r.streams.size());
  return n;
}

void run_verify(const std::vector<std::string>& files) {
  int failed = 0;
  for (const auto& file : files) {
    try {
      const CommPlan plan = load_plan(file);
      const VerifyReport report = verify(plan);
      if (report.ok()) {
        fmt::print("{}: ok: {} {} (split {}), world {}, {} chunks, {} streams\n", file, to_string(plan.collective.kind),
                   to_string(plan.collective.algorithm), plan.collective.split, plan.world_size, plan.chunks.size(),
                   stream_count(plan));
      } else {
        ++failed;
        const std::string text = report.format(file);
        fmt::print(stderr, "{}{}", text, text.ends_with('\n') ? "" : "\n");
      }
    } catch (const UserError& e) {  // unreadable file or malformed JSON: report it, go on
      ++failed;
      fmt::print(stderr, "{}\n", e.what());
    }
  }
  if (failed > 0) throw PlanVerifyError(fmt::format("{} of {} plan files failed verification", failed, files.size()));
}

std::string box_text(const std::string& tensor, const Box& box) {
  std::vector<std::string> ranges;
  for (std::size_t d = 0; d < box.offset.size() && d < box.extent.size(); ++d)
    ranges.push_back(fmt::format("{}:{}", box.offset[d], box.offset[d] + box.extent[d]));
  return fmt::format("{}[{}]", tensor, fmt::join(ranges, ","));
}

// One table per rank: every chunk it issues, stream by stream, in issue order. A plan that
// would not verify still prints (ids out of range show as such): show is for debugging.
void run_show(const std::string& file) {
  const CommPlan plan = load_plan(file);
  fmt::print("{}: {} {} along dim {} (split {}), world {}, {} chunks\n", file, to_string(plan.collective.kind),
             to_string(plan.collective.algorithm), plan.collective.dim, plan.collective.split, plan.world_size,
             plan.chunks.size());
  for (const auto& [name, spec] : plan.tensors)
    fmt::print("  tensor {}: {} {} {}\n", name, fmt::join(spec.shape, "x"), to_string(spec.dtype), spec.layout);
  const std::vector<std::string> header{"stream", "id", "role", "src->dst", "box", "op", "backend", "deps"};
  for (const auto& program : plan.ranks) {
    std::vector<std::vector<std::string>> rows;
    for (std::size_t s = 0; s < program.streams.size(); ++s)
      for (int id : program.streams[s]) {
        if (id < 0 || id >= static_cast<int>(plan.chunks.size())) {
          rows.push_back({std::to_string(s), std::to_string(id), "?", "(no such chunk)", "", "", "", ""});
          continue;
        }
        const Chunk& c = plan.chunks[id];
        std::string box = box_text(c.tensor, c.box);
        if (c.dst_tensor != c.tensor || c.dst_box != c.box) box += " -> " + box_text(c.dst_tensor, c.dst_box);
        // Which side of the chunk this rank issues ("?" for a plan listing it on a bystander).
        const char* role = c.src == program.rank   ? (c.dst == c.src ? "local" : "send")
                           : c.dst == program.rank ? "recv"
                                                   : "?";
        rows.push_back({std::to_string(s), std::to_string(id), role, fmt::format("{}->{}", c.src, c.dst), box,
                        std::string(to_string(c.op)), std::string(to_string(c.backend)),
                        c.deps.empty() ? "-" : fmt::format("{}", fmt::join(c.deps, ","))});
      }
    std::vector<std::size_t> width(header.size());
    for (std::size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& row : rows)
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    auto print_row = [&](const std::vector<std::string>& row) {
      std::string line = "  ";
      for (std::size_t i = 0; i < row.size(); ++i) line += fmt::format("{:<{}}  ", row[i], width[i]);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      fmt::print("{}\n", line);
    };
    fmt::print("\nrank {} ({} streams, {} entries)\n", program.rank, program.streams.size(), rows.size());
    print_row(header);
    for (const auto& row : rows) print_row(row);
  }
}

}  // namespace

void register_plan_commands(CLI::App& app) {
  auto plan_args = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand("plan", "Make a communication plan from a template and write it as JSON");
  plan->add_option("--collective", plan_args->collective, "Collective to plan")
      ->required()
      ->check(CLI::IsMember(spellings<Collective>(false)));
  plan->add_option("--algo", plan_args->algorithm, "Algorithm")
      ->check(CLI::IsMember(spellings<Algorithm>()))
      ->capture_default_str();
  plan->add_option("--world", plan_args->world, "World size (number of ranks), 1 to 1024")->required();
  plan->add_option("--split", plan_args->split, "Sub-chunks per shard along --dim")->capture_default_str();
  plan->add_option("--shape", plan_args->shape, "Full tensor shape, e.g. 8192x4096")
      ->required()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return parse_sizes(text) ? "" : "expected sizes >= 1 joined by 'x' (e.g. 8192x4096), got " + text;
          },
          "SHAPE"));
  plan->add_option("--dtype", plan_args->dtype, "Element type")
      ->check(CLI::IsMember(spellings<DType>()))
      ->capture_default_str();
  plan->add_option("--dim", plan_args->dim, "Dimension the collective gathers or scatters along")
      ->capture_default_str();
  plan->add_option("--backend", plan_args->backend, "Backend every chunk uses")
      ->check(CLI::IsMember(spellings<Backend>()))
      ->capture_default_str();
  plan->add_option("--staging", plan_args->staging,
                   "Staged reduce-scatter / all-reduce: land each rank's partial in this staging tensor "
                   "for a consumer (the GEMM's epilogue) to sum; needs --algo direct, a shape 1xMxN and --dim 1");
  plan->add_option("--tensor", plan_args->tensor,
                   "Name of the communicated tensor, as kernels annotate it (e.g. a for a_ptr)")
      ->capture_default_str();
  plan->add_option("--output-tensor", plan_args->output_tensor, "Name of an all-to-all's output tensor")
      ->capture_default_str();
  add_topology_options(*plan, plan_args->topology);
  plan->add_flag("--flat", plan_args->flat,
                 "With several nodes: one flat plan over all ranks (needs --backend nccl) instead of the "
                 "hierarchical one (NCCL between nodes, --algo and --backend inside each)");
  plan->add_option("-o,--output", plan_args->output, "Output file (default: stdout)");
  plan->callback([plan_args] { run_plan(*plan_args); });

  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* verify_cmd =
      app.add_subcommand("verify", "Check plan files; exit 0 if all are safe, 1 with every violation otherwise");
  verify_cmd->add_option("plans", *files, "Plan JSON files")->required();
  verify_cmd->callback([files] { run_verify(*files); });

  auto show_file = std::make_shared<std::string>();
  CLI::App* show = app.add_subcommand("show", "Print a plan as a per-rank table of chunks in issue order");
  show->add_option("plan", *show_file, "Plan JSON file")->required();
  show->callback([show_file] { run_show(*show_file); });
}

}  // namespace syncopate::cli
