// Placeholder until the plan subcommands land; registers nothing.
#include "commands.hpp"

namespace syncopate::cli {
void register_plan_commands(CLI::App& /*app*/) {}
}  // namespace syncopate::cli
