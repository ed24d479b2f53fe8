// Placeholder until the demo subcommands land; registers nothing.
#include "commands.hpp"

namespace syncopate::cli {
void register_demo_commands(CLI::App& /*app*/) {}
}  // namespace syncopate::cli
