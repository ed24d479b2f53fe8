// Placeholder until the simulate subcommands land; registers nothing.
#include "commands.hpp"

namespace syncopate::cli {
void register_simulate_commands(CLI::App& /*app*/) {}
}  // namespace syncopate::cli
