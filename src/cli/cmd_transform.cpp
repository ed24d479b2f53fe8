// Placeholder until the transform subcommands land; registers nothing.
#include "commands.hpp"

namespace syncopate::cli {
void register_transform_commands(CLI::App& /*app*/) {}
}  // namespace syncopate::cli
