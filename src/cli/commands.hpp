// Each file cmd_<name>.cpp registers its subcommands on the root CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace syncopate::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;   // the input is wrong (bad plan, bad kernel, ...)
inline constexpr int kExitUsage = 2;     // bad command-line arguments
inline constexpr int kExitInternal = 3;  // a bug in syncopate

void register_plan_commands(CLI::App& app);       // plan, verify, show
void register_lower_commands(CLI::App& app);      // lower, schedule
void register_simulate_commands(CLI::App& app);   // simulate
void register_transform_commands(CLI::App& app);  // transform
void register_demo_commands(CLI::App& app);       // demo
void register_import_commands(CLI::App& app);     // import, export

}  // namespace syncopate::cli
