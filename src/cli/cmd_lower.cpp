// Placeholder until the lower subcommands land; registers nothing.
#include "commands.hpp"

namespace syncopate::cli {
void register_lower_commands(CLI::App& /*app*/) {}
}  // namespace syncopate::cli
