// Argument parsing shared by the subcommands: "MxNxK"-style size lists and enum spellings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "syncopate/plan/enums.hpp"

namespace syncopate::cli {

// "8192x4096x1024" -> {8192, 4096, 1024}: positive integers joined by 'x'. With parts > 0 the
// list must have exactly that many; an empty optional when it does not parse.
std::optional<std::vector<std::int64_t>> parse_sizes(std::string_view text, std::size_t parts = 0);

// Accepts what parse_sizes(text, parts) accepts; `what` names the form, e.g. "MxNxK".
CLI::Validator sizes_validator(std::size_t parts, std::string what);

// Accepts the spellings of EnumTable<E> (plan/enums.hpp), listing them when it refuses.
template <class E>
CLI::Validator enum_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        return plan::parse_enum<E>(value) ? ""
                                          : fmt::format("expected one of {}, got '{}'", plan::enum_choices<E>(), value);
      },
      plan::enum_choices<E>());
}

// The topology options of `plan` and `tune`: --nodes N (N nodes of world / N consecutive
// ranks, torchrun's numbering) or --gpus-per-node G (world / G nodes of G); both may be given
// if they agree. Neither: {} (one node). Throws UserError naming the options otherwise.
struct TopologyArgs {
  int nodes = 0;
  int gpus_per_node = 0;
};
void add_topology_options(CLI::App& command, TopologyArgs& args);
std::vector<int> topology_nodes(const TopologyArgs& args, int world_size);

}  // namespace syncopate::cli
