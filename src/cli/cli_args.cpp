#include "cli_args.hpp"

#include <charconv>

#include "syncopate/common/error.hpp"
#include "syncopate/plan/templates.hpp"

namespace syncopate::cli {

std::optional<std::vector<std::int64_t>> parse_sizes(std::string_view text, std::size_t parts) {
  std::vector<std::int64_t> sizes;
  while (true) {
    const auto cut = text.find('x');
    const std::string_view part = text.substr(0, cut);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || value < 1) return std::nullopt;
    sizes.push_back(value);
    if (cut == std::string_view::npos) break;
    text.remove_prefix(cut + 1);
  }
  if (parts != 0 && sizes.size() != parts) return std::nullopt;
  return sizes;
}

CLI::Validator sizes_validator(std::size_t parts, std::string what) {
  return CLI::Validator(
      [parts, what](std::string& value) -> std::string {
        if (parse_sizes(value, parts)) return {};
        return fmt::format("expected {} (positive integers joined by 'x'), got '{}'", what, value);
      },
      what);
}

void add_topology_options(CLI::App& command, TopologyArgs& args) {
  command
      .add_option("--nodes", args.nodes,
                  "Nodes the ranks span (consecutive ranks per node); several: a multi-node plan")
      ->check(CLI::Range(1, 1024));
  command.add_option("--gpus-per-node", args.gpus_per_node, "Ranks per node (instead of --nodes)")
      ->check(CLI::Range(1, 1024));
}

std::vector<int> topology_nodes(const TopologyArgs& args, int world_size) {
  if (args.nodes == 0 && args.gpus_per_node == 0) return {};
  int nodes = args.nodes;
  if (args.gpus_per_node > 0) {
    if (world_size % args.gpus_per_node != 0)
      throw UserError(
          fmt::format("--gpus-per-node {}: world {} is not a multiple of it", args.gpus_per_node, world_size));
    const int from_gpus = world_size / args.gpus_per_node;
    if (nodes > 0 && nodes != from_gpus)
      throw UserError(fmt::format("--nodes {} and --gpus-per-node {} disagree for world {} ({} nodes)", nodes,
                                  args.gpus_per_node, world_size, from_gpus));
    nodes = from_gpus;
  }
  if (world_size % nodes != 0)
    throw UserError(fmt::format("--nodes {}: world {} is not a multiple of it (nodes hold equal numbers of ranks)",
                                nodes, world_size));
  return plan::consecutive_nodes(world_size, nodes);
}

}  // namespace syncopate::cli
